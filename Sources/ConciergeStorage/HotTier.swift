import ConciergeCore
import Foundation
import Synchronization

/// The in-memory tier in front of SQLite: recent entries up to a byte budget, least
/// recently used out. Safe to call from any thread (one `Mutex`); a hit is a dictionary
/// lookup and a list splice, never I/O.
public final class HotTier: Sendable {
    private struct Node {
        var entry: CacheEntry
        /// The entry's key with its hash, as ``State/index`` holds it.
        var key: HashedKey
        var size: Int
        /// Last access time reported to SQLite (for its LRU), refreshed at most once a second.
        var reportedAccess: Double
        var prev: Int
        var next: Int
    }

    private struct State {
        var index: [HashedKey: Int] = [:]
        var nodes: [Node?] = []
        var free: [Int] = []
        var head = -1  // most recent
        var tail = -1  // least recent
        var bytes = 0

        mutating func unlink(_ i: Int) {
            let node = nodes[i]!
            if node.prev >= 0 { nodes[node.prev]!.next = node.next } else { head = node.next }
            if node.next >= 0 { nodes[node.next]!.prev = node.prev } else { tail = node.prev }
        }

        mutating func pushFront(_ i: Int) {
            nodes[i]!.prev = -1
            nodes[i]!.next = head
            if head >= 0 { nodes[head]!.prev = i }
            head = i
            if tail < 0 { tail = i }
        }

        mutating func remove(_ i: Int) {
            index[nodes[i]!.key] = nil
            removeReplaced(i)
        }

        /// Removes least recently used entries, never node `kept`, until `bytes` fits
        /// `capacity`; returns them (released by the caller after the lock).
        mutating func evict(toFit capacity: Int, keeping kept: Int) -> [CacheEntry] {
            var left: [CacheEntry] = []
            while bytes > capacity, tail >= 0, tail != kept {
                left.append(nodes[tail]!.entry)
                remove(tail)
            }
            return left
        }

        /// Removes node `i` whose key ``index`` already maps to another node.
        mutating func removeReplaced(_ i: Int) {
            unlink(i)
            bytes -= nodes[i]!.size
            nodes[i] = nil
            free.append(i)
        }
    }

    private let state = Mutex(State())
    public let capacityBytes: Int
    /// Heap each entry takes beyond its ``CacheEntry/size`` (0: the tier counts payload only).
    public let entryOverhead: Int

    /// - Parameter entryOverhead: counted for every entry besides its size (and its encoded
    ///   head, once it has one), so that the budget bounds memory rather than payload: the
    ///   daemon's tier passes ``allocationOverhead``.
    public init(capacityBytes: Int, entryOverhead: Int = 0) {
        self.capacityBytes = capacityBytes
        self.entryOverhead = entryOverhead
    }

    /// The entry for `key`, marked most recently used.
    public func get(_ key: String) -> CacheEntry? {
        getReportingAccess(HashedKey(key), now: 0)?.entry
    }

    /// The entry for `key`, and whether its access time should be reported to SQLite
    /// (when the last report is older than `interval`).
    public func getReportingAccess(_ key: HashedKey, now: Double, interval: Double = 1) -> (entry: CacheEntry, report: Bool)? {
        state.withLock { s in
            guard let i = s.index[key] else { return nil }
            if s.head != i {
                s.unlink(i)
                s.pushFront(i)
            }
            var report = false
            if now - s.nodes[i]!.reportedAccess >= interval {
                s.nodes[i]!.reportedAccess = now
                report = true
            }
            return (s.nodes[i]!.entry, report)
        }
    }

    /// Heap an entry takes beyond ``CacheEntry/size`` and its attachment: the allocations
    /// behind its key, headers, body and node (measured: RSS grew about 1.3 KB per entry the
    /// tier held, against 300 bytes of ``CacheEntry/size`` and a 256-byte head).
    public static let allocationOverhead = 768

    /// What an entry costs this tier: its ``CacheEntry/size``, the tier's ``entryOverhead``,
    /// and its attachment once it has one, so that `storage.memory_bytes` bounds memory
    /// rather than payload (an entry is stored without one: its user attaches it later).
    func footprint(_ entry: CacheEntry) -> Int {
        entry.size + entryOverhead + (entry.attachment?.bytes.storageCapacity ?? 0)
    }

    public func put(_ entry: CacheEntry) {
        put(entry, key: HashedKey(entry.key))
    }

