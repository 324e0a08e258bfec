import ConciergeCore
import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// Several sessions on one daemon (docs/sessions.md): two WeChat app ids behind one daemon,
/// chosen by endpoint or by the `Concierge-Session-Name` header, each with its own app token
/// fetched once per expiry however many requests wait, and entries never shared.
@Suite("Several sessions: two WeChat app ids")
struct SeveralAppTokenSessionsTests {
    static let apps = ["news-app": "news-secret-1234", "shop-app": "shop-secret-5678"]

    static func appToken(_ appID: String) -> String {
        """
            inject: [{ query: access_token }]
            app_token:
              method: GET
              path: /cgi-bin/token
              query: { grant_type: client_credential, appid: \(appID), secret: \(apps[appID]!) }
              access_token: access_token
              expires_in: expires_in
        """
    }

    /// `withDefault: false` leaves out the session named `default` (a YAML comment naming
    /// `session:` keeps the rig from adding its own).
    static func extra(withDefault: Bool) -> String {
        """
        envelope:
          code_path: errcode
          message_path: errmsg
          success_codes: [0]
          refresh_codes: [40001, 42001]
          logout_codes: []
          success_when_missing: true
        \(withDefault ? "" : "# no session: here, only named ones")
        sessions:
          wx-news:
        \(appToken("news-app"))
          wx-shop:
        \(appToken("shop-app"))
        """
    }

    static let endpoints = """
        - { name: info, match: "GET /cgi-bin/user/info", login: required, cache: { ttl: 60s } }
        - { name: items, match: "GET /cgi-bin/items", login: required, session: wx-shop, cache: { ttl: 60s } }
        """

    static func with(withDefault: Bool = true, refreshDelay: Duration = .milliseconds(50),
                     _ body: (ConciergeTestRig) async throws -> Void) async throws {
        var api = SampleAPIConfiguration(refreshDelay: refreshDelay, dialect: .wechat)
        api.moreAppIDs = apps
        try await ConciergeTestRig.with(endpoints: endpoints, extra: extra(withDefault: withDefault), apiConfiguration: api,
                                        configTransform: { $0.replacingOccurrences(of: "listen:\n", with: "listen:\n  session_header: true\n") }, body)
    }

