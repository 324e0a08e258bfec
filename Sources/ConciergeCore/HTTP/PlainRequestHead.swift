import NIOHTTP1

/// A client's request head in its plainest form, read straight from its bytes when one read
/// holds exactly that head and nothing else: `GET` or `HEAD`, an origin-form target of URI
/// characters (RFC 3986: unreserved, sub-delims, `:`, `@`, `/`, `?` and `%`), `HTTP/1.1`, header
/// fields of a token name and a visible-ASCII value, no body (neither `Content-Length` nor
/// `Transfer-Encoding`) and a connection that stays open. This is what nearly every request of
/// an app's JSON client is; reading it here costs a fraction of NIO's general decoder.
///
/// Anything else is `nil` and left to NIO's request decoder, which reads every form HTTP/1.1
/// allows (or refuses it): other methods, a body, an absolute-form or asterisk-form target,
/// a target with bytes outside ASCII (kept byte for byte there), HTTP/1.0, obs-fold, a bare LF
/// or CR, obs-text and control characters, white space before a colon or ending a value,
/// `Connection` other than one `keep-alive` (`close` ends the decoder's reading of the
/// connection), `Proxy-Connection`, `Upgrade`, a head over ``maxBytes``, bytes after the
/// blank line. So what this accepts is a strict subset of what the decoder accepts, read the
/// same way, after which the decoder would be between requests just as it was before (a test
/// compares both over a grid of heads and mutations of them, and the `plainrequest` fuzz
/// target over random bytes).
public enum PlainRequestHead {
    /// The most bytes a head may take here; a longer one goes to the decoder.
    public static let maxBytes = 8 * 1024

    /// The request head that `bytes` is, whole, or `nil` when it is not in the plain form.
    public static func parse(_ bytes: UnsafeRawBufferPointer) -> HTTPRequestHead? {
        let cr: UInt8 = 0x0D, lf: UInt8 = 0x0A
        let count = bytes.count
        guard count <= maxBytes, count >= 18 else { return nil }
        let method: HTTPMethod
        var i: Int
        if matches(bytes, at: 0, "GET /") {
            (method, i) = (.GET, 4)
        } else if matches(bytes, at: 0, "HEAD /") {
            (method, i) = (.HEAD, 5)
        } else {
            return nil
        }
        let targetStart = i
        while i < count, isTargetByte(bytes[i]) { i += 1 }
        let targetEnd = i
        guard matches(bytes, at: i, " HTTP/1.1\r\n") else { return nil }
        i += 11

        var fields: [(String, String)] = []
        fields.reserveCapacity(8)
        var sawConnection = false
        while true {
            guard i + 1 < count else { return nil }
            if bytes[i] == cr {
                // The blank line, and the read ends with it.
                guard bytes[i + 1] == lf, i + 2 == count else { return nil }
                break
            }
            guard case .field(let nameRange, let valueRange) = PlainFieldLine.read(bytes, at: &i) else { return nil }
            let name = UnsafeRawBufferPointer(rebasing: bytes[nameRange])
            let value = UnsafeRawBufferPointer(rebasing: bytes[valueRange])
            switch name.count {
            case 14 where ASCIICase.equals(name, lowercase: "content-length"),
                 17 where ASCIICase.equals(name, lowercase: "transfer-encoding"),
                 16 where ASCIICase.equals(name, lowercase: "proxy-connection"),
                 7 where ASCIICase.equals(name, lowercase: "upgrade"):
                return nil
            case 10 where ASCIICase.equals(name, lowercase: "connection"):
                // One `keep-alive`, as clients send it; `close` and lists are the decoder's.
                guard !sawConnection, ASCIICase.equals(value, lowercase: "keep-alive") else { return nil }
                sawConnection = true
            default:
                break
            }
            fields.append((String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
        }
        let target = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[targetStart..<targetEnd]), as: UTF8.self)
        // One array of the fields, given whole to `HTTPHeaders` (its `add` grows its array and
        // compares every name with `connection`).
        return HTTPRequestHead(version: .http1_1, method: method, uri: target, headers: HTTPHeaders(fields))
    }

    /// RFC 3986's characters of a path and a query: unreserved, sub-delims, `:`, `@`, `/`, `?`,
    /// and `%` (escapes are not decoded here or by the decoder).
    static func isTargetByte(_ b: UInt8) -> Bool {
        switch b {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true  // DIGIT, ALPHA
        case 0x2D, 0x2E, 0x5F, 0x7E: true  // - . _ ~
        case 0x21, 0x24, 0x26...0x2C, 0x3B, 0x3D: true  // ! $ & ' ( ) * + , ; =
        case 0x3A, 0x40, 0x2F, 0x3F, 0x25: true  // : @ / ? %
        default: false
        }
    }

    private static func matches(_ bytes: UnsafeRawBufferPointer, at start: Int, _ text: StaticString) -> Bool {
        let n = text.utf8CodeUnitCount
        guard start + n <= bytes.count else { return false }
        let expected = text.utf8Start
        for k in 0..<n where bytes[start + k] != expected[k] { return false }
        return true
    }
}
