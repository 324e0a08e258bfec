import Hummingbird

/// The request handlers of the sample business API and their registration on a router.
/// Handlers are grouped by topic in the `SampleAPIRoutes+*.swift` extensions.
struct SampleAPIRoutes: Sendable {
    /// Largest body buffered for non-streamed routes.
    static let maxBufferedBodySize = 16 * 1024 * 1024

    let state: SampleAPIState
    let configuration: SampleAPIConfiguration

    /// Builds the router with the recording middleware in front of every route (and of 404s).
    func makeRouter() -> Router<BasicRequestContext> {
        let router = Router(context: BasicRequestContext.self, options: .autoGenerateHeadEndpoints)
        router.add(
            middleware: RequestRecordingMiddleware(
                state: state,
                streamedPathPrefixes: ["/api/upload"],
                maxBufferedBodySize: Self.maxBufferedBodySize
            )
        )

        switch configuration.dialect {
        case .envelope: addEnvelopeRoutes(router)
        case .oauth2: addOAuth2Routes(router)
        case .wechat: addWeChatRoutes(router)
        case .dingtalk: addDingTalkRoutes(router)
        }

        // Control
        router.get("/_sample/stats") { _, _ in self.stats() }
        router.post("/_sample/expire") { _, _ in
            self.state.expireAllAccessTokens()
            return SampleReply.json(["ok": true])
        }
        router.post("/_sample/revoke") { _, _ in
            self.state.revokeAllSessions()
            return SampleReply.json(["ok": true])
        }
        router.post("/_sample/reset") { _, _ in
            self.state.reset()
            return SampleReply.json(["ok": true])
        }
        return router
    }

    /// The seed envelope dialect's routes.
    private func addEnvelopeRoutes(_ router: Router<BasicRequestContext>) {
        // Session
        router.post("/api/login") { request, _ in try await self.login(request) }
        router.post("/api/token/refresh") { request, _ in try await self.refresh(request) }
        router.get("/api/user/info") { request, _ in try await self.userInfo(request) }
        router.post("/api/user/update") { request, _ in try await self.updateUser(request) }
        router.get("/api/always-expired") { _, _ in Self.tokenExpiredReply() }

        // Business data and failure modes
        router.get("/api/items") { request, _ in try await self.items(request) }
        router.post("/api/items") { request, _ in try await self.items(request) }
        router.get("/api/items/{id}") { _, context in self.item(id: context.parameters.get("id")) }
        router.get("/api/slow") { request, _ in try await self.slow(request) }
        router.get("/api/gate") { request, _ in try await self.gate(request) }
        router.get("/api/fail") { request, _ in self.fail(request) }
        router.get("/api/business-error") { _, _ in SampleReply.envelope(code: 1002, msg: "business failure") }
        router.get("/api/nonjson") { _, _ in SampleReply.text("this is not json") }
        router.get("/api/empty") { _, _ in Response(status: .ok) }
        router.get("/api/nostore") { request, _ in self.noStore(request) }
        router.get("/api/warning") { request, _ in self.warning(request) }
        for method: HTTPRequest.Method in [.get, .post, .put, .delete, .patch] {
            router.on("/api/echo", method: method) { request, _ in try await self.echo(request) }
        }

        // Signing
        router.get("/api/signed") { request, _ in try await self.signed(request) }
        router.post("/api/signed") { request, _ in try await self.signed(request) }

        // Streaming
        router.post("/api/upload") { request, _ in try await self.upload(request) }
        router.get("/api/download/{name}") { request, _ in self.download(request) }
    }

    /// Query and body parameters of `request` (the body was already buffered by the middleware).
    func parameters(of request: Request) async throws -> RequestParameters {
        var request = request
        let body = try await request.collectBody(upTo: Self.maxBufferedBodySize)
        return RequestParameters(request: request, body: body)
    }

    static func tokenExpiredReply() -> Response {
        SampleReply.envelope(code: 801, msg: "token expired")
    }
}