    /// `count` concurrent GETs of `path(i)` choosing `session`; the replies' JSON.
    static func storm(_ rig: ConciergeTestRig, session: String, count: Int = 50, _ path: @escaping @Sendable (Int) -> String) async throws -> [TestResponse] {
        try await withThrowingTaskGroup(of: TestResponse.self) { group in
            for i in 0..<count { group.addTask { try await rig.get(path(i), headers: [("Concierge-Session-Name", session)]) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
    }

    @Test("two app-token sessions under one storm: one token request each, each reply made with its own app's token, twice over an expiry")
    func stormPerSession() async throws {
        try await Self.with { rig in
            async let news = Self.storm(rig, session: "wx-news") { "/cgi-bin/user/info?n=\($0)" }
            async let shop = Self.storm(rig, session: "wx-shop") { "/cgi-bin/user/info?s=\($0)" }
            let (newsReplies, shopReplies) = try await (news, shop)
            #expect(newsReplies.allSatisfy { $0.status == 200 && $0.json?[path: "app"] == "news-app" })
            #expect(shopReplies.allSatisfy { $0.status == 200 && $0.json?[path: "app"] == "shop-app" })
            #expect(rig.api.state.tokenCalls(app: "news-app") == 1)
            #expect(rig.api.state.tokenCalls(app: "shop-app") == 1)
            rig.api.state.expireAllAccessTokens()
            async let news2 = Self.storm(rig, session: "wx-news") { "/cgi-bin/user/info?n2=\($0)" }
            async let shop2 = Self.storm(rig, session: "wx-shop") { "/cgi-bin/user/info?s2=\($0)" }
            let (newsAgain, shopAgain) = try await (news2, shop2)
            #expect(newsAgain.allSatisfy { $0.status == 200 } && shopAgain.allSatisfy { $0.status == 200 })
            #expect(rig.api.state.tokenCalls(app: "news-app") == 2)
            #expect(rig.api.state.tokenCalls(app: "shop-app") == 2)
            #expect(rig.api.state.lastRequest("/cgi-bin/user/info")?.headers["concierge-session-name"] == nil, "the selecting header is removed")
        }
    }

    @Test("one URL under two sessions: two entries (scope session), never the other session's reply")
    func entriesNeverShared() async throws {
        try await Self.with { rig in
            let news = try await rig.get("/cgi-bin/user/info?same=1", headers: [("Concierge-Session-Name", "wx-news")])
            let shop = try await rig.get("/cgi-bin/user/info?same=1", headers: [("Concierge-Session-Name", "wx-shop")])
            #expect(news.json?[path: "app"] == "news-app")
            #expect(shop.json?[path: "app"] == "shop-app")
            #expect(shop.header("X-Cache") == "MISS")
            let again = try await rig.get("/cgi-bin/user/info?same=1", headers: [("Concierge-Session-Name", "wx-shop")])
            #expect(again.header("X-Cache") == "HIT")
            #expect(again.json?[path: "app"] == "shop-app")
            let users = try await rig.admin(.GET, "/cache/entries").json?[path: "entries"]?.serialized ?? ""
            #expect(users.contains("\"user\":\"@wx-news\"") && users.contains("\"user\":\"@wx-shop\""))
            // Invalidation by session takes one session's entries only.
            let removed = try await rig.admin(.POST, "/cache/invalidate", json: ["session": "wx-news"])
            #expect(removed.json?[path: "removed"] == 1)
            #expect(try await rig.get("/cgi-bin/user/info?same=1", headers: [("Concierge-Session-Name", "wx-shop")]).header("X-Cache") == "HIT")
        }
    }

    @Test("an endpoint's session needs no header; default answers without one; an unknown name is 400")
    func endpointAndDefault() async throws {
        try await Self.with { rig in
            #expect(try await rig.get("/cgi-bin/items").status == 200)
            #expect(rig.api.state.tokenCalls(app: "shop-app") == 1)
            #expect(rig.api.state.tokenCalls(app: "news-app") == 0)
            let unknown = try await rig.get("/cgi-bin/user/info", headers: [("Concierge-Session-Name", "wx-nope")])
            #expect(unknown.status == 400)
            #expect(unknown.json?[path: "error"] == "unknown session: wx-nope")
            // `default` is the seed dialect's user session: not logged in.
            #expect(try await rig.get("/cgi-bin/user/info").status == 401)
        }
    }

    @Test("without a default session, a request that selects none is 400 no session selected")
    func noSessionSelected() async throws {
        try await Self.with(withDefault: false) { rig in
            let none = try await rig.get("/cgi-bin/user/info")
            #expect(none.status == 400)
            #expect(none.json == ["error": "no session selected"])
            #expect(rig.api.state.calls("/cgi-bin/user/info") == 0)
            #expect(try await rig.get("/cgi-bin/user/info", headers: [("Concierge-Session-Name", "wx-news")]).status == 200)
        }
    }

    @Test("GET /sessions lists every session; GET and DELETE /sessions/NAME; 404 for an unknown name")
    func adminRoutes() async throws {
        try await Self.with { rig in
            _ = try await rig.get("/cgi-bin/user/info", headers: [("Concierge-Session-Name", "wx-news")])
            let list = try await rig.admin(.GET, "/sessions")
            let names = list.json?[path: "sessions"].flatMap { value -> [String]? in
                guard case .array(let items) = value else { return nil }
                return items.compactMap { $0[path: "name"]?.stringValue }
            }
            #expect(names == ["default", "wx-news", "wx-shop"])
            let news = try await rig.admin(.GET, "/sessions/wx-news")
            #expect(news.json?[path: "kind"] == "app")
            #expect(news.json?[path: "state"] == "active")
            #expect(news.json?[path: "expires_at"]?.stringValue?.isEmpty == false)
            #expect(!news.text.contains("app-"), "no token in the reply")
            #expect(try await rig.admin(.GET, "/sessions/wx-shop").json?[path: "state"] == "logged_out")
            #expect(try await rig.admin(.DELETE, "/sessions/wx-news").json?[path: "logged_out"] == 1)
            #expect(try await rig.admin(.GET, "/sessions/wx-news").json?[path: "state"] == "logged_out")
            #expect(try await rig.admin(.GET, "/sessions/nope").status == 404)
        }
    }
}
