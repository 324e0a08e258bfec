import NIOHTTP1

/// The head of an upstream reply in its plainest form, read straight from its bytes: an
/// HTTP/1.1 or 1.0 status line with a final status (200–599), header fields of a token name and
/// a visible-ASCII value, and a body framed by one `Content-Length` (not read for a reply to
/// `HEAD`), or none for `204` and `304`. This is what nearly every reply of a JSON API is; reading it here costs a
/// fraction of NIO's general decoder.
///
/// Anything else is ``Parse/unusual`` and left to NIO's decoder, which reads every form
/// HTTP/1.1 allows (or refuses it): `Transfer-Encoding`, a body read to the end of the
/// connection, a reply to `HEAD` without `Content-Length`, interim `1xx` replies, obs-fold, a
/// bare LF, a second `Content-Length`, `Proxy-Connection`, a `Connection` other than just
/// `close` or `keep-alive`, HTTP/1.0 with both, obs-text, white space before a colon or ending a value, a head over
/// ``maxBytes``. So what this accepts is a strict subset of what the decoder
/// accepts, read the same way (a test compares both over a grid of heads and splits, and the
/// `plainreply` fuzz target over random heads).
public struct PlainReplyHead: Sendable {
    public var version: HTTPVersion
    public var status: Int
    public var headers: HTTPHeaders
    /// The body's length: `0` when the reply has no body (`HEAD`, `204`, `304`).
    public var bodyLength: Int
    /// The connection stays open after this reply: HTTP/1.1 without a `Connection: close`,
    /// HTTP/1.0 with a `Connection: keep-alive` and without `close` (as NIO's decoder says;
    /// `HTTPResponseHead.isKeepAlive` of fields built here would read them again as text).
    public var keepAlive: Bool

    /// The most bytes a head may take here; a longer one goes to the decoder (with its own limits).
    public static let maxBytes = 16 * 1024

    public enum Parse: Sendable {
        /// A whole head of `length` bytes, the blank line included.
        case complete(PlainReplyHead, length: Int)
        /// No blank line yet (and fewer than ``maxBytes`` bytes): wait for more.
        case needMore
        /// Not in the plain form: the decoder reads it.
        case unusual
    }

