import NIOCore
import NIOHTTP1

/// An HTTP/1.1 message head as it goes on the wire: the one writer of status lines, request
/// lines, header fields and framing for every head Concierge writes itself (its replies, the
/// heads of cached entries, the header-timeout 408, requests to pooled upstreams).
///
/// ``write(to:)`` reserves an upper bound of the head's size (``maxByteCount``: the pieces'
/// lengths, no name compared) and writes it in one pass (``emit(into:)`` over ``WireText``).
/// Fields named in ``omitting`` are left out of ``fields``: framing the head sets itself
/// (`Content-Length`, `Connection`) or what varies per use (a cached reply's `Age`).
///
/// - Important: the fields are written as they are. Callers pass fields that are valid
///   (``HTTPFieldSyntax``): NIO's parser checked the client's, and an upstream request checks
///   its own before it is encoded.
public struct WireHead {
    public enum StartLine {
        /// `HTTP/x.y CODE REASON`.
        case status(HTTPVersion, Int)
        /// `METHOD TARGET HTTP/1.1`.
        case request(method: String, target: String)
    }

    public var start: StartLine
    /// A field written before ``fields`` (an upstream request's `Host`, when the caller sent none).
    public var leading: (name: StaticString, value: String)?
    public var fields: HTTPHeaders
    /// Lowercase names of ``fields`` left out.
    public var omitting: [String]
    /// Written after the fields, as is (lines ending in CRLF).
    public var extra: StaticString?
    /// `Content-Length`, when the head frames a body by length.
    public var contentLength: Int?
    /// `Connection: close`.
    public var closes: Bool
    /// Writes the empty line that ends the head (`false`: the caller appends more fields).
    public var ends: Bool

    /// A reply's own framing, replaced by the head's (for ``omitting``).
    public static let lengthField = ["content-length"]
    public static let lengthAndConnectionFields = ["content-length", "connection"]

    public init(_ start: StartLine, leading: (name: StaticString, value: String)? = nil, fields: HTTPHeaders, omitting: [String] = [],
                extra: StaticString? = nil, contentLength: Int? = nil, closes: Bool = false, ends: Bool = true) {
        (self.start, self.leading, self.fields, self.omitting) = (start, leading, fields, omitting)
        (self.extra, self.contentLength, self.closes, self.ends) = (extra, contentLength, closes, ends)
    }

    /// Appends the head to `buffer`, reserving `followedBy` more bytes for what comes after it
    /// (a body written into the same buffer).
    public func write(to buffer: inout ByteBuffer, followedBy: Int = 0) {
        let capacity = maxByteCount
        buffer.reserveCapacity(minimumWritableBytes: capacity + followedBy)
        WireText.append(to: &buffer, capacity: capacity) { emit(into: &$0) }
    }

    /// At least as many bytes as ``emit(into:)`` writes, read off the pieces' lengths in one
    /// pass over the fields without comparing names (an omitted field counts as written):
    /// what ``write(to:followedBy:)`` reserves. Numbers count as 20 digits, the most an `Int` has.
    public var maxByteCount: Int {
        let number = 20
        var count: Int
        switch start {
        case .status(_, let code):
            count = "HTTP/. \r\n".utf8.count + 3 * number + 1 + HTTPResponseStatus(statusCode: code).reasonPhrase.utf8.count
        case .request(let method, let target):
            count = method.utf8.count + " HTTP/1.1\r\n".utf8.count + 1 + target.utf8.count
        }
        if let leading { count += leading.name.utf8CodeUnitCount + leading.value.utf8.count + 4 }
        count += WireText.size(of: fields)
        if let extra { count += extra.utf8CodeUnitCount }
        if contentLength != nil { count += "Content-Length: \r\n".utf8.count + number }
        if closes { count += "Connection: close\r\n".utf8.count }
        if ends { count += 2 }
        return count
    }

    /// The head in a buffer of its own, with room for `followedBy` more bytes.
    public func bytes(followedBy: Int = 0) -> ByteBuffer {
        var buffer = ByteBuffer()
        write(to: &buffer, followedBy: followedBy)
        return buffer
    }

    /// Every byte of the head, in order, into `sink`.
    public func emit<Sink: WireSink>(into sink: inout Sink) {
        switch start {
        case .status(let version, let code):
            sink.put("HTTP/" as StaticString)
            sink.put(version.major)
            sink.put("." as StaticString)
            sink.put(version.minor)
            sink.put(" " as StaticString)
            sink.put(code)
            sink.put(" " as StaticString)
            sink.put(HTTPResponseStatus(statusCode: code).reasonPhrase)
        case .request(let method, let target):
            sink.put(method)
            sink.put(" " as StaticString)
            sink.put(target)
            sink.put(" HTTP/1.1" as StaticString)
        }
        sink.put("\r\n" as StaticString)
        if let leading { Self.field(leading.name, leading.value, into: &sink) }
        for (name, value) in fields where omitting.isEmpty || !ASCIICase.equalsAny(name, lowercase: omitting) {
            sink.put(name)
            sink.put(": " as StaticString)
            sink.put(value)
            sink.put("\r\n" as StaticString)
        }
        if let extra { sink.put(extra) }
        if let contentLength {
            sink.put("Content-Length: " as StaticString)
            sink.put(contentLength)
            sink.put("\r\n" as StaticString)
        }
        if closes { sink.put("Connection: close\r\n" as StaticString) }
        if ends { sink.put("\r\n" as StaticString) }
    }

    private static func field<Sink: WireSink>(_ name: StaticString, _ value: String, into sink: inout Sink) {
        sink.put(name)
        sink.put(": " as StaticString)
        sink.put(value)
        sink.put("\r\n" as StaticString)
    }
}
