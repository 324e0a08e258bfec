import ConciergeCore
import Hummingbird

/// The WeChat dialect: an app token fetched with `GET /cgi-bin/token` (each fetch
/// invalidates the previous token), sent as `?access_token=`; HTTP 200 always, `errcode`
/// 40001 (invalid or not the latest) / 42001 (expired) on a bad token; successes carry
/// `errcode: 0` or no `errcode` at all.
extension SampleAPIRoutes {
    func addWeChatRoutes(_ router: Router<BasicRequestContext>) {
        router.get("/cgi-bin/token") { request, _ in try await self.weChatToken(request) }
        router.get("/cgi-bin/user/info") { request, _ in
            self.withWeChatToken(request) { owner in
                SampleReply.json(["errcode": 0, "errmsg": "ok", "openid": "o-sample-1", "nickname": "Sample",
                                  "app": .string(owner.hasPrefix("app:") ? String(owner.dropFirst(4)) : self.configuration.clientID),
                                  "calls": .int(Int64(self.state.calls("/cgi-bin/user/info")))])
            }
        }
        router.get("/cgi-bin/items") { request, _ in
            self.withWeChatToken(request) {
                SampleReply.json(["items": .array((1...3).map(Self.itemJSON)), "served": .int(Int64(self.state.calls("/cgi-bin/items")))])
            }
        }
        router.get("/cgi-bin/stale") { request, _ in
            // Says "not the latest token" whatever it gets: a refresh-loop provoker.
            self.withWeChatToken(request) {
                self.state.countExpirySignal()
                return SampleReply.json(["errcode": 40001, "errmsg": "invalid credential, access_token is invalid or not latest"])
            }
        }
        router.get("/cgi-bin/forbidden") { request, _ in
            self.withWeChatToken(request) { SampleReply.json(["errcode": 45009, "errmsg": "reach max api daily quota limit"]) }
        }
    }

    func weChatToken(_ request: Request) async throws -> Response {
        let query = request.decodedQuery
        func value(_ name: String) -> String? { query.first { $0.name == name }?.value }
        state.countRefresh(app: value("appid"))
        if configuration.refreshDelay > .zero { try await Task.sleep(for: configuration.refreshDelay) }
        guard value("grant_type") == "client_credential" else {
            return SampleReply.json(["errcode": 40002, "errmsg": "invalid grant_type"])
        }
        if let app = value("appid"), let secret = configuration.moreAppIDs[app] {
            guard value("secret") == secret else { return SampleReply.json(["errcode": 40125, "errmsg": "invalid appsecret"]) }
            return SampleReply.json(["access_token": .string(state.issueAppToken(app: app)),
                                     "expires_in": .int(Int64(configuration.accessTokenLifetimeSeconds))])
        }
        guard value("appid") == configuration.clientID else { return SampleReply.json(["errcode": 40013, "errmsg": "invalid appid"]) }
        guard value("secret") == configuration.clientSecret else { return SampleReply.json(["errcode": 40125, "errmsg": "invalid appsecret"]) }
        let token = state.issueAppToken(supersede: true)
        return SampleReply.json(["access_token": .string(token), "expires_in": .int(Int64(configuration.accessTokenLifetimeSeconds))])
    }

    func withWeChatToken(_ request: Request, _ body: () -> Response) -> Response {
        withWeChatToken(request) { _ in body() }
    }

    /// `body` with the token's owner (`app`, or `app:APPID` for an extra app id).
    func withWeChatToken(_ request: Request, _ body: (String) -> Response) -> Response {
        guard let token = request.decodedQuery.first(where: { $0.name == "access_token" })?.value, !token.isEmpty else {
            return SampleReply.json(["errcode": 41001, "errmsg": "access_token missing"])
        }
        switch state.status(ofAccessToken: token, ttl: configuration.accessTokenTTL) {
        case .valid(let owner): return body(owner)
        case .expired:
            state.countExpirySignal()
            return SampleReply.json(["errcode": 42001, "errmsg": "access_token expired"])
        case .unknown, .revoked:
            state.countExpirySignal()
            return SampleReply.json(["errcode": 40001, "errmsg": "invalid credential, access_token is invalid or not latest"])
        }
    }
}
