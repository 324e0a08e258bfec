import ConciergeCore
import ConciergeStorage
import NIOCore
import NIOHTTP1

/// A reply made from a stored entry (a hit, or a stale entry served): the stored headers,
/// `X-Cache`, `Cache-Status` with the freshness left, and an `Age` that adds the upstream's.
enum CachedReply {
    static func make(_ entry: CacheEntry, _ p: PreparedRequest, status: CacheStatus, now: Double, detail: String? = nil) -> ProxyAnswer {
        var headers = HTTPHeaders()
        for (name, value) in entry.headers where !ASCIICase.equals(name, lowercase: "age") {
            headers.add(name: name, value: value)
        }
        headers.add(name: "X-Cache", value: status.rawValue)
        headers.add(name: "Cache-Status", value: "concierge; hit; ttl=\(entry.remainingTTL(at: now))\(detail.map { "; detail=\($0)" } ?? "")")
        headers.add(name: "Age", value: String(entry.storedAge + entry.age(at: now)))
        var reply = ProxyReply(status: entry.status, headers: headers, body: .buffer(entry.body))
        var report = RequestReport(endpoint: p.endpoint.name, cache: status, succeeded: true)
        if let unwrap = p.endpoint.unwrap, !LocalReplies.unwrap(&reply, path: unwrap, config: p.config) {
            report.succeeded = false
        }
        return ProxyAnswer(reply, report)
    }
}

/// A hit written as ready bytes: the entry's encoded head, then what varies per hit, then
/// the body. No `HTTPHeaders`, no response encoder; only `ttl=` and `Age` are formatted.
struct EncodedHit: Sendable {
    /// The entry's ``EncodedHead`` bytes, and its body.
    var head, body: ByteBuffer
    /// Seconds of freshness left (`Cache-Status: …; ttl=`), and the upstream's `Age` plus the
    /// entry's own.
    var ttl, age: Int
    var status: Int
    var report: RequestReport

    /// The hit as one buffer: the head, `Cache-Status` and `Age`, the blank line and the body,
    /// when the body is at most `inlineBody` bytes (copying it costs less than two more writes
    /// through the pipeline); a larger body is handed back to be written after it.
    func bytes(allocator: ByteBufferAllocator, inlineBody: Int) -> (head: ByteBuffer, body: ByteBuffer?) {
        let inline = body.readableBytes <= inlineBody
        var bytes = allocator.buffer(capacity: head.readableBytes + Self.tailCapacity + (inline ? body.readableBytes : 0))
        bytes.writeImmutableBuffer(head)
        WireText.append(to: &bytes, capacity: Self.tailCapacity) { text in
            text.put("Cache-Status: concierge; hit; ttl=" as StaticString)
            Self.put(ttl, into: &text)
            text.put("\r\nAge: " as StaticString)
            Self.put(age, into: &text)
            text.put("\r\n\r\n" as StaticString)
        }
        guard inline else { return (bytes, body) }
        bytes.writeImmutableBuffer(body)
        return (bytes, nil)
    }

    /// The tail's text at most: its fixed 45 bytes and two numbers of up to 20 characters.
    private static let tailCapacity = 96

    private static func put(_ number: Int, into text: inout WireText) {
        if number >= 0 { text.put(number) } else { text.put(String(number)) }
    }

    /// The same hit as an ordinary reply (for the request log and the counters).
    var answer: ProxyAnswer {
        ProxyAnswer(ProxyReply(status: status, body: .buffer(body)), report)
    }
}

/// A stored reply's status line and headers encoded once, without what varies per hit (the
/// `Cache-Status` freshness and `Age`, appended by the hit), and the upstream's own `Age`.
/// Kept with the entry in the hot tier as its ``CacheEntry/Attachment`` (the storage keeps the
/// bytes; what they mean is this module's).
struct EncodedHead {
    var bytes: ByteBuffer
    var upstreamAge: Int

    init(bytes: ByteBuffer, upstreamAge: Int) {
        (self.bytes, self.upstreamAge) = (bytes, upstreamAge)
    }

    init(_ attachment: CacheEntry.Attachment) {
        (bytes, upstreamAge) = (attachment.bytes, attachment.value)
    }

    var attachment: CacheEntry.Attachment { CacheEntry.Attachment(bytes: bytes, value: upstreamAge) }
}

extension CachedReply {
    /// An HTTP/1.1 head for a stored reply, all but `Cache-Status` and `Age`: the status
    /// line, the stored headers, `X-Cache: HIT`, `Content-Length`. Made once per entry, by
    /// its first lookup in the hot tier (``withEncodedHead(_:in:)``).
    static func encodeHead(_ entry: CacheEntry) -> EncodedHead {
        // Open-ended: each hit appends its `Cache-Status` and `Age`, then the empty line.
        let head = WireHead(.status(.http1_1, entry.status), fields: entry.headers, omitting: Self.variesPerHit, extra: "X-Cache: HIT\r\n",
                            contentLength: entry.body.readableBytes, ends: false)
        return EncodedHead(bytes: head.bytes(), upstreamAge: entry.storedAge)
    }

    /// Stored fields a hit writes itself (lowercase).
    private static let variesPerHit = ["age"]

    /// A hot-tier entry with its encoded head: the entry's first lookup encodes it and leaves
    /// it with the entry in the tier (``CacheStore/attach(_:to:)``) for the hits after it, so an
    /// entry stored and never read again (a miss of a one-off key) costs no encoding. A store
    /// that keeps no attachments gets none: its hits build their head.
    @inline(__always)
    static func withEncodedHead(_ entry: CacheEntry, in cache: CacheStore) -> CacheEntry {
        guard entry.attachment == nil, cache.keepsAttachments else { return entry }
        return attachingHead(entry, in: cache)
    }

    private static func attachingHead(_ found: CacheEntry, in cache: CacheStore) -> CacheEntry {
        var entry = found
        entry.attachment = encodeHead(found).attachment
        cache.attach(entry.attachment!, to: entry)
        return entry
    }

    /// A fresh entry's hit as ready bytes, when the entry has an encoded head and the endpoint
    /// does not `unwrap` (whose body depends on the configuration).
    static func encoded(_ entry: CacheEntry, endpoint: EndpointPolicy, now: Double) -> EncodedHit? {
        guard let attachment = entry.attachment, endpoint.unwrap == nil else { return nil }
        let head = EncodedHead(attachment)
        return EncodedHit(head: head.bytes, body: entry.body, ttl: entry.remainingTTL(at: now), age: head.upstreamAge + entry.age(at: now),
                          status: entry.status, report: RequestReport(endpoint: endpoint.name, cache: .hit, succeeded: true))
    }
}
