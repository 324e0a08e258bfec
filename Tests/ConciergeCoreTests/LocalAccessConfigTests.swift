@testable import ConciergeCore
import Foundation
import Testing

/// `listen.proxy` as a list with Unix sockets, `session.clients`, and ``SessionClients/admits(_:)``.
@Suite("Local access control: configuration")
struct LocalAccessConfigTests {
    private static let upstream = """
        upstreams:
          release: https://api.example.com

        """

    private func issues(_ yaml: String, sourceLocation: SourceLocation = #_sourceLocation) -> [ConfigIssue] {
        do {
            _ = try ConfigLoader.parse(yaml: Self.upstream + yaml)
            Issue.record("expected a ConfigError", sourceLocation: sourceLocation)
            return []
        } catch {
            return error.issues
        }
    }

    /// The one issue at `path` (a failure when there is not exactly one), with its line.
    private func issue(_ path: String, in yaml: String, sourceLocation: SourceLocation = #_sourceLocation) -> ConfigIssue? {
        let found = issues(yaml, sourceLocation: sourceLocation)
        let atPath = found.filter { $0.path == path }
        guard atPath.count == 1 else {
            Issue.record("expected one issue at '\(path)', found: \(found)", sourceLocation: sourceLocation)
            return nil
        }
        return atPath[0]
    }

    @Test("a string proxy address stays one TCP listener with the defaults")
    func stringAddress() throws {
        let config = try ConfigLoader.parse(yaml: Self.upstream + "listen: { proxy: \"127.0.0.1:9090\" }")
        #expect(config.listen.proxyListeners == [ConciergeConfig.ProxyListener(address: .tcp(host: "127.0.0.1", port: 9090))])
        #expect(config.listen.proxy == .tcp(host: "127.0.0.1", port: 9090))
        #expect(!RuntimeConfig(config: config).accessControlled)
    }

