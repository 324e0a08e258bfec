import ConciergeCore
import Hummingbird

/// Login, token refresh and the routes that need a valid access token.
extension SampleAPIRoutes {
    func login(_ request: Request) async throws -> Response {
        state.countLogin()
        let params = try await parameters(of: request)
        guard let username = params.bodyValue("username") ?? params.queryValue("username"), !username.isEmpty,
            let password = params.bodyValue("password") ?? params.queryValue("password"), !password.isEmpty
        else {
            return SampleReply.envelope(code: 1001, msg: "bad credentials")
        }
        return Self.tokensReply(state.issueTokens(for: username))
    }

    func refresh(_ request: Request) async throws -> Response {
        state.countRefresh()
        if configuration.refreshDelay > .zero {
            try await Task.sleep(for: configuration.refreshDelay)
        }
        if let fault = state.tokenEndpointFault { return Self.failure(fault) }
        let params = try await parameters(of: request)
        guard let refreshToken = params.bodyValue("refreshToken") ?? params.queryValue("refreshToken"),
            let tokens = state.rotateTokens(refreshToken: refreshToken)
        else {
            return SampleReply.envelope(code: 810, msg: "invalid refresh token")
        }
        return Self.tokensReply(tokens)
    }

    func userInfo(_ request: Request) async throws -> Response {
        let params = try await parameters(of: request)
        let userID: String
        switch accessTokenStatus(of: request, params) {
        case .valid(let user): userID = user
        case let denied: return Self.denialReply(denied)
        }
        return SampleReply.success([
            "result": [
                "userId": .string(userID),
                "name": .string("Sample User \(userID)"),
                "calls": .int(Int64(state.calls(request.uri.path))),
            ]
        ])
    }

    func updateUser(_ request: Request) async throws -> Response {
        let params = try await parameters(of: request)
        let status = accessTokenStatus(of: request, params)
        guard case .valid = status else { return Self.denialReply(status) }
        return SampleReply.success(["result": ["updated": true]])
    }

    /// Finds the access token (query `accessToken`, then `Authorization: Bearer`, then body
    /// field `accessToken`) and judges it.
    func accessTokenStatus(of request: Request, _ params: RequestParameters) -> TokenRegistry.AccessTokenStatus {
        let bearer = request.headers[.authorization].flatMap { value -> String? in
            guard value.lowercased().hasPrefix("bearer ") else { return nil }
            return String(value.dropFirst("bearer ".count)).trimmingSpaces()
        }
        let candidates = [params.queryValue("accessToken"), bearer, params.bodyValue("accessToken")]
        guard let token = candidates.compactMap({ $0 }).first(where: { !$0.isEmpty }) else { return .unknown }
        return state.status(ofAccessToken: token, ttl: configuration.accessTokenTTL)
    }

    static func denialReply(_ status: TokenRegistry.AccessTokenStatus) -> Response {
        switch status {
        case .expired: tokenExpiredReply()
        case .revoked: SampleReply.envelope(code: 802, msg: "session revoked")
        case .unknown, .valid: SampleReply.envelope(code: 800, msg: "not logged in")
        }
    }

    static func tokensReply(_ tokens: TokenRegistry.TokenPair) -> Response {
        SampleReply.success([
            "result": [
                "accessToken": .string(tokens.accessToken),
                "refreshToken": .string(tokens.refreshToken),
                "userId": .string(tokens.userID),
            ]
        ])
    }
}

extension String {
    /// The string without leading and trailing spaces and tabs.
    fileprivate func trimmingSpaces() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        return String(drop(while: isSpace).reversed().drop(while: isSpace).reversed())
    }
}
