import ConciergeCore
import NIOCore
import NIOEmbedded
import NIOHTTP1

extension FuzzTargets {
    /// What the listener's plain request path rests on, against NIO's request decoder: bytes
    /// ``PlainRequestHead/parse(_:)`` reads as a head are read by the decoder as that head
    /// (method, target, version, every field name and value in order, keep-alive) and its end,
    /// nothing else and no error, after which the decoder reads a next request as a new one.
    /// Bytes the plain parser leaves are the decoder's alone, and are not checked.
    public static func plainRequest(_ data: [UInt8]) {
        guard let plain = data.withUnsafeBytes({ PlainRequestHead.parse($0) }) else { return }
        let channel = EmbeddedChannel()
        let parts = DecodedRequest()
        guard (try? channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))) != nil,
              (try? channel.pipeline.syncOperations.addHandler(parts)) != nil else { return }
        defer { _ = try? channel.finish() }
        do { try channel.writeInbound(ByteBuffer(bytes: data)) } catch { parts.failed = true }
        let shown = String(decoding: data, as: UTF8.self).debugDescription
        guard !parts.failed, parts.parts.count == 2, case .head(let head) = parts.parts[0], case .end(nil) = parts.parts[1] else {
            preconditionFailure("the decoder read a plain head otherwise: \(parts.parts), failed \(parts.failed): \(shown)")
        }
        guard head.method == plain.method, head.uri == plain.uri, head.version == plain.version,
              head.headers.map({ [$0.name, $0.value] }) == plain.headers.map({ [$0.name, $0.value] }),
              head.isKeepAlive, plain.isKeepAlive, RequestHeadBoundary.decodingGoesOn(after: head)
        else {
            preconditionFailure("the decoder read a plain head otherwise: \(head); plain \(plain): \(shown)")
        }
        do { try channel.writeInbound(ByteBuffer(string: "GET /next HTTP/1.1\r\nHost: n\r\n\r\n")) } catch { parts.failed = true }
        guard !parts.failed, parts.parts.count == 4, case .head(let next) = parts.parts[2], next.uri == "/next" else {
            preconditionFailure("the decoder was not between requests after a plain head: \(shown)")
        }
    }

    /// Requests as NIO's decoder delivered them (also the tests' harness).
    public final class DecodedRequest: ChannelInboundHandler {
        public typealias InboundIn = HTTPServerRequestPart
        public var parts: [HTTPServerRequestPart] = []
        public var failed = false

        public init() {}

        public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            parts.append(unwrapInboundIn(data))
        }

        public func errorCaught(context: ChannelHandlerContext, error: any Error) {
            failed = true
        }
    }
}
