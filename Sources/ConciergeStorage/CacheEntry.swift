import ConciergeCore
import Foundation
import NIOCore
import NIOHTTP1

/// One stored reply: what a cache hit answers with, and the windows it may be served in.
///
/// Its fields live in one copy-on-write box: an entry is handed from the reply to the hot
/// tier, the writer's queue and its batch, and each copy of thirteen fields was a retain of
/// every string, list and buffer in it (and a release of each when it went).
public struct CacheEntry: Sendable {
    struct Fields {
        var key: String
        var endpoint: String
        var userID: String?
        var status: Int
        var headers: HTTPHeaders
        var body: ByteBuffer
        var storedAt: Double
        var ttl: Double
        var staleWhileRevalidate: Double
        var staleIfError: Double
        var version: Int
        var attachment: Attachment? = nil
        var tags: [String] = []
    }

    /// The fields' box. `@unchecked Sendable`: its one mutable property is written only
    /// through ``unique()``, that is while this is the only reference to the box (an entry
    /// that was copied, and so may be shared with another thread, is copied before a write),
    /// so a box another thread can see is never written: the same rule as `Array`'s buffer.
    private final class Storage: @unchecked Sendable {
        var fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private var storage: Storage

    /// Copies the box first when another entry shares it.
    private mutating func unique() {
        if !isKnownUniquelyReferenced(&storage) { storage = Storage(storage.fields) }
    }

    public var key: String {
        _read { yield storage.fields.key }
        _modify { unique(); yield &storage.fields.key }
    }
    public var endpoint: String {
        _read { yield storage.fields.endpoint }
        _modify { unique(); yield &storage.fields.endpoint }
    }
    public var userID: String? {
        _read { yield storage.fields.userID }
        _modify { unique(); yield &storage.fields.userID }
    }
    public var status: Int {
        _read { yield storage.fields.status }
        _modify { unique(); yield &storage.fields.status }
    }
    /// Reply headers kept with the body (content type and the like; no hop-by-hop fields).
    public var headers: HTTPHeaders {
        _read { yield storage.fields.headers }
        _modify { unique(); yield &storage.fields.headers }
    }
    public var body: ByteBuffer {
        _read { yield storage.fields.body }
        _modify { unique(); yield &storage.fields.body }
    }
    /// Unix seconds when the upstream reply was stored.
    public var storedAt: Double {
        _read { yield storage.fields.storedAt }
        _modify { unique(); yield &storage.fields.storedAt }
    }
    public var ttl: Double {
        _read { yield storage.fields.ttl }
        _modify { unique(); yield &storage.fields.ttl }
    }
    public var staleWhileRevalidate: Double {
        _read { yield storage.fields.staleWhileRevalidate }
        _modify { unique(); yield &storage.fields.staleWhileRevalidate }
    }
    public var staleIfError: Double {
        _read { yield storage.fields.staleIfError }
        _modify { unique(); yield &storage.fields.staleIfError }
    }
    public var version: Int {
        _read { yield storage.fields.version }
        _modify { unique(); yield &storage.fields.version }
    }
    /// What the cache's user derived from the entry and keeps with it in the hot tier
    /// (``HotTier/attach(_:to:)``, when the store ``CacheStore/keepsAttachments``); `nil` until then.
    public var attachment: Attachment? {
        _read { yield storage.fields.attachment }
        _modify { unique(); yield &storage.fields.attachment }
    }
    /// The entry's tags (`cache.tags`), stored beside it in `cache_tag`. Empty for an entry read
    /// back from SQLite: tags are only ever looked up there.
    public var tags: [String] {
        _read { yield storage.fields.tags }
        _modify { unique(); yield &storage.fields.tags }
    }

    public init(key: String, endpoint: String, userID: String?, status: Int, headers: HTTPHeaders,
                body: ByteBuffer, storedAt: Double, ttl: Double, staleWhileRevalidate: Double, staleIfError: Double, version: Int) {
        storage = Storage(Fields(key: key, endpoint: endpoint, userID: userID, status: status, headers: headers, body: body,
                                 storedAt: storedAt, ttl: ttl, staleWhileRevalidate: staleWhileRevalidate,
                                 staleIfError: staleIfError, version: version))
    }

    /// Headers stored as a JSON list of `[name, value]` pairs (``JSONValue/serializedPairs(_:)``).
    public static func headers(fromPairs text: String) -> HTTPHeaders {
        var text = text
        return text.withUTF8 { headers(fromPairs: UnsafeRawBufferPointer($0)) }
    }

    /// ``headers(fromPairs:)-(String)`` from the text's bytes (a column read in place): the
    /// pairs as the writer wrote them (``JSONPairList``, no tree), else the full parser's reading.
    public static func headers(fromPairs bytes: UnsafeRawBufferPointer) -> HTTPHeaders {
        if let pairs = JSONPairList.read(bytes) { return HTTPHeaders(pairs) }
        return parsedHeaders(fromPairs: Array(bytes))
    }

    /// The full parser's reading of a stored header list (what ``JSONPairList`` leaves to it).
    private static func parsedHeaders(fromPairs bytes: [UInt8]) -> HTTPHeaders {
        guard case .array(let items)? = JSONValue.parse(bytes) else { return HTTPHeaders() }
        var headers = HTTPHeaders()
        for item in items {
            if case .array(let parts) = item, parts.count == 2, let name = parts[0].stringValue, let value = parts[1].stringValue {
                headers.add(name: name, value: value)
            }
        }
        return headers
    }

    /// Approximate bytes this entry takes (body, key, headers).
    public var size: Int {
        body.readableBytes + key.utf8.count + headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 4 } + 64
    }

    public var freshUntil: Double { storedAt + ttl }
    /// After this instant the entry is of no use at all and may be deleted.
    public var usableUntil: Double { storedAt + ttl + max(staleWhileRevalidate, staleIfError) }

    public func isFresh(at now: Double) -> Bool { now < freshUntil }
    /// The stored `Age` (the upstream's, or with HTTP caching the reply's age on arrival).
    public var storedAge: Int { headers.first(name: "age").flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }.map { max(0, $0) } ?? 0 }
    public func age(at now: Double) -> Int { max(0, Int(now - storedAt)) }
    /// Seconds of freshness left (may be negative).
    public func remainingTTL(at now: Double) -> Int { Int((freshUntil - now).rounded(.down)) }
}

extension CacheEntry {
    /// Bytes the cache's user made from an entry, and a number of its own, kept with the entry
    /// in the hot tier so the user need not make them again (the proxy keeps a hit's encoded
    /// head there). The cache neither makes nor reads them: it counts their footprint against
    /// `storage.memory_bytes` and lets them go with the entry.
    public struct Attachment: Sendable {
        public var bytes: ByteBuffer
        public var value: Int

        public init(bytes: ByteBuffer, value: Int) {
            (self.bytes, self.value) = (bytes, value)
        }
    }
}
