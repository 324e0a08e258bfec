@testable import ConciergeStorage
import ConciergeCore
import Foundation
import GRDB
import Logging
import Testing

@Suite("SessionStore")
struct SessionStoreTests {
    @Test("a new database has no session")
    func emptyLoad() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let store = SessionStore(database: try StorageDatabase(path: dir.path("s.sqlite"), logger: quietLogger))
        #expect(try store.load() == nil)
    }

    @Test("save then load round-trips every field")
    func roundTrip() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let store = SessionStore(database: try StorageDatabase(path: dir.path("s.sqlite"), logger: quietLogger))
        let tokens = SessionTokens(accessToken: "access-é-1", refreshToken: "refresh-1", userID: "42",
                                   setAt: Date(timeIntervalSince1970: 1_700_000_000))
        try await bounded("save") { try await store.save(tokens) }
        #expect(try store.load() == tokens)
    }

    @Test("optional fields stay nil and the set time keeps sub-second precision")
    func optionalFields() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let store = SessionStore(database: try StorageDatabase(path: dir.path("s.sqlite"), logger: quietLogger))
        let setAt = Date()
        try await bounded("save") { try await store.save(SessionTokens(accessToken: "a", refreshToken: nil, userID: nil, setAt: setAt)) }
        let loaded = try #require(try store.load())
        #expect(loaded.accessToken == "a")
        #expect(loaded.refreshToken == nil)
        #expect(loaded.userID == nil)
        #expect(abs(loaded.setAt.timeIntervalSince(setAt)) < 0.001)
    }

    @Test("a second save replaces the session")
    func overwrite() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let database = try StorageDatabase(path: dir.path("s.sqlite"), logger: quietLogger)
        let store = SessionStore(database: database)
        try await bounded("save") { try await store.save(SessionTokens(accessToken: "old", refreshToken: "r-old", userID: "1")) }
        let newer = SessionTokens(accessToken: "new", refreshToken: nil, userID: "2", setAt: Date(timeIntervalSince1970: 1_700_000_100))
        try await bounded("save") { try await store.save(newer) }
        #expect(try store.load() == newer)
        let rows = try await database.pool.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM session") }
        #expect(rows == 1)
    }

    @Test("save(nil) clears the session, and is harmless when there is none")
    func saveNilClears() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let store = SessionStore(database: try StorageDatabase(path: dir.path("s.sqlite"), logger: quietLogger))
        try await bounded("save") { try await store.save(SessionTokens(accessToken: "a", refreshToken: "r", userID: "1")) }
        try await bounded("clear") { try await store.save(nil) }
        #expect(try store.load() == nil)
        try await bounded("clear") { try await store.save(nil) }
        #expect(try store.load() == nil)
    }

    @Test("the session survives reopening the database file")
    func survivesRestart() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("s.sqlite")
        let tokens = SessionTokens(accessToken: "persisted", refreshToken: "r", userID: "9", setAt: Date(timeIntervalSince1970: 1_600_000_000.5))
        do {
            let store = SessionStore(database: try StorageDatabase(path: path, logger: quietLogger))
            try await bounded("save") { try await store.save(tokens) }
        }
        let reopened = SessionStore(database: try StorageDatabase(path: path, logger: quietLogger))
        #expect(try reopened.load() == tokens)
        try await bounded("clear") { try await reopened.save(nil) }
        let again = SessionStore(database: try StorageDatabase(path: path, logger: quietLogger))
        #expect(try again.load() == nil)
    }

    @Test("kind, expiry and subject are persisted with the tokens")
    func kindExpiryAndSubject() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let store = SessionStore(database: try StorageDatabase(path: dir.path("s.sqlite"), logger: quietLogger))
        let app = SessionTokens(accessToken: "app-token-1", refreshToken: nil, userID: nil, setAt: Date(timeIntervalSince1970: 1_700_000_000),
                                kind: .app, expiresAt: Date(timeIntervalSince1970: 1_700_007_200), subject: "session-ab12")
        try await bounded("save") { try await store.save(app) }
        #expect(try store.load() == app)
        let user = SessionTokens(accessToken: "user-token-1", refreshToken: "r", userID: "7", setAt: Date(timeIntervalSince1970: 1_700_000_000))
        try await bounded("save") { try await store.save(user) }
        #expect(try store.load() == user)
    }
}
