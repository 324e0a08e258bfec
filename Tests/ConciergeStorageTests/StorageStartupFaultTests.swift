@testable import ConciergeStorage
import ConciergeCore
import Foundation
import GRDB
import Logging
import Testing

/// SPEC §10 storage start-up: only "corrupt" / "not a database" moves a file aside; a lock
/// is waited for, then a clear error; a directory is a clear error.
@Suite("Storage start-up faults")
struct StorageStartupFaultTests {
    /// Another connection that may keep a transaction (and its write lock) open.
    static func lockHolder(_ path: String) throws -> DatabaseQueue {
        var configuration = Configuration()
        configuration.allowsUnsafeTransactions = true
        return try DatabaseQueue(path: path, configuration: configuration)
    }

    @Test("a healthy database write-locked by another connection is waited for, then a clear error; nothing is moved aside")
    func lockedIsNotCorrupt() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("concierge.sqlite")
        do {
            let database = try StorageDatabase(path: path, logger: quietLogger)
            try await SessionStore(database: database).save(SessionTokens(accessToken: "tok", refreshToken: nil, userID: "alice"))
        }
        let holder = try Self.lockHolder(path)
        try holder.inDatabase { try $0.execute(sql: "BEGIN EXCLUSIVE") }
        let started = ContinuousClock.now
        #expect {
            _ = try StorageDatabase(path: path, logger: quietLogger, lockWait: .milliseconds(600))
        } throws: { error in
            "\(error)".contains("locked by another process") && "\(error)".contains(path)
        }
        let waited = ContinuousClock.now - started
        #expect(waited >= .milliseconds(500))
        #expect(waited < .seconds(10))
        try holder.inDatabase { try $0.execute(sql: "ROLLBACK") }
        try holder.close()

        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.url.path).filter { $0.contains("corrupt") }
        #expect(leftovers.isEmpty)
        let reopened = try StorageDatabase(path: path, logger: quietLogger)
        #expect(reopened.movedAsidePath == nil)
        #expect(try SessionStore(database: reopened).load()?.userID == "alice")
    }

    @Test("a lock released while start-up waits: the database opens with its data")
    func lockReleasedDuringWait() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("concierge.sqlite")
        do {
            let database = try StorageDatabase(path: path, logger: quietLogger)
            try await SessionStore(database: database).save(SessionTokens(accessToken: "tok", refreshToken: nil, userID: "bob"))
        }
        let holder = try Self.lockHolder(path)
        try holder.inDatabase { try $0.execute(sql: "BEGIN EXCLUSIVE") }
        let release = Task.detached {
            try await Task.sleep(for: .milliseconds(300))
            try holder.inDatabase { try $0.execute(sql: "ROLLBACK") }
        }
        let database = try StorageDatabase(path: path, logger: quietLogger, lockWait: .seconds(20))
        try await release.value
        #expect(database.movedAsidePath == nil)
        #expect(try SessionStore(database: database).load()?.userID == "bob")
    }

    @Test("a storage path that is a directory is a clear error and is not renamed")
    func directoryPath() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = dir.path("state.sqlite")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        #expect {
            _ = try StorageDatabase(path: path, logger: quietLogger)
        } throws: { error in
            "\(error)".contains("is a directory") && "\(error)".contains(path)
        }
        var isDirectory: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.url.path).filter { $0.contains("corrupt") }
        #expect(leftovers.isEmpty)
    }
}
