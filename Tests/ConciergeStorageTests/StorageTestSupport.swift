@testable import ConciergeStorage
import ConciergeCore
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// A fresh directory under the system temporary directory; call ``remove()`` when done.
struct TempDirectory: Sendable {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-storage-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    func path(_ name: String) -> String { url.appendingPathComponent(name).path }

    func remove() { try? FileManager.default.removeItem(at: url) }
}

let quietLogger = Logger(label: "concierge.storage.tests", factory: { _ in SwiftLogNoOpLogHandler() })

struct TimedOut: Error, CustomStringConvertible {
    let what: String
    let seconds: Double
    var description: String { "\(what) did not finish within \(seconds)s" }
}

/// Holds a continuation that exactly one of several racers may take and resume.
final class ContinuationSlot<T: Sendable>: Sendable {
    let continuation = Mutex<CheckedContinuation<T, any Error>?>(nil)
    func take() -> CheckedContinuation<T, any Error>? { continuation.withLock { c in defer { c = nil }; return c } }
}

/// Runs `operation` and throws ``TimedOut`` if it has not finished after `seconds`, even
/// when the operation is stuck on a continuation that is never resumed.
func bounded<T: Sendable>(_ what: String, seconds: Double = 20, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    let slot = ContinuationSlot<T>()
    return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
        slot.continuation.withLock { $0 = continuation }
        let timer = Task {
            try? await Task.sleep(for: .milliseconds(Int(seconds * 1000)))
            if !Task.isCancelled { slot.take()?.resume(throwing: TimedOut(what: what, seconds: seconds)) }
        }
        Task {
            do {
                let value = try await operation()
                timer.cancel()
                slot.take()?.resume(returning: value)
            } catch {
                timer.cancel()
                slot.take()?.resume(throwing: error)
            }
        }
    }
}

/// The keys of every stored entry (up to 1,000), as the admin listing reads them.
func storedKeys(_ store: CacheStore) async throws -> Set<String> {
    let page = try await bounded("entries") { try await store.entries(pattern: nil, limit: 1000, cursor: nil) }
    return Set(page.entries.map(\.key))
}

/// A cache entry whose ``CacheEntry/size`` is exactly `size` bytes (no headers).
func makeEntry(key: String, endpoint: String = "itemList", user: String? = nil, size: Int? = nil, bodyText: String? = nil,
               storedAt: Double = Date().timeIntervalSince1970, ttl: Double = 60, swr: Double = 0, sie: Double = 0,
               version: Int = 1, headers: [(name: String, value: String)] = []) -> CacheEntry {
    let body: ByteBuffer
    if let size {
        let bodyBytes = size - key.utf8.count - 64 - headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 4 }
        precondition(bodyBytes >= 0, "size too small for the key")
        body = ByteBuffer(bytes: [UInt8](repeating: UInt8(ascii: "x"), count: bodyBytes))
    } else {
        body = ByteBuffer(string: bodyText ?? #"{"code":200,"data":{"key":"\#(key)"}}"#)
    }
    return CacheEntry(key: key, endpoint: endpoint, userID: user, status: 200, headers: HTTPHeaders(headers), body: body, storedAt: storedAt,
                      ttl: ttl, staleWhileRevalidate: swr, staleIfError: sie, version: version)
}

/// A cache store on a new database file with its writer loop running.
final class StoreFixture: Sendable {
    let database: StorageDatabase
    let store: CacheStore
    let writer: Task<Void, Never>

    init(path: String, maxBytes: Int = 64 << 20, memoryBytes: Int = 8 << 20, clock: WallClock = .system,
         groupCommitDelay: Duration = CacheWriter.defaultGroupCommitDelay) throws {
        database = try StorageDatabase(path: path, logger: quietLogger)
        let store = try CacheStore(database: database, maxBytes: maxBytes, memoryBytes: memoryBytes, logger: quietLogger, keepsAttachments: false,
                                   clock: clock, groupCommitDelay: groupCommitDelay)
        self.store = store
        writer = Task { await store.run() }
    }

    func flush() async throws {
        let store = self.store
        try await bounded("flush") { await store.flush() }
    }

    /// Ends the writer loop (after it commits what is queued) and waits for it.
    func finish() async throws {
        store.finish()
        let writer = self.writer
        try await bounded("writer loop end") { await writer.value }
    }
}
