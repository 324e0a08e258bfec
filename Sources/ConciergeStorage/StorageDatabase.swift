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
    /// Whether writes currently succeed (shared by the cache writer and the session).
    public let health: StorageHealth

    /// Opens (or creates) the database.
    ///
    /// - Only SQLite's `SQLITE_CORRUPT` / `SQLITE_NOTADB` answers move a file aside (to
    ///   `<path>.corrupt-<unix time>`, with its WAL, logged loudly) and start a fresh one.
    /// - A database locked by another connection is waited for, at most `lockWait` (logged
    ///   once), then a ``StorageError`` saying so; nothing is moved.
    /// - A path that is a directory, or any other failure, is a ``StorageError``.
    public init(path: String, logger: Logger, lockWait: Duration = .seconds(30)) throws {
        self.path = path
        self.health = StorageHealth(logger: logger)
        let directory = (path as NSString).deletingLastPathComponent
        let fm = FileManager.default
        var isDirectory: ObjCBool = false
        if fm.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw StorageError(path: path, reason: "it is a directory; storage.path must name a file (e.g. \(path)/concierge.sqlite)")
        }
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
        let started = ContinuousClock.now
        var waitLogged = false
        while true {
            do {
                pool = try Self.openPool(path, busyTimeout: min(5, max(0.1, lockWait.inSeconds)))
                movedAsidePath = nil
                return
            } catch let error as DatabaseError where Self.isLocked(error) {
                let waited = ContinuousClock.now - started
                if waited >= lockWait {
                    throw StorageError(path: path, reason: "the database is locked by another process (waited \(Int(waited.inSeconds.rounded())) s); "
                                       + "is another concierge or a sqlite3 shell using it?")
                }
                if !waitLogged {
                    waitLogged = true
                    logger.warning("storage is locked by another process; waiting for it",
                                   metadata: ["path": "\(path)", "max_wait": "\(Int(lockWait.inSeconds))s"])
                }
            } catch let error as DatabaseError where Self.isCorrupt(error) {
                break
            } catch {
                throw StorageError(path: path, reason: Self.describe(error))
            }
        }
        let aside = "\(path).corrupt-\(Int(Date().timeIntervalSince1970))"
        logger.critical("storage file is corrupt; moving it aside and starting empty",
                        metadata: ["path": "\(path)", "moved_to": "\(aside)"])
        do {
            for suffix in ["-wal", "-shm"] where fm.fileExists(atPath: path + suffix) {
                try fm.moveItem(atPath: path + suffix, toPath: aside + suffix)
            }
            if fm.fileExists(atPath: Self.damagedMarker(path)) { try fm.moveItem(atPath: Self.damagedMarker(path), toPath: aside + ".damaged") }
            try fm.moveItem(atPath: path, toPath: aside)
            let fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            if fd >= 0 { close(fd) }
            pool = try Self.openPool(path, busyTimeout: 5)
            movedAsidePath = aside
        } catch {
            throw StorageError(path: path, reason: "corrupt and could not be replaced: \(Self.describe(error))")
        }
    }

    /// Files up to this size get SQLite's `quick_check` before the daemon serves.
    static let startCheckBytes = 32 << 20

    static func damagedMarker(_ path: String) -> String { path + ".damaged" }

    private static func fileSize(_ path: String) -> Int {
        var info = stat()
        return stat(path, &info) == 0 ? Int(info.st_size) : 0
    }

    private static func quickCheck(_ db: Database) throws {
        let result = try String.fetchOne(db, sql: "PRAGMA quick_check") ?? "unknown"
        if result != "ok" { throw DatabaseError(resultCode: .SQLITE_CORRUPT, message: "quick_check: \(result)") }
    }

    /// SQLite's `quick_check` of a file too large to check before serving, run once the daemon
    /// serves (a read: the writer goes on). A damaged file is marked (`<path>.damaged`), so the
    /// next start moves it aside as a corrupt one, and storage counts as failing meanwhile
    /// (cache writes refused). Returns whether the file is intact.
    @discardableResult
    public func checkIntegrity(logger: Logger) async -> Bool {
        let bytes = Self.fileSize(path)
        guard bytes > Self.startCheckBytes else { return true }
        let began = ContinuousClock.now
        do {
            try await pool.read { db in try Self.quickCheck(db) }
            logger.info("storage integrity check passed", metadata: ["bytes": "\(bytes)", "seconds": "\(ContinuousClock.now - began)"])
            return true
        } catch let error as DatabaseError where Self.isCorrupt(error) {
            _ = FileManager.default.createFile(atPath: Self.damagedMarker(path), contents: Data(Self.describe(error).utf8),
                                           attributes: [.posixPermissions: 0o600])
            logger.critical("storage file is damaged; it is moved aside at the next start",
                            metadata: ["path": "\(path)", "error": "\(Self.describe(error))"])
            health.recordFailure("integrity check", error)
            return false
        } catch {
            logger.warning("storage integrity check could not run", metadata: ["error": "\(Self.describe(error))"])
            return true
        }
    }

    static func isLocked(_ error: DatabaseError) -> Bool {
        error.resultCode == .SQLITE_BUSY || error.resultCode == .SQLITE_LOCKED
    }

    static func isCorrupt(_ error: DatabaseError) -> Bool {
        error.resultCode == .SQLITE_CORRUPT || error.resultCode == .SQLITE_NOTADB
    }

    static func describe(_ error: any Error) -> String {
        if let e = error as? DatabaseError { return e.message ?? "\(e)" }
        return "\(error)"
    }

    private static func openPool(_ path: String, busyTimeout: TimeInterval) throws -> DatabasePool {
        var configuration = Configuration()
        configuration.journalMode = .wal
        configuration.busyMode = .timeout(busyTimeout)
        configuration.maximumReaderCount = 4
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        if FileManager.default.fileExists(atPath: damagedMarker(path)) {
            // A check after an earlier start found the file damaged (``checkIntegrity()``).
            throw DatabaseError(resultCode: .SQLITE_CORRUPT, message: "marked damaged by the last integrity check")
        }
        let pool = try DatabasePool(path: path, configuration: configuration)
        // The whole-file check reads every page: at start only for a small file, so start-up
        // does not grow with the cache; a larger one is checked in the background.
        if fileSize(path) <= startCheckBytes {
            try pool.write { db in try Self.quickCheck(db) }
        } else {
            try pool.read { db in _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") }
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
        migrator.registerMigration("v3: fleet state and outbox") { db in
            try db.execute(sql: """
                CREATE TABLE fleet_state (fleet TEXT PRIMARY KEY, applied_seq INTEGER NOT NULL);
                CREATE TABLE fleet_outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, fleet TEXT NOT NULL, criteria TEXT NOT NULL);
                """)
        }
        migrator.registerMigration("v4: cache tags") { db in
            // One row per tag of an entry: invalidation by tag reads the primary key's index,
            // never every key. The writer drops a key's rows where it deletes the entry.
            try db.execute(sql: """
                CREATE TABLE cache_tag (tag TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (tag, key)) WITHOUT ROWID;
                CREATE INDEX cache_tag_key ON cache_tag(key);
                """)
        }
        migrator.registerMigration("v5: expiry times kept by the writer") { db in
            // The sweep reads each row's `usable_until` from the writer's memory
            // (`RowFacts`); the index cost every insert a sixth of its work.
            try db.execute(sql: "DROP INDEX IF EXISTS cache_entry_usable_until")
        }
        migrator.registerMigration("v6: eviction order and invalidation by endpoint or user kept by the writer") { db in
            // Eviction takes the least recently used rows, and invalidation by endpoint or
            // user and the sweep of old versions their rows, from the writer's memory
            // (`RowFacts`); the two indexes cost every insert a third of its work in SQLite.
            try db.execute(sql: "DROP INDEX IF EXISTS cache_entry_last_access")
            try db.execute(sql: "DROP INDEX IF EXISTS cache_entry_endpoint")
        }
        migrator.registerMigration("v7: cache keys that tell every request apart") { db in
            // Keys now keep duplicate params in their order and give the body a part of its
            // own: a row stored under the old format could answer a request it never saw
            // (`?a=2&a=1` was stored as `?a=1&a=2`). The cache starts empty once.
            try db.execute(sql: "DELETE FROM cache_tag; DELETE FROM cache_entry")
        }
        migrator.registerMigration("v8: the cache's invalidation journal") { db in
            // Large invalidations, recorded in the transaction that acknowledges them and
            // finished (or replayed at start-up) in slices: `InvalidationJournal`.
            try db.execute(sql: InvalidationJournal.createTable)
        }
        migrator.registerMigration("v9: named sessions and per-client instances") { db in
            // `default` stays in `session` (id 1); every other session and instance has a row
            // here under its store key (``SessionStore/key``).
            try db.execute(sql: SessionStore.createNamedTable)
        }
        migrator.registerMigration("v10: access times saved by page of rowids") { db in
            // The writer's reads of rows, 256 `Double`s a row (``RowFacts``): a read no longer
            // rewrites its row's page of `cache_entry` (`last_access` stays the store time).
            try db.execute(sql: "CREATE TABLE cache_access (page INTEGER PRIMARY KEY, times BLOB NOT NULL)")
        }
        return migrator
    }

    /// Size of the database file plus its WAL on disk.
    /// Two `stat` calls: the writer asks after every commit (FileManager's attribute
    /// dictionary cost a tenth of a miss).
    public var fileBytes: Int {
        var total = 0
        for p in [path, walPath] {
            var info = stat()
            if stat(p, &info) == 0 { total += Int(info.st_size) }
        }
        return total
    }

    private var walPath: String { path + "-wal" }
}

extension Duration {
    var inSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