    @Test("a list of listeners: strings and maps, mode and group (name or number), session")
    func listOfListeners() throws {
        let config = try ConfigLoader.parse(yaml: Self.upstream + """
            listen:
              proxy:
                - 127.0.0.1:8080
                - unix:/run/concierge/a.sock
                - { address: "unix:/run/concierge/b.sock", mode: "0600", group: root, session: default }
                - { address: "unix:/run/concierge/c.sock", mode: "640", group: 4242 }
            """)
        #expect(config.listen.proxyListeners == [
            .init(address: .tcp(host: "127.0.0.1", port: 8080)),
            .init(address: .unix(path: "/run/concierge/a.sock"), mode: 0o660),
            .init(address: .unix(path: "/run/concierge/b.sock"), mode: 0o600, group: 0, session: "default"),
            .init(address: .unix(path: "/run/concierge/c.sock"), mode: 0o640, group: 4242),
        ])
        #expect(config.listen.proxy == .tcp(host: "127.0.0.1", port: 8080))
    }

    @Test("mode and group on a TCP address are errors naming the key path and line")
    func modeOnTCP() throws {
        let yaml = """
            listen:
              proxy:
                - { address: "127.0.0.1:8080", mode: "0600" }
                - { address: "127.0.0.1:8082", group: root }
            """
        let mode = try #require(issue("listen.proxy[0].mode", in: yaml))
        #expect(mode.message.contains("unix: sockets only"))
        #expect(mode.line == 5)
        let group = try #require(issue("listen.proxy[1].group", in: yaml))
        #expect(group.line == 6)
    }

    @Test("bad addresses, modes, groups and duplicates name their key paths")
    func badValues() throws {
        #expect(issue("listen.proxy[1]", in: "listen: { proxy: [\"127.0.0.1:1\", nonsense] }")?.message.contains("host:port or unix:/path") == true)
        #expect(issue("listen.proxy[0].address", in: "listen: { proxy: [{ address: \"unix:relative.sock\" }] }")?.message.contains("absolute") == true)
        let long = "unix:/" + String(repeating: "x", count: 120)
        #expect(issue("listen.proxy", in: "listen: { proxy: \"\(long)\" }")?.message.contains("at most 98") == true)
        #expect(issue("listen.proxy[0].mode", in: "listen: { proxy: [{ address: \"unix:/run/a.sock\", mode: \"0999\" }] }")?.message.contains("octal") == true)
        #expect(issue("listen.proxy[0].group", in: "listen: { proxy: [{ address: \"unix:/run/a.sock\", group: no-such-group-xyz }] }")?.message == "unknown group 'no-such-group-xyz'")
        #expect(issue("listen.proxy[0].address", in: "listen: { proxy: [{ mode: \"0600\" }] }")?.message.hasPrefix("missing") == true)
        #expect(issue("listen.proxy[1]", in: "listen: { proxy: [\"unix:/run/a.sock\", \"unix:/run/a.sock\"] }")?.message.contains("listed twice") == true)
        #expect(issue("listen.proxy[0].port", in: "listen: { proxy: [{ address: \"unix:/run/a.sock\", port: 1 }] }")?.message.contains("unknown key") == true)
        #expect(issue("listen.proxy", in: "listen: { proxy: [] }")?.message.contains("no address") == true)
    }

    @Test("a listener's session must be a configured session")
    func unknownListenerSession() throws {
        let found = try #require(issue("listen.proxy[0].session", in: """
            listen:
              proxy:
                - { address: "unix:/run/a.sock", session: shop }
            """))
        #expect(found.message == "unknown session 'shop' (configured: default)")
        #expect(found.line == 5)
    }

    @Test("session.clients: names and numbers resolved at load; the access flag is set")
    func sessionClients() throws {
        let config = try ConfigLoader.parse(yaml: Self.upstream + """
            session:
              clients: { uids: [root, 1001, nobody], gids: [root, 4242] }
            """)
        let nobody = try #require(ConfigLoader.userID("nobody"))
        #expect(config.session.clients == SessionClients(uids: [0, 1001, nobody], gids: [0, 4242]))
        #expect(config.sessionClients(named: "default") == config.session.clients)
        #expect(RuntimeConfig(config: config).accessControlled)
    }

    @Test("session.clients errors: unknown user or group, wrong types, empty")
    func sessionClientsErrors() throws {
        #expect(issue("session.clients.uids[1]", in: "session: { clients: { uids: [1001, no-such-user-xyz] } }")?.message == "unknown user 'no-such-user-xyz'")
        #expect(issue("session.clients.gids[0]", in: "session: { clients: { gids: [no-such-group-xyz] } }")?.message == "unknown group 'no-such-group-xyz'")
        #expect(issue("session.clients.uids", in: "session: { clients: { uids: 1001 } }")?.message.contains("expected a list") == true)
        #expect(issue("session.clients", in: "session: { clients: {} }")?.message.contains("neither uids nor gids") == true)
        #expect(issue("session.clients.users", in: "session: { clients: { users: [1] } }")?.message.contains("unknown key") == true)
    }

    @Test("SessionClients.admits: a listed uid, a listed primary or supplementary group; never a TCP peer or an unlisted root")
    func admits() {
        let clients = SessionClients(uids: [1001], gids: [4242])
        #expect(clients.admits(PeerCredentials(uid: 1001, gid: 100)))
        #expect(clients.admits(PeerCredentials(uid: 2000, gid: 4242)))
        #expect(clients.admits(PeerCredentials(uid: 2000, gid: 100, groups: [27, 4242])))
        #expect(!clients.admits(PeerCredentials(uid: 2000, gid: 100, groups: [27])))
        #expect(!clients.admits(PeerCredentials(uid: 0, gid: 0, groups: [0])))
        #expect(!clients.admits(nil))
        #expect(SessionClients(uids: [0]).admits(PeerCredentials(uid: 0, gid: 0)))
        #expect(!SessionClients(gids: [0]).admits(PeerCredentials(uid: 1001, gid: 100)))
    }

    @Test("only requests that use a session are checked: login required or optional, and the login endpoint")
    func usesSession() throws {
        let config = try ConfigLoader.parse(yaml: Self.upstream + """
            session:
              inject: [{ query: accessToken }]
              capture: { endpoint: login, access_token: data.token }
              clients: { uids: [1001] }
            endpoints:
              - { name: login, match: POST /login }
              - { name: info, match: GET /info, login: required }
              - { name: maybe, match: GET /maybe, login: optional }
              - { name: open, match: GET /open }
            """)
        let outsider = PeerCredentials(uid: 2000, gid: 2000)
        func refused(_ name: String, _ peer: PeerCredentials?) -> String? {
            SessionAccess.refusedSession(config.endpoint(named: name)!, config: config, peer: peer, listenerSession: nil)
        }
        #expect(refused("login", outsider) == "default")
        #expect(refused("info", nil) == "default")
        #expect(refused("maybe", outsider) == "default")
        #expect(refused("open", outsider) == nil)
        #expect(refused("open", nil) == nil)
        #expect(refused("info", PeerCredentials(uid: 1001, gid: 1001)) == nil)
    }

    @Test("Config/examples/unix-sockets.yaml loads: one socket per service account")
    func example() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let config = try ConfigLoader.load(path: root.appendingPathComponent("Config/examples/unix-sockets.yaml").path, environment: [:])
        #expect(config.listen.proxyListeners.count >= 2)
        #expect(config.listen.proxyListeners.contains { if case .unix = $0.address { true } else { false } })
        #expect(config.session.clients != nil)
    }
}
