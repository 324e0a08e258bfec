import ConciergeCore
import NIOCore
import NIOEmbedded
import NIOHTTP1

extension FuzzTargets {
    /// ``WireHead`` against NIO's own HTTP/1.1 parser: any valid head it writes (a request or
    /// a reply, any fields, a body framed by its length) parses back to the same start line,
    /// the same fields in the same order and the same body.
    ///
    /// Input: the first byte picks request or reply and the status or method, the second the
    /// body's length; the rest is lines of `name:value`. Lines that are not valid fields (or
    /// name framing, which the head sets itself) are skipped, as a caller never passes them.
    public static func wireHead(_ data: [UInt8]) {
        guard data.count >= 2 else { return }
        let isRequest = data[0] & 1 == 0
        let bodyLength = Int(data[1] % 64)
        var fields: [(String, String)] = []
        for line in data.dropFirst(2).split(separator: UInt8(ascii: "\n")) {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { continue }
            let name = String(decoding: line[line.startIndex..<colon], as: UTF8.self)
            let value = String(decoding: line[(colon + 1)...], as: UTF8.self)
            guard HTTPFieldSyntax.problem(name: name, value: value) == nil, isPlainField(name, value) else { continue }
            fields.append((name, value))
        }
        let start: WireHead.StartLine
        let methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "M-SEARCH"]
        if isRequest {
            start = .request(method: methods[Int(data[0] >> 1) % methods.count], target: "/f?x=\(data[0])")
        } else {
            // Replies whose framing is their Content-Length (no 1xx, 204 or 304).
            let codes = [200, 201, 202, 301, 302, 400, 401, 403, 404, 409, 429, 500, 502, 503, 504]
            start = .status(.http1_1, codes[Int(data[0] >> 1) % codes.count])
        }
        let head = WireHead(start, fields: HTTPHeaders(fields), omitting: WireHead.lengthField, contentLength: bodyLength)
        var bytes = head.bytes(followedBy: bodyLength)
        bytes.writeRepeatingByte(UInt8(ascii: "b"), count: bodyLength)
        let parsed = parse(bytes, isRequest: isRequest)
        guard let parsed else { preconditionFailure("NIO's parser refused a head WireHead wrote") }
        let expected = fields + [("Content-Length", "\(bodyLength)")]
        guard parsed.fields.count == expected.count, zip(parsed.fields, expected).allSatisfy({ $0.0 == $1.0 && $0.1 == $1.1 }) else {
            preconditionFailure("fields changed on the way through NIO's parser")
        }
        guard parsed.body == bodyLength else { preconditionFailure("body length changed") }
        switch start {
        case .request(let method, let target):
            guard parsed.startLine == "\(method) \(target)" else { preconditionFailure("request line changed") }
        case .status(_, let code):
            guard parsed.startLine == "\(code)" else { preconditionFailure("status changed") }
        }
    }

    /// Fields whose meaning to a parser goes beyond the field (framing, upgrades), and values
    /// with whitespace at either end (a parser trims it), are not round-trip material.
    static func isPlainField(_ name: String, _ value: String) -> Bool {
        let lower = name.lowercased()
        guard !["content-length", "transfer-encoding", "connection", "upgrade", "trailer", "expect"].contains(lower) else { return false }
        guard let first = value.utf8.first, let last = value.utf8.last else { return true }
        return first != 0x20 && first != 0x09 && last != 0x20 && last != 0x09
    }

    /// The start line (`METHOD TARGET` or the status code), fields and body length NIO parsed.
    static func parse(_ bytes: ByteBuffer, isRequest: Bool) -> (startLine: String, fields: [(String, String)], body: Int)? {
        let channel = EmbeddedChannel()
        defer { _ = try? channel.finish() }
        do {
            if isRequest {
                try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPRequestDecoder()))
                try channel.writeInbound(bytes)
                var result: (String, [(String, String)], Int)?
                var body = 0
                while let part = try channel.readInbound(as: HTTPServerRequestPart.self) {
                    switch part {
                    case .head(let head): result = ("\(head.method.rawValue == "MSEARCH" ? "M-SEARCH" : head.method.rawValue) \(head.uri)", head.headers.map { ($0.name, $0.value) }, 0)
                    case .body(let buffer): body += buffer.readableBytes
                    case .end: result?.2 = body
                    }
                }
                return result
            }
            // The response decoder reads a reply to a request it saw go out.
            try channel.pipeline.syncOperations.addHTTPClientHandlers()
            try channel.writeOutbound(HTTPClientRequestPart.head(HTTPRequestHead(version: .http1_1, method: .GET, uri: "/")))
            try channel.writeOutbound(HTTPClientRequestPart.end(nil))
            while try channel.readOutbound(as: IOData.self) != nil {}
            try channel.writeInbound(bytes)
            var result: (String, [(String, String)], Int)?
            var body = 0
            while let part = try channel.readInbound(as: HTTPClientResponsePart.self) {
                switch part {
                case .head(let head): result = ("\(head.status.code)", head.headers.map { ($0.name, $0.value) }, 0)
                case .body(let buffer): body += buffer.readableBytes
                case .end: result?.2 = body
                }
            }
            return result
        } catch {
            return nil
        }
    }
}
