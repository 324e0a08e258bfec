import ConciergeCore
import Foundation
import Testing

/// `sessions:` (docs/sessions.md): named sessions with every key of `session:`, which stays
/// the session named `default`; which session an endpoint uses; load-time errors by key path.
@Suite("Configuration: several sessions")
struct SessionsConfigTests {
    static let head = """
        upstreams:
          release: http://127.0.0.1:9000
        """

    static let twoApps = """
        sessions:
          wx-news:
            inject: [{ query: access_token }]
            app_token: { path: /cgi-bin/token, query: { appid: news }, access_token: access_token }
          wx-shop:
            inject: [{ query: access_token }]
            app_token: { path: /cgi-bin/token, query: { appid: shop }, access_token: access_token }
        """

    private func paths(_ yaml: String) -> [String] {
        do {
            _ = try ConfigLoader.parse(yaml: yaml)
            return []
        } catch {
            return error.issues.map(\.path)
        }
    }

    @Test("session: alone is the session named default; keys unchanged")
    func sessionIsDefault() throws {
        let config = try ConfigLoader.parse(yaml: Self.head + "\nsession:\n  inject: [{ query: token }]\n")
        #expect(config.sessionNames == ["default"])
        #expect(config.sessions["default"]?.inject == [.query(name: "token")])
        #expect(config.session.inject == [.query(name: "token")])
        let view = RuntimeConfig(config: config)
        #expect(view.view(forSession: "default") === view)
    }

    @Test("sessions: named sessions, each its own view with its own injector; endpoints name them")
    func namedSessions() throws {
        let config = try ConfigLoader.parse(yaml: Self.head + "\n" + Self.twoApps + """

            endpoints:
              - { name: news, match: GET /news, login: required, session: wx-news }
              - { name: shop, match: GET /shop, login: required, session: wx-shop, cache: { ttl: 1m, scope: session } }
            """)
        #expect(config.sessionNames == ["wx-news", "wx-shop"])
        #expect(config.sessions["wx-shop"]?.kind == .app)
        #expect(config.session.inject.isEmpty, "no default session")
        #expect(config.endpoint(named: "shop")?.cache.scope == .session)
        let runtime = RuntimeConfig(config: config)
        let news = try #require(runtime.view(forSession: "wx-news"))
        #expect(news.settings.session.appToken?.query.first?.value == "news")
        #expect(news.injector.paramNames == ["access_token"])
        #expect(runtime.keyExclusions.contains("access_token"), "every session's injected names stay out of keys")
        let route = PreparedRequest.Route(method: "GET", target: "/news", config: runtime, environment: "release")
        #expect(route.config === news)
        #expect(!route.selectsByHeader)
    }

    @Test("errors name the key path: bad name, unknown session, default twice, unreachable session, per_client with app_token")
    func errors() {
        #expect(paths(Self.head + "\nsessions:\n  Shop: { inject: [{ query: t }] }\n").contains("sessions.Shop"))
        #expect(paths(Self.head + "\n" + Self.twoApps + "\nendpoints:\n  - { name: e, match: GET /e, session: wx-nope }\n")
            .contains("endpoints[0].session"))
        #expect(paths(Self.head + "\nsession: { inject: [{ query: t }] }\nsessions:\n  default: { inject: [{ query: t }] }\n")
            .contains("sessions.default"))
        #expect(paths(Self.head + "\n" + Self.twoApps + "\nendpoints:\n  - { name: e, match: GET /e, login: required }\n")
            .contains("endpoints[0].session"))
        #expect(paths(Self.head + "\n" + Self.twoApps + "\nlisten: { session_header: true }\nendpoints:\n  - { name: e, match: GET /e, login: required }\n")
            .isEmpty, "session_header lets a request choose")
        #expect(paths(Self.head + """

            sessions:
              wx:
                per_client: { max: 10 }
                inject: [{ query: access_token }]
                app_token: { path: /t, access_token: access_token }
            """).contains("sessions.wx.per_client"))
    }

    @Test("per_client keys and their defaults; a session's login endpoint uses that session")
    func perClient() throws {
        let config = try ConfigLoader.parse(yaml: Self.head + """

            sessions:
              portal:
                per_client: { max: 100, idle: 1d }
                inject: [{ header: Authorization, format: "Bearer {access_token}" }]
                capture: { endpoint: portalLogin, access_token: access_token }
            endpoints:
              - { name: portalLogin, match: POST /login }
            """)
        let perClient = try #require(config.sessions["portal"]?.perClient)
        #expect(perClient.header == "Concierge-Session")
        #expect(perClient.max == 100)
        #expect(perClient.idle == .seconds(86_400))
        #expect(config.endpoint(named: "portalLogin")?.session == "portal")
    }

    @Test("Config/examples/sessions-*.yaml load")
    func examplesLoad() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let environment = ["WX_NEWS_APPID": "news", "WX_NEWS_SECRET": "s1", "WX_SHOP_APPID": "shop", "WX_SHOP_SECRET": "s2",
                           "OAUTH_CLIENT_ID": "id", "OAUTH_CLIENT_SECRET": "secret", "PAY_CLIENT_ID": "pay", "PAY_CLIENT_SECRET": "p"]
        for name in ["sessions-wechat", "sessions-two-apis", "sessions-bff"] {
            let config = try ConfigLoader.load(path: root.appendingPathComponent("Config/examples/\(name).yaml").path, environment: environment)
            #expect(config.sessionNames.count >= 2, "\(name)")
        }
    }
}
