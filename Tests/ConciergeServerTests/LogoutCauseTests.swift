import ConciergeCore
import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// Every way a session ends has the same effects, whatever the cause: the session is gone, that
/// user's cached entries are removed (shared ones stay), one logout is counted and
/// `session.logout` is published with the cause. One end-to-end test per cause, over the real
/// sample API and a real daemon.
@Suite("Logout causes")
struct LogoutCauseTests {
    static let endpoints = TestConfig.defaultEndpoints + "\n- name: warn\n  match: GET /api/warning"
    static let extra = """
        envelope:
          warning_codes: { 804: [logout, event] }
        """

    @Test("a logout code (802 from the upstream) ends the session and removes that user's entries")
    func logoutCode() async throws {
        try await Self.checkLogout(user: "ann", reason: 802) { rig in
            rig.api.state.revokeAllSessions()
            let reply = try await rig.get("/api/user/info?tab=revoked", headers: [("Cache-Control", "no-cache")])
            #expect(reply.code == 802)
        }
    }

    @Test("a warning code with the logout action (804) ends the session and removes that user's entries")
    func warningCodeWithLogout() async throws {
        try await Self.checkLogout(user: "ben", reason: 804) { rig in
            let reply = try await rig.get("/api/warning?code=804")
            #expect(reply.code == 804)
        }
    }

    @Test("a refused token refresh (the refresh endpoint answers 810) ends the session and removes that user's entries")
    func failedRefresh() async throws {
        try await Self.checkLogout(user: "cleo", reason: "refresh_failed") { rig in
            // Revoked tokens: /api/always-expired answers 801, the refresh endpoint then answers 810.
            rig.api.state.revokeAllSessions()
            let reply = try await rig.get("/api/always-expired")
            #expect(reply.status == 401)
            #expect(reply.code == 800)
            #expect(rig.api.state.refreshCalls == 1)
        }
    }

    @Test("admin DELETE /session ends the session and removes that user's entries")
    func adminDelete() async throws {
        try await Self.checkLogout(user: "dana", reason: "admin") { rig in
            let reply = try await rig.admin(.DELETE, "/session")
            #expect(reply.json == ["logged_out": true])
        }
    }

    /// Logs in as `user`, caches three of that user's entries and one shared entry, runs
    /// `trigger`, then waits (bounded) for every effect a logout must have.
    static func checkLogout(user: String, reason: JSONValue, _ trigger: (ConciergeTestRig) async throws -> Void) async throws {
        try await ConciergeTestRig.with(endpoints: endpoints, extra: extra) { rig in
            let events = EventCollector(port: rig.proxyPort)
            defer { events.stop() }
            try await events.waitConnected()
            try await rig.login(user)
            for tab in 1...3 {
                #expect(try await rig.get("/api/user/info?tab=\(tab)").header("X-Cache") == "MISS")
            }
            #expect(try await rig.get("/api/items").header("X-Cache") == "MISS")
            #expect(try await eventually { try await Self.entries(rig).filter { $0.user == user }.count == 3 })
            let logoutsBefore = try #require(try await rig.admin(.GET, "/stats").json?[path: "logouts"]?.intValue)

            try await trigger(rig)

            #expect(try await eventually { try await rig.admin(.GET, "/session").json?[path: "logged_in"] == false },
                    "the session is gone")
            #expect(try await eventually { try await Self.entries(rig).allSatisfy { $0.user != user } },
                    "the user's entries are removed")
            #expect(try await Self.entries(rig).contains { $0.user == nil && $0.key.contains("/api/items") }, "the shared entry stays")
            #expect(try await eventually { try await rig.admin(.GET, "/stats").json?[path: "logouts"]?.intValue == logoutsBefore + 1 },
                    "one logout is counted")
            #expect(await eventually { !events.payloads(of: "session.logout").isEmpty }, "session.logout is published")
            let published = events.payloads(of: "session.logout")
            #expect(published.count == 1)
            #expect(published.first?[path: "user"] == .string(user))
            #expect(published.first?[path: "reason"] == reason)

            // Logged in again, the same user's requests go upstream; the shared entry still answers.
            try await rig.login(user)
            #expect(try await rig.get("/api/user/info?tab=1").header("X-Cache") == "MISS")
            #expect(try await rig.get("/api/items").header("X-Cache") == "HIT")
        }
    }

    /// Key and user of every cached entry (admin `GET /cache/entries`).
    static func entries(_ rig: ConciergeTestRig) async throws -> [(key: String, user: String?)] {
        let reply = try await rig.admin(.GET, "/cache/entries?limit=1000")
        guard case .array(let entries)? = reply.json?[path: "entries"] else { throw EntriesUnreadable(text: reply.text) }
        return entries.map { (key: $0[path: "key"]?.stringValue ?? "", user: $0[path: "user"]?.stringValue) }
    }

    struct EntriesUnreadable: Error {
        let text: String
    }
}
