import ConciergeCore
import Hummingbird

/// The DingTalk dialect: string codes. An app token from `POST /v1.0/oauth2/accessToken`
/// (JSON `{"appKey", "appSecret"}` → `{"accessToken", "expireIn"}`), sent in the
/// `x-acs-dingtalk-access-token` header; a bad token is `400 {"code": "InvalidAuthentication"}`;
/// a success is a 200 without a `code`.
extension SampleAPIRoutes {
    func addDingTalkRoutes(_ router: Router<BasicRequestContext>) {
        router.post("/v1.0/oauth2/accessToken") { request, _ in try await self.dingTalkToken(request) }
        router.get("/v1.0/contact/users/me") { request, _ in
            self.withDingTalkToken(request) {
                SampleReply.json(["nick": "Sample", "unionId": "u-sample-1", "calls": .int(Int64(self.state.calls("/v1.0/contact/users/me")))])
            }
        }
        router.get("/v1.0/items") { request, _ in
            self.withDingTalkToken(request) {
                SampleReply.json(["items": .array((1...3).map(Self.itemJSON)), "served": .int(Int64(self.state.calls("/v1.0/items")))])
            }
        }
        router.get("/v1.0/forbidden") { request, _ in
            self.withDingTalkToken(request) {
                SampleReply.json(["code": "Forbidden.AccessDenied", "message": "the app lacks this permission", "requestid": "r-1"],
                                 status: .forbidden)
            }
        }
    }

    func dingTalkToken(_ request: Request) async throws -> Response {
        state.countRefresh()
        if configuration.refreshDelay > .zero { try await Task.sleep(for: configuration.refreshDelay) }
        let params = try await parameters(of: request)
        guard params.bodyJSON != nil else {
            return SampleReply.json(["code": "MissingParameter", "message": "a JSON body is required"], status: .badRequest)
        }
        guard params.bodyValue("appKey") == configuration.clientID, params.bodyValue("appSecret") == configuration.clientSecret else {
            return SampleReply.json(["code": "invalidClientIdOrSecret", "message": "invalid appKey or appSecret"], status: .badRequest)
        }
        let token = state.issueAppToken(supersede: false)
        return SampleReply.json(["accessToken": .string(token), "expireIn": .int(Int64(configuration.accessTokenLifetimeSeconds))])
    }

    func withDingTalkToken(_ request: Request, _ body: () -> Response) -> Response {
        let token = request.headers.first { $0.name.canonicalName == "x-acs-dingtalk-access-token" }?.value ?? ""
        guard case .valid = state.status(ofAccessToken: token, ttl: configuration.accessTokenTTL) else {
            state.countExpirySignal()
            return SampleReply.json(["code": "InvalidAuthentication", "message": "the access token is invalid or expired", "requestid": "r-1"],
                                    status: .badRequest)
        }
        return body()
    }
}
