import ConciergeCore
import NIOHTTP1
import NIOCore

/// The checks a request head passes before routing (docs/hardening.md): header block size,
/// method, transfer coding, target form, `Host`, `Expect`; header names with `_` are dropped.
enum RequestHeadCheck {
    /// Why `head` is refused, or `nil`. Turns an absolute-form target naming an upstream into
    /// origin form and drops underscored header names, in place.
    ///
    /// - Parameter allowedHost: the connection's last `Host` value found allowed, with the
    ///   configuration that allowed it: the same single value under the same configuration is
    ///   not checked again (clients send one `Host` per connection). Updated here.
    static func refusal(_ head: inout HTTPRequestHead, config: RuntimeConfig, responder: any ProxyResponder,
                        allowedHost: inout AllowedHost?) -> ProxyReply? {
        let limits = config.settings.limits
        let fields = Fields(head)
        if fields.headerBytes > limits.maxHeaderBytes {
            return .error(431, "request header block larger than \(limits.maxHeaderBytes) bytes")
        }
        switch head.method {
        case .CONNECT: return .error(405, "CONNECT is not supported: Concierge is not a forward proxy")
        case .TRACE: return .error(405, "TRACE is not supported")
        default: break
        }
        if case .unsupported(let codings) = TransferCoding.of(fields.transferEncoding) {
            return .error(501, "transfer coding '\(HTTPFieldSyntax.printable(codings))' is not supported (only a final chunked)")
        }
        let originForm = head.uri.utf8.first == UInt8(ascii: "/")
        if originForm, fields.hostCount == 1, let host = fields.firstHost, let allowedHost, allowedHost.config === config,
           allowedHost.value == host {
            // This very `Host` was allowed under this configuration.
        } else {
            let hostFields = fields.hostCount == 1 ? [fields.firstHost ?? ""] : head.headers["host"]
            if let refusal = targetRefusal(&head, hostFields: hostFields, config: config, responder: responder) { return refusal }
            if originForm, fields.hostCount == 1, let host = fields.firstHost { allowedHost = AllowedHost(value: host, config: config) }
        }
        if let expectation = fields.expect, expectation.lowercased() != "100-continue" {
            return .error(417, "unsupported expectation")
        }
        if fields.underscored, !limits.underscoresInHeaders {
            let underscored = Set(head.headers.map(\.name).filter { $0.utf8.contains(UInt8(ascii: "_")) })
            for name in underscored { head.headers.remove(name: name) }
        }
        return nil
    }

    /// NIO's parser reports `Transfer-Encoding` after a `Content-Length` as it reports an
    /// unknown transfer coding (`unknown`, answered 501); a head with both is a malformed
    /// request (RFC 9112 §6.1), 400, as when the `Content-Length` comes second
    /// (`unexpectedContentLength`). Told apart by the read the parser refused: a head that
    /// names a `Content-Length` in it is the former.
    static func refined(_ error: HTTPParserError, read: ByteBuffer?) -> HTTPParserError {
        guard error == .unknown, let read else { return error }
        let name = Array("content-length:".utf8)
        let found = read.withUnsafeReadableBytes { bytes -> Bool in
            var start = 0
            while let newline = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) {
                start = newline + 1
                guard bytes.count - start >= name.count else { return false }
                if name.indices.allSatisfy({ bytes[start + $0] | 0x20 == name[$0] | 0x20 }) { return true }
            }
            return false
        }
        return found ? .unexpectedContentLength : error
    }

    /// A `Host` value a connection's earlier request passed with, and the configuration.
    struct AllowedHost {
        let value: String
        let config: RuntimeConfig
    }

    /// What the checks read from the header block, gathered in one pass (this runs on every
    /// request, hits included): the first `Host` and their count, not a list (an allocation
    /// per request); the rare second one is read again from the head.
    private struct Fields {
        var headerBytes: Int
        var firstHost: String?
        var hostCount = 0
        var transferEncoding: [String] = []
        var expect: String?
        var underscored = false

        init(_ head: HTTPRequestHead) {
            headerBytes = head.uri.utf8.count
            for (name, value) in head.headers {
                headerBytes += name.utf8.count + value.utf8.count + 4
                switch name.utf8.count {
                case 4 where ASCIICase.equals(name, lowercase: "host"):
                    if hostCount == 0 { firstHost = value }
                    hostCount += 1
                case 6 where ASCIICase.equals(name, lowercase: "expect"): expect = expect ?? value
                case 17 where ASCIICase.equals(name, lowercase: "transfer-encoding"): transferEncoding.append(value)
                default: break
                }
                if !underscored, StringBytes.contains(UInt8(ascii: "_"), in: name) { underscored = true }
            }
        }
    }

    /// The target's form and, unless an absolute-form target named the host, the `Host` field.
    private static func targetRefusal(_ head: inout HTTPRequestHead, hostFields: [String], config: RuntimeConfig,
                                      responder: any ProxyResponder) -> ProxyReply? {
        if head.uri == "*" {
            guard head.method == .OPTIONS else { return .error(400, "the asterisk target is for OPTIONS only") }
        } else if !head.uri.hasPrefix("/") {
            guard let (origin, _) = responder.originForm(head.uri) else {
                return .error(400, "absolute-form target names a host that is not an upstream")
            }
            // Its authority stands for `Host`.
            head.uri = origin
            return nil
        }
        let verdict = config.hostPolicy.verdict(hostFields: hostFields, requiresHost: head.version.major > 1 || head.version.minor >= 1)
        switch verdict {
        case .allowed: return nil
        case .malformed(let why): return .error(400, why)
        case .forbidden(let name): return .error(403, "host not allowed: \(HTTPFieldSyntax.printable(name))")
        }
    }
}
