import ConciergeCore
import Foundation
import Hummingbird

/// The OAuth2 dialect (RFC 6749/6750): a form-only token endpoint with the password and
/// refresh-token grants (refresh tokens rotate), Bearer tokens that really expire after
/// `expires_in`, 401 with `WWW-Authenticate` on a bad token, plain JSON replies without a code.
extension SampleAPIRoutes {
    func addOAuth2Routes(_ router: Router<BasicRequestContext>) {
        router.post("/oauth/token") { request, _ in try await self.oauthToken(request) }
        router.post("/oauth/revoke") { request, _ in try await self.oauthRevoke(request) }
        router.get("/api/me") { request, _ in
            try await self.withBearer(request) { user in
                SampleReply.json(["id": .string(user), "name": .string("Sample User \(user)"), "calls": .int(Int64(self.state.calls("/api/me")))])
            }
        }
        router.get("/api/items") { request, _ in
            try await self.withBearer(request) { _ in
                SampleReply.json(["items": .array((1...3).map(Self.itemJSON)), "served": .int(Int64(self.state.calls("/api/items")))])
            }
        }
        router.get("/api/forbidden") { request, _ in
            try await self.withBearer(request) { _ in
                SampleReply.json(["error": "insufficient_scope", "error_description": "the token lacks the admin scope"], status: .forbidden)
            }
        }
    }

    func oauthToken(_ request: Request) async throws -> Response {
        let contentType = request.headers[.contentType]?.lowercased() ?? ""
        guard contentType.hasPrefix("application/x-www-form-urlencoded") else {
            return Self.oauthError("invalid_request", "the token endpoint takes application/x-www-form-urlencoded only", status: .badRequest)
        }
        let params = try await parameters(of: request)
        var clientID = params.bodyValue("client_id")
        var clientSecret = params.bodyValue("client_secret")
        if let basic = request.headers[.authorization], basic.lowercased().hasPrefix("basic "),
           let decoded = Data(base64Encoded: String(basic.dropFirst(6))).map({ String(decoding: $0, as: UTF8.self) }),
           let colon = decoded.firstIndex(of: ":") {
            clientID = String(decoded[..<colon])
            clientSecret = String(decoded[decoded.index(after: colon)...])
        }
        guard clientID == configuration.clientID, clientSecret == configuration.clientSecret else {
            return Self.oauthError("invalid_client", "client authentication failed", status: .unauthorized)
        }
        switch params.bodyValue("grant_type") {
        case "password":
            state.countLogin()
            guard let username = params.bodyValue("username"), !username.isEmpty,
                  let password = params.bodyValue("password"), !password.isEmpty
            else { return Self.oauthError("invalid_grant", "bad username or password", status: .badRequest) }
            return oauthTokens(state.issueTokens(for: username))
        case "refresh_token":
            state.countRefresh()
            if configuration.refreshDelay > .zero { try await Task.sleep(for: configuration.refreshDelay) }
            if let fault = state.tokenEndpointFault { return Self.failure(fault) }
            guard let refreshToken = params.bodyValue("refresh_token"), let tokens = state.rotateTokens(refreshToken: refreshToken) else {
                return Self.oauthError("invalid_grant", "the refresh token is invalid, expired or revoked", status: .badRequest)
            }
            return oauthTokens(tokens)
        default:
            return Self.oauthError("unsupported_grant_type", "use password or refresh_token", status: .badRequest)
        }
    }

    /// RFC 7009: `token` (and an optional `token_type_hint`), client authentication as for the
    /// token endpoint; 200 with an empty body, also for an unknown token.
    func oauthRevoke(_ request: Request) async throws -> Response {
        let params = try await parameters(of: request)
        guard let token = params.bodyValue("token"), !token.isEmpty else {
            return Self.oauthError("invalid_request", "token is required", status: .badRequest)
        }
        state.revoke(token: token)
        return Response(status: .ok, body: .init())
    }

    func oauthTokens(_ tokens: TokenRegistry.TokenPair) -> Response {
        SampleReply.json([
            "access_token": .string(tokens.accessToken), "token_type": "Bearer",
            "expires_in": .int(Int64(configuration.accessTokenLifetimeSeconds)), "refresh_token": .string(tokens.refreshToken),
        ], headers: [.cacheControl: "no-store"])
    }

    /// Runs `body` for a valid Bearer token; else 401 with RFC 6750's `WWW-Authenticate`.
    func withBearer(_ request: Request, _ body: (String) -> Response) async throws -> Response {
        guard let header = request.headers[.authorization], header.lowercased().hasPrefix("bearer ") else {
            return SampleReply.json(["error": "invalid_request"], status: .unauthorized, headers: [.wwwAuthenticate: "Bearer realm=\"sample\""])
        }
        switch state.status(ofAccessToken: String(header.dropFirst(7)), ttl: configuration.accessTokenTTL) {
        case .valid(let user): return body(user)
        case .expired, .revoked, .unknown:
            state.countExpirySignal()
            return SampleReply.json(["error": "invalid_token", "error_description": "the access token expired or is invalid"],
                                    status: .unauthorized,
                                    headers: [.wwwAuthenticate: "Bearer realm=\"sample\", error=\"invalid_token\""])
        }
    }

    static func failure(_ fault: SampleAPIState.TokenEndpointFault) -> Response {
        switch fault {
        case .rateLimited(let seconds):
            return SampleReply.json(["error": "temporarily_unavailable", "error_description": "rate limited"], status: .tooManyRequests,
                                    headers: [.retryAfter: String(seconds), .cacheControl: "no-store"])
        case .serverError:
            return SampleReply.json(["error": "server_error"], status: .serviceUnavailable)
        case .invalidClient:
            return oauthError("invalid_client", "client authentication failed", status: .unauthorized)
        case .busy(let code):
            return SampleReply.envelope(code: code, msg: "system busy, try again")
        }
    }

    static func oauthError(_ error: String, _ description: String, status: HTTPResponse.Status) -> Response {
        SampleReply.json(["error": .string(error), "error_description": .string(description)], status: status,
                         headers: [.cacheControl: "no-store"])
    }
}
