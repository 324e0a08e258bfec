@testable import ConciergeStorage
import ConciergeCore
import Foundation
import GRDB
import Logging
import Testing

@Suite("StorageDatabase")
struct StorageDatabaseTests {
    private func permissions(_ path: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        return (attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1
    }

    @Test("a new database file is created with mode 0600, WAL mode and the schema")
    func createdPrivate() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("concierge.sqlite")
        let database = try StorageDatabase(path: path, logger: quietLogger)
        #expect(database.movedAsidePath == nil)
        #expect(try permissions(path) & 0o777 == 0o600)
        let mode = try database.pool.read { try String.fetchOne($0, sql: "PRAGMA journal_mode") }
        #expect(mode == "wal")
        let tables = try database.pool.read { try String.fetchAll($0, sql: "SELECT name FROM sqlite_master WHERE type = 'table'") }
        #expect(tables.contains("cache_entry"))
        #expect(tables.contains("session"))
        #expect(database.fileBytes > 0)
        // The WAL holds cached data too: it must not be readable by others either.
        if FileManager.default.fileExists(atPath: path + "-wal") {
            #expect(try permissions(path + "-wal") & 0o077 == 0)
        }
    }

    @Test("a new database uses incremental auto-vacuum, so eviction can give pages back to the file system")
    func incrementalAutoVacuum() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let database = try StorageDatabase(path: dir.path("concierge.sqlite"), logger: quietLogger)
        let mode = try database.pool.read { try Int.fetchOne($0, sql: "PRAGMA auto_vacuum") }
        #expect(mode == 2, "PRAGMA auto_vacuum is \(mode.map(String.init) ?? "nil"); 2 = INCREMENTAL")
    }

    @Test("missing parent directories are created")
    func createsDirectories() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("state/nested/concierge.sqlite")
        _ = try StorageDatabase(path: path, logger: quietLogger)
        #expect(FileManager.default.fileExists(atPath: path))
        #expect(try permissions(path) & 0o777 == 0o600)
    }

    @Test("reopening a healthy file keeps its data and moves nothing aside")
    func reopenHealthy() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("concierge.sqlite")
        do {
            let database = try StorageDatabase(path: path, logger: quietLogger)
            try await SessionStore(database: database).save(SessionTokens(accessToken: "tok", refreshToken: nil, userID: "7"))
        }
        let reopened = try StorageDatabase(path: path, logger: quietLogger)
        #expect(reopened.movedAsidePath == nil)
        #expect(try SessionStore(database: reopened).load()?.userID == "7")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.url.path).filter { $0.contains("corrupt") }
        #expect(leftovers.isEmpty)
    }

    @Test("a corrupt file is moved aside, kept intact, and a usable database is created")
    func corruptMovedAside() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("concierge.sqlite")
        var generator = SystemRandomNumberGenerator()
        let garbage = Data((0..<4096).map { _ in UInt8.random(in: 0...255, using: &generator) })
        try garbage.write(to: URL(fileURLWithPath: path))

        let database = try StorageDatabase(path: path, logger: quietLogger)
        let aside = try #require(database.movedAsidePath)
        #expect(aside != path)
        #expect(aside.hasPrefix(path + ".corrupt-"))
        #expect(FileManager.default.fileExists(atPath: aside))
        #expect(try Data(contentsOf: URL(fileURLWithPath: aside)) == garbage)

        // The new file works: the cache and the session can be written and read.
        #expect(try permissions(path) & 0o777 == 0o600)
        let sessions = SessionStore(database: database)
        try await sessions.save(SessionTokens(accessToken: "tok", refreshToken: "r", userID: "1"))
        #expect(try sessions.load()?.accessToken == "tok")
        let store = try CacheStore(database: database, maxBytes: 1 << 20, memoryBytes: 1 << 16, logger: quietLogger)
        #expect(store.entryCount == 0)
    }

    @Test("a SQLite file with a damaged page is moved aside too")
    func damagedPagesMovedAside() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("concierge.sqlite")
        do {
            let queue = try DatabaseQueue(path: path)
            try queue.write { db in
                try db.execute(sql: "CREATE TABLE t (x BLOB)")
                for _ in 0..<50 { try db.execute(sql: "INSERT INTO t VALUES (randomblob(2000))") }
            }
        }
        // Keep the 100-byte header, overwrite the rest of page 1 and page 2 with garbage.
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.seek(toOffset: 100)
        try handle.write(contentsOf: Data(repeating: 0xA5, count: 8000))
        try handle.close()

        let database = try StorageDatabase(path: path, logger: quietLogger)
        let aside = try #require(database.movedAsidePath)
        #expect(FileManager.default.fileExists(atPath: aside))
        let tables = try database.pool.read { try String.fetchAll($0, sql: "SELECT name FROM sqlite_master WHERE type = 'table'") }
        #expect(tables.contains("cache_entry"))
    }

    @Test("a file too large to check before serving opens at once; a damaged page found by the check after start is marked, and the next start moves the file aside")
    func largeFileCheckedAfterStart() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("concierge.sqlite")
        do {
            let database = try StorageDatabase(path: path, logger: quietLogger)
            try await database.pool.write { db in
                try db.execute(sql: "CREATE TABLE filler (x BLOB)")
                for _ in 0..<(StorageDatabase.startCheckBytes / 4000 + 500) { try db.execute(sql: "INSERT INTO filler VALUES (randomblob(4000))") }
            }
            try await database.pool.writeWithoutTransaction { db in _ = try db.checkpoint(.truncate) }
            #expect(await database.checkIntegrity(logger: quietLogger), "an intact file passes")
        }
        // Damage one page in the middle of the file (the filler table's), not the schema.
        let size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
        #expect(size > StorageDatabase.startCheckBytes)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.seek(toOffset: UInt64(size / 2 / 4096 * 4096))
        try handle.write(contentsOf: Data(repeating: 0xA5, count: 4096))
        try handle.close()

        let database = try StorageDatabase(path: path, logger: quietLogger)
        #expect(database.movedAsidePath == nil, "not read before serving")
        #expect(await database.checkIntegrity(logger: quietLogger) == false)
        #expect(FileManager.default.fileExists(atPath: path + ".damaged"))
        let reopened = try StorageDatabase(path: path, logger: quietLogger)
        let aside = try #require(reopened.movedAsidePath)
        #expect(FileManager.default.fileExists(atPath: aside))
        #expect(!FileManager.default.fileExists(atPath: path + ".damaged"), "the mark goes with the file")
        #expect(await reopened.checkIntegrity(logger: quietLogger))
    }

    @Test("a path under /proc is an unwritable path: StorageError names the path")
    func unwritableUnderProc() {
        let path = "/proc/forbidden/x.sqlite"
        do {
            _ = try StorageDatabase(path: path, logger: quietLogger)
            Issue.record("expected a StorageError")
        } catch let error as StorageError {
            #expect(error.path == path)
            #expect(error.description.contains(path))
            #expect(!error.reason.isEmpty)
        } catch {
            Issue.record("expected a StorageError, got \(error)")
        }
    }

    @Test("a path whose parent is a regular file is an unwritable path: StorageError names the path")
    func parentIsAFile() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let file = dir.path("not-a-directory")
        try Data("x".utf8).write(to: URL(fileURLWithPath: file))
        let path = file + "/concierge.sqlite"
        do {
            _ = try StorageDatabase(path: path, logger: quietLogger)
            Issue.record("expected a StorageError")
        } catch let error as StorageError {
            #expect(error.path == path)
            #expect(error.description.contains(path))
            #expect(error.description.hasPrefix("cannot open storage at "))
        } catch {
            Issue.record("expected a StorageError, got \(error)")
        }
        // Nothing was moved aside or created next to the blocking file.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.url.path) == ["not-a-directory"])
    }
}