    /// Reads the head at the start of `bytes`.
    /// - Parameter toHEAD: the request was a `HEAD` (its reply announces a length it does not send).
    public static func parse(_ bytes: UnsafeRawBufferPointer, toHEAD: Bool) -> Parse {
        let cr: UInt8 = 0x0D, lf: UInt8 = 0x0A
        let count = bytes.count
        let minor: Int, status: Int
        var i: Int
        switch statusLine(bytes) {
        case .line(let m, let s, let end): (minor, status, i) = (m, s, end)
        case .early(let parse): return parse
        }
        var fields: [(String, String)] = []
        fields.reserveCapacity(12)
        var framing = Framing()
        while true {
            guard i + 1 < count else { return needMoreOrUnusual(bytes) }
            if bytes[i] == cr {
                guard bytes[i + 1] == lf else { return .unusual }
                i += 2
                break
            }
            let name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer
            switch PlainFieldLine.read(bytes, at: &i) {
            case .field(let nameRange, let valueRange):
                name = UnsafeRawBufferPointer(rebasing: bytes[nameRange])
                value = UnsafeRawBufferPointer(rebasing: bytes[valueRange])
            case .needMore: return needMoreOrUnusual(bytes)
            case .unusual: return .unusual
            }
            guard framing.note(name: name, value: value) else { return .unusual }
            fields.append((String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
        }
        guard i <= maxBytes else { return .unusual }
        // HTTP/1.0 naming both: NIO's decoder keeps the connection open (it reads only
        // `keep-alive` there); that odd case is its to read.
        guard minor == 1 || !(framing.close && framing.keepAliveToken) else { return .unusual }
        let bodyless = toHEAD || status == 204 || status == 304
        // Without a length only `204` and `304`: a body read to the end of the connection (or
        // chunked) is the decoder's, and so is a reply to `HEAD` without one, which NIO's
        // decoder takes as the connection's last.
        guard let length = framing.contentLength ?? (status == 204 || status == 304 ? 0 : nil) else { return .unusual }
        // One array of the fields, given whole to `HTTPHeaders` (its `add` grows its array and
        // compares every name with `connection`).
        let head = PlainReplyHead(version: HTTPVersion(major: 1, minor: minor), status: status, headers: HTTPHeaders(fields),
                                  bodyLength: bodyless ? 0 : length,
                                  keepAlive: !framing.close && (minor == 1 || framing.keepAliveToken))
        return .complete(head, length: i)
    }

    private enum StatusLine {
        /// `HTTP/1.minor status reason CRLF`, the fields starting at `end`.
        case line(minor: Int, status: Int, end: Int)
        /// Not a whole plain status line: what ``parse(_:toHEAD:)`` answers.
        case early(Parse)
    }

    /// The status line begins `HTTP/1.x NNN ` (the space required; a reason phrase, possibly
    /// empty, follows). Checked as far as bytes came: a wrong one is the decoder's at once.
    @inline(__always)
    private static func statusLine(_ bytes: UnsafeRawBufferPointer) -> StatusLine {
        let count = bytes.count
        let start: StaticString = "HTTP/1.1 000 "
        for i in 0..<min(count, 13) {
            let b = bytes[i]
            let fits = i == 7 ? b == 0x30 || b == 0x31 : (9...11).contains(i) ? isDigit(b) : b == start.utf8Start[i]
            guard fits else { return .early(.unusual) }
        }
        guard count >= 14 else { return .early(.needMore) }
        let minor = Int(bytes[7] &- 0x30)
        let status = Int(bytes[9] &- 0x30) * 100 + Int(bytes[10] &- 0x30) * 10 + Int(bytes[11] &- 0x30)
        guard status >= 200, status <= 599 else { return .early(.unusual) }
        var i = 13
        while i < count, bytes[i] != 0x0D {
            let b = bytes[i]
            guard b == 0x09 || (b >= 0x20 && b < 0x7F) else { return .early(.unusual) }
            i += 1
        }
        guard i + 1 < count else { return .early(needMoreOrUnusual(bytes)) }
        guard bytes[i] == 0x0D, bytes[i + 1] == 0x0A else { return .early(.unusual) }
        return .line(minor: minor, status: status, end: i + 2)
    }

    /// What the fields say of the body's framing and the connection.
    private struct Framing {
        var contentLength: Int? = nil
        var close = false
        var keepAliveToken = false

        /// Notes one field; `false` when it makes the head the decoder's.
        @inline(__always)
        mutating func note(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) -> Bool {
            switch name.count {
            case 14 where ASCIICase.equals(name, lowercase: "content-length"):
                guard contentLength == nil, let length = PlainReplyHead.decimal(value) else { return false }
                contentLength = length
            case 17 where ASCIICase.equals(name, lowercase: "transfer-encoding"):
                return false
            case 16 where ASCIICase.equals(name, lowercase: "proxy-connection"):
                return false  // NIO's decoder reads it as a `Connection`
            case 10 where ASCIICase.equals(name, lowercase: "connection"):
                // One token, as servers send it; a list is the decoder's (its reading of
                // lists, white space and tabs is its own).
                if ASCIICase.equals(value, lowercase: "close") {
                    close = true
                } else if ASCIICase.equals(value, lowercase: "keep-alive") {
                    keepAliveToken = true
                } else {
                    return false
                }
            default:
                break
            }
            return true
        }
    }

    /// The bytes so far begin a plain head: wait for more, unless the head would be too long.
    private static func needMoreOrUnusual(_ bytes: UnsafeRawBufferPointer) -> Parse {
        bytes.count < maxBytes ? .needMore : .unusual
    }

    private static func isDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }

    /// 1–18 digits, nothing else (no sign, no white space inside, no list).
    private static func decimal(_ bytes: UnsafeRawBufferPointer) -> Int? {
        guard !bytes.isEmpty, bytes.count <= 18 else { return nil }
        var value = 0
        for b in bytes {
            guard isDigit(b) else { return nil }
            value = value * 10 + Int(b &- 0x30)
        }
        return value
    }
}
