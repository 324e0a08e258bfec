import Foundation
import GRDB
import Logging

/// Why storage could not be opened.
public struct StorageError: Error, CustomStringConvertible, Sendable {
    public var path: String
    public var reason: String

    public init(path: String, reason: String) {
        self.path = path
        self.reason = reason
    }

    public var description: String { "cannot open storage at \(path): \(reason)" }
}

/// The SQLite file (WAL mode, migrations applied, created 0600) shared by the cache and
/// session stores.
public final class StorageDatabase: Sendable {
    public let path: String
    public let pool: DatabasePool
    /// Set when a corrupt file was found at start and moved aside (the new name).
    public let movedAsidePath: String?

    /// Opens (or creates) the database. A corrupt file is moved aside to
    /// `<path>.corrupt-<unix time>` with a loud log line and a fresh one is created.
    public init(path: String, logger: Logger) throws {
        self.path = path
        let directory = (path as NSString).deletingLastPathComponent
        let fm = FileManager.default
        if !directory.isEmpty, !fm.fileExists(atPath: directory) {
            do {
                try fm.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw StorageError(path: path, reason: "cannot create directory \(directory): \(Self.describe(error))")
            }
        }
        if !fm.fileExists(atPath: path) {
            let fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                throw StorageError(path: path, reason: String(cString: strerror(errno)))
            }
            close(fd)
        }
        guard access(path, R_OK | W_OK) == 0 else {
            throw StorageError(path: path, reason: "not readable and writable: \(String(cString: strerror(errno)))")
        }
        do {
            pool = try Self.openPool(path)
            movedAsidePath = nil
        } catch let error as StorageError {
            throw error
        } catch {
            let aside = "\(path).corrupt-\(Int(Date().timeIntervalSince1970))"
            logger.critical("storage file is corrupt; moving it aside and starting empty",
                            metadata: ["path": "\(path)", "moved_to": "\(aside)", "error": "\(error)"])
            do {
                for suffix in ["-wal", "-shm"] where fm.fileExists(atPath: path + suffix) {
                    try fm.moveItem(atPath: path + suffix, toPath: aside + suffix)
                }
                try fm.moveItem(atPath: path, toPath: aside)
                let fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
                if fd >= 0 { close(fd) }
                pool = try Self.openPool(path)
                movedAsidePath = aside
            } catch {
                throw StorageError(path: path, reason: "corrupt and could not be replaced: \(Self.describe(error))")
            }
        }
    }

    static func describe(_ error: any Error) -> String {
        if let e = error as? DatabaseError { return e.message ?? "\(e)" }
        return "\(error)"
    }

    private static func openPool(_ path: String) throws -> DatabasePool {
        var configuration = Configuration()
        configuration.journalMode = .wal
        configuration.busyMode = .timeout(5)
        configuration.maximumReaderCount = 4
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        let pool = try DatabasePool(path: path, configuration: configuration)
        try pool.write { db in
            let result = try String.fetchOne(db, sql: "PRAGMA quick_check") ?? "unknown"
            if result != "ok" { throw DatabaseError(resultCode: .SQLITE_CORRUPT, message: "quick_check: \(result)") }
        }
        try migrator.migrate(pool)
        try pool.writeWithoutTransaction { db in
            // Incremental auto-vacuum lets eviction give pages back, so the file stays under
            // max_bytes. The mode only takes effect through a VACUUM once the file is in WAL
            // mode; on a new file that is instant, on an old one it happens once.
            if try Int.fetchOne(db, sql: "PRAGMA auto_vacuum") != 2 {
                try db.execute(sql: "PRAGMA auto_vacuum = INCREMENTAL")
                try db.execute(sql: "VACUUM")
            }
        }
        return pool
    }

    /// Schema history; append a migration, never edit one that shipped.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: cache entries and session") { db in
            try db.execute(sql: """
                CREATE TABLE cache_entry (
                  key TEXT PRIMARY KEY NOT NULL,
                  endpoint TEXT NOT NULL,
                  user_id TEXT,
                  status INTEGER NOT NULL,
                  stored_at REAL NOT NULL,
                  ttl REAL NOT NULL,
                  swr REAL NOT NULL,
                  sie REAL NOT NULL,
                  usable_until REAL NOT NULL,
                  version INTEGER NOT NULL,
                  size INTEGER NOT NULL,
                  last_access REAL NOT NULL,
                  headers TEXT NOT NULL,
                  body BLOB NOT NULL
                );
                CREATE INDEX cache_entry_endpoint ON cache_entry(endpoint, user_id);
                CREATE INDEX cache_entry_last_access ON cache_entry(last_access);
                CREATE INDEX cache_entry_usable_until ON cache_entry(usable_until);
                CREATE TABLE session (
                  id INTEGER PRIMARY KEY CHECK (id = 1),
                  access_token TEXT NOT NULL,
                  refresh_token TEXT,
                  user_id TEXT,
                  set_at REAL NOT NULL
                );
                """)
        }
        migrator.registerMigration("v2: session kind, expiry and subject") { db in
            try db.execute(sql: """
                ALTER TABLE session ADD COLUMN kind TEXT NOT NULL DEFAULT 'user';
                ALTER TABLE session ADD COLUMN expires_at REAL;
                ALTER TABLE session ADD COLUMN subject TEXT;
                """)
        }
        return migrator
    }

    /// Size of the database file plus its WAL on disk.
    public var fileBytes: Int {
        let fm = FileManager.default
        var total = 0
        for p in [path, path + "-wal"] {
            if let size = (try? fm.attributesOfItem(atPath: p))?[.size] as? NSNumber { total += size.intValue }
        }
        return total
    }
}
