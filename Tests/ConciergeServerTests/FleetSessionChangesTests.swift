@testable import ConciergeCore
import ConciergeStorage
import ConciergeTestSupport
import Foundation
import Testing

/// The count of a fleet's session changes (schema version 6, `FleetDatabase+SessionChanges`):
/// kept by triggers, read by the heartbeat each second, so the session rows are read again
/// only when one changed. One real PostgreSQL.
@Suite("Fleet: the heartbeat reads the session rows only when one changed", .serialized,
       .enabled(if: PostgresCluster.isAvailable || ProcessInfo.processInfo.environment["CI"] != nil))
struct FleetSessionChangesTests {
    @Test("""
        a version or tokens changed, a row with either inserted or one deleted, by this code or by \
        plain SQL, moves the count once a statement and the rows are read again; an empty row, \
        pacing or another fleet's row does not; while the count stands still the rows are not read
        """)
    func countedChanges() async throws {
        try await FleetDatabaseFixture.with(node: "counting") { database, cluster in
            try await database.migrate()
            try await database.migrate()  // every node migrates at start: the triggers are made once
            let triggers = try await cluster.sql("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'concierge.session'::regclass AND NOT tgisinternal")
            #expect(triggers.trimmingCharacters(in: .whitespacesAndNewlines) == "3")
            let fleet = database.fleet
            #expect(try await database.sessionChangeCount() == 0)
            #expect(try await database.sessionVersions().isEmpty)

            try await database.writeSession("default", "sealed-1")
            #expect(try await database.sessionChangeCount() == 1)
            try await Self.expect(database, ["default": (1, true)])

            // A session's first use inserts an empty row, and a failed token request stores pacing.
            let _: Void = try await database.withSessionLock("news", lockWait: .seconds(5)) { _ in
                .pace(TokenRequestPacing(notBefore: 1e10, refusals: 1), ())
            }
            #expect(try await database.sessionChangeCount() == 1)

            // A change the triggers do not see leaves the rows unread: the last read stands.
            try await cluster.sql("""
                ALTER TABLE concierge.session DISABLE TRIGGER USER;
                UPDATE concierge.session SET version = 7 WHERE fleet = '\(fleet)' AND session_key = 'default';
                ALTER TABLE concierge.session ENABLE TRIGGER USER;
                """)
            try await Self.expect(database, ["default": (1, true)])

            // An older node's write, or one by hand, is counted: the rows are read again.
            try await cluster.sql("UPDATE concierge.session SET version = version + 1, tokens = NULL WHERE fleet = '\(fleet)' AND session_key = 'default'")
            #expect(try await database.sessionChangeCount() == 2)
            try await Self.expect(database, ["default": (8, false), "news": (0, false)])

            try await cluster.sql("INSERT INTO concierge.session (fleet, session_key, version, tokens) VALUES ('\(fleet)', 'shop', 1, 'sealed-2')")
            try await cluster.sql("INSERT INTO concierge.session (fleet, session_key, version, tokens) VALUES ('another-fleet', 'shop', 1, 'sealed-3')")
            #expect(try await database.sessionChangeCount() == 3)
            try await Self.expect(database, ["default": (8, false), "news": (0, false), "shop": (1, true)])

            try await cluster.sql("DELETE FROM concierge.session WHERE fleet = '\(fleet)' AND session_key = 'shop'")
            #expect(try await database.sessionChangeCount() == 4)
            try await Self.expect(database, ["default": (8, false), "news": (0, false)])

            #expect(try await database.writeLogout("default", ifVersion: 8, lockWait: .seconds(5)) == 9)
            #expect(try await database.sessionChangeCount() == 5)
            try await Self.expect(database, ["default": (9, false), "news": (0, false)])

            // One statement over many rows counts once (triggers per statement).
            try await cluster.sql("UPDATE concierge.session SET version = version + 1 WHERE fleet = '\(fleet)'")
            #expect(try await database.sessionChangeCount() == 6)
            try await Self.expect(database, ["default": (10, false), "news": (1, false)])
        }
    }

    static func expect(_ database: FleetDatabase, _ expected: [String: (Int64, Bool)],
                       sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let versions = try await database.sessionVersions()
        #expect(versions.mapValues { "\($0.version) \($0.hasTokens)" } == expected.mapValues { "\($0.0) \($0.1)" },
                sourceLocation: sourceLocation)
    }
}
