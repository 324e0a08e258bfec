import ConciergeCore
import NIOCore
import NIOHTTP1

/// A request for a pooled upstream connection as it goes on the wire: one buffer with the
/// request line, the header block and the body, encoded once when the exchange is made and
/// written as it is (``UpstreamConnection``), with no `HTTPHeaders` copy and no encoder pass.
///
/// `Host` comes first when the caller sent none. Framing is the pool's own, from the body, as
/// AsyncHTTPClient sets it: the caller's `Content-Length` and `Transfer-Encoding` are
/// dropped, `Content-Length` is sent for a body, and `0` for an empty body of a method that
/// expects one. Like NIO's outbound header validation, which this replaces: every field name
/// must be a token and no value may hold a control character other than HTAB (RFC 9110
/// §5.1, §5.5), so a value with CR LF in it (a token from an upstream's reply, say) can
/// never add a field or split the request.
struct UpstreamWireRequest: Sendable {
    let method: HTTPMethod
    let target: String
    let bytes: ByteBuffer
    /// The caller asked for `Connection: close`: the connection closes after the reply.
    let closeAfter: Bool

    /// Methods that may be sent twice (RFC 9110 §9.2.2) when a reused connection turns out
    /// closed under the first attempt.
    var isIdempotent: Bool { [.GET, .HEAD, .OPTIONS, .PUT, .DELETE].contains(method) }

    /// Why a request could not be encoded.
    struct Invalid: Error, CustomStringConvertible {
        var description: String
    }

    static func encode(method: String, target: String, authority: String, headers: HTTPHeaders,
                       body: ByteBuffer?) throws(Invalid) -> UpstreamWireRequest {
        guard isToken(method) else { throw Invalid(description: "the method is not a token") }
        guard !target.isEmpty, StringBytes.allSatisfy(in: target, { $0 > 0x20 && $0 != 0x7F }) else {
            throw Invalid(description: "the request target holds a space or a control character")
        }
        let bodyLength = body?.readableBytes ?? 0
        var hasHost = false
        var closeAfter = false
        for (name, value) in headers {
            guard isToken(name) else { throw Invalid(description: "a header field name is not a token") }
            guard StringBytes.allSatisfy(in: value, { $0 >= 0x20 ? $0 != 0x7F : $0 == 0x09 }) else {
                throw Invalid(description: "the value of \(name) holds a control character")
            }
            switch name.utf8.count {
            case 4 where ASCIICase.equals(name, lowercase: "host"): hasHost = true
            case 10 where ASCIICase.equals(name, lowercase: "connection"): closeAfter = closeAfter || asksToClose(value)
            default: break
            }
        }
        let httpMethod = HTTPMethod(rawValue: method)
        let contentLength: Int?
        switch httpMethod {
        case _ where bodyLength > 0: contentLength = bodyLength
        case .GET, .HEAD, .DELETE, .CONNECT, .TRACE: contentLength = nil
        default: contentLength = 0
        }
        let head = WireHead(.request(method: method, target: target), leading: hasHost ? nil : ("Host", authority), fields: headers,
                            omitting: framing, contentLength: contentLength)
        var bytes = head.bytes(followedBy: bodyLength)
        if let body, bodyLength > 0 { bytes.writeImmutableBuffer(body) }
        return UpstreamWireRequest(method: httpMethod, target: target, bytes: bytes, closeAfter: closeAfter)
    }

    /// Fields the pool sets itself from the body (lowercase).
    private static let framing = ["content-length", "transfer-encoding"]

    private static func asksToClose(_ value: String) -> Bool {
        FieldList.elements(value).contains("close")
    }

    /// RFC 9110 §5.6.2: one or more tchar (``HTTPFieldSyntax/isTokenCharacter(_:)``), read
    /// over the string's own bytes.
    static func isToken(_ text: String) -> Bool {
        !text.isEmpty && StringBytes.allSatisfy(in: text, HTTPFieldSyntax.isTokenCharacter)
    }
}
