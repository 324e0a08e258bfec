import ConciergeCore
import NIOCore
import NIOEmbedded
import NIOHTTP1

extension FuzzTargets {
    /// What the listener's plain request path rests on, against NIO's request decoder: bytes
    /// ``PlainRequestHead/parse(_:)`` reads as a head are read by the decoder as that head and
    /// its end (``plainRequestMismatch(reading:as:)``). Bytes the plain parser leaves are the
    /// decoder's alone, and are not checked.
    public static func plainRequest(_ data: [UInt8]) {
        guard let plain = data.withUnsafeBytes({ PlainRequestHead.parse($0) }) else { return }
        if let mismatch = plainRequestMismatch(reading: data, as: plain) { preconditionFailure(mismatch) }
    }

    /// How NIO's decoder reads `data` otherwise than as `plain` (method, target, version, every
    /// field name and value in order, keep-alive) and its end, with nothing else and no error,
    /// after which it reads a next request as a new one; `nil` when it reads it so. Shared with
    /// the tests that compare both readers.
    public static func plainRequestMismatch(reading data: [UInt8], as plain: HTTPRequestHead) -> String? {
        let channel = EmbeddedChannel()
        let parts = DecodedRequest()
        do {
            try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))
            try channel.pipeline.syncOperations.addHandler(parts)
        } catch {
            return "no decoder: \(error)"
        }
        defer { _ = try? channel.finish() }
        do { try channel.writeInbound(ByteBuffer(bytes: data)) } catch { parts.failed = true }
        let shown = String(decoding: data, as: UTF8.self).debugDescription
        guard !parts.failed, parts.parts.count == 2, case .head(let head) = parts.parts[0], case .end(nil) = parts.parts[1] else {
            return "the decoder read a plain head otherwise: \(parts.parts), failed \(parts.failed): \(shown)"
        }
        guard head.method == plain.method, head.uri == plain.uri, head.version == plain.version,
              head.headers.map({ [$0.name, $0.value] }) == plain.headers.map({ [$0.name, $0.value] }),
              head.isKeepAlive, plain.isKeepAlive, RequestHeadBoundary.decodingGoesOn(after: head)
        else {
            return "the decoder read a plain head otherwise: \(head); plain \(plain): \(shown)"
        }
        do { try channel.writeInbound(ByteBuffer(string: "GET /next HTTP/1.1\r\nHost: n\r\n\r\n")) } catch { parts.failed = true }
        guard !parts.failed, parts.parts.count == 4, case .head(let next) = parts.parts[2], next.uri == "/next" else {
            return "the decoder was not between requests after a plain head: \(shown)"
        }
        return nil
    }

    /// Requests as NIO's decoder delivered them.
    final class DecodedRequest: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        var parts: [HTTPServerRequestPart] = []
        var failed = false

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            parts.append(unwrapInboundIn(data))
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            failed = true
        }
    }
}