    /// ``put(_:)`` with the entry's key hashed already (`key.text == entry.key`).
    public func put(_ entry: CacheEntry, key: HashedKey) {
        let size = footprint(entry)
        guard size <= capacityBytes else {
            remove(key)
            return
        }
        // What leaves the tier is released after the lock: freeing an entry's buffers is not
        // work the other event loops' lookups should wait for.
        let left = state.withLock { s -> [CacheEntry] in
            var left: [CacheEntry] = []
            let node = Node(entry: entry, key: key, size: size, reportedAccess: 0, prev: -1, next: -1)
            let i: Int
            if let f = s.free.popLast() { s.nodes[f] = node; i = f } else { s.nodes.append(node); i = s.nodes.count - 1 }
            // One hash of the key: the entry it replaces, if any, leaves without a lookup of its own.
            if let old = s.index.updateValue(i, forKey: key) {
                left.append(s.nodes[old]!.entry)
                s.removeReplaced(old)
            }
            s.pushFront(i)
            s.bytes += size
            return left + s.evict(toFit: capacityBytes, keeping: i)
        }
        withExtendedLifetime(left) {}
    }

    /// Gives `entry`, if the tier still holds it (not a newer one under its key) and it has
    /// none yet, the attachment its user made from it: the tier's bytes grow by the
    /// attachment's footprint, and the least recently used entries leave to make room.
    public func attach(_ attachment: CacheEntry.Attachment, to entry: CacheEntry) {
        let left = state.withLock { s -> [CacheEntry] in
            guard let i = s.index[HashedKey(entry.key)], s.nodes[i]!.entry.attachment == nil,
                  s.nodes[i]!.entry.storedAt == entry.storedAt, s.nodes[i]!.entry.version == entry.version else { return [] }
            s.nodes[i]!.entry.attachment = attachment
            let size = footprint(s.nodes[i]!.entry)
            s.bytes += size - s.nodes[i]!.size
            s.nodes[i]!.size = size
            guard size <= capacityBytes else {
                let entry = s.nodes[i]!.entry
                s.remove(i)
                return [entry]
            }
            return s.evict(toFit: capacityBytes, keeping: i)
        }
        withExtendedLifetime(left) {}
    }

    public func remove(_ key: String) {
        remove(HashedKey(key))
    }

    func remove(_ key: HashedKey) {
        state.withLock { s in
            if let i = s.index[key] { s.remove(i) }
        }
    }

    /// Removes the entries the criteria select (a pattern selects none here: see
    /// ``removeKeys(matching:until:)``); returns their keys.
    @discardableResult
    public func remove(where criteria: InvalidationCriteria) -> [String] {
        let snapshot: [CacheEntry] = state.withLock { s in s.nodes.compactMap { $0?.entry } }
        let keys = snapshot.filter { criteria.matches($0) }.map(\.key)
        remove(keys: keys)
        return keys
    }

    /// Removes the entries whose key the pattern matches (``keys(matching:until:)``).
    /// - Throws: ``KeyPatternError`` when a match exceeds a limit or `deadline` passes;
    ///   nothing is removed then.
    public func removeKeys(matching pattern: KeyPattern, until deadline: ContinuousClock.Instant) throws(KeyPatternError) {
        remove(keys: try keys(matching: pattern, until: deadline))
    }

    /// The keys the pattern matches. The keys are copied under the lock and matched outside
    /// it, so a pattern never stalls a hit.
    /// - Throws: ``KeyPatternError`` when a match exceeds a limit or `deadline` passes.
    func keys(matching pattern: KeyPattern, until deadline: ContinuousClock.Instant) throws(KeyPatternError) -> [String] {
        let keys: [String] = state.withLock { s in s.index.keys.map(\.text) }
        let matcher = pattern.matcher()
        var matched: [String] = []
        for (n, key) in keys.enumerated() {
            if n % ScanBound.checkEvery == 0, ContinuousClock.now >= deadline { throw .deadlineExceeded(CacheStore.patternScanLimit, keysScanned: n) }
            if try matcher.matches(key) { matched.append(key) }
        }
        return matched
    }

    public func remove(keys: [String]) {
        guard !keys.isEmpty else { return }
        state.withLock { s in
            for key in keys { if let i = s.index[HashedKey(key)] { s.remove(i) } }
        }
    }

    /// Removes every entry the predicate selects.
    public func removeAll(where predicate: (CacheEntry) -> Bool) {
        state.withLock { s in
            let doomed = s.index.values.filter { predicate(s.nodes[$0]!.entry) }
            for i in doomed { s.remove(i) }
        }
    }

    public func removeAll() {
        state.withLock { $0 = State() }
    }

    public var count: Int { state.withLock { $0.index.count } }
    public var bytes: Int { state.withLock { $0.bytes } }
}
