import ConciergeCore
import NIOCore
import NIOHTTP1

/// Reads an upstream connection's replies in front of NIO's response decoder while they are
/// plain (``PlainReplyHead``: a final status, token-named ASCII fields, a body framed by one
/// `Content-Length`), and hands their parts straight to the ``UpstreamConnection``: no
/// general parser, no `NIOAny`, no pipeline hop per part.
///
/// The first reply that is not plain (chunked, read to the end of the connection, interim
/// `1xx`, anything odd), and bytes no request asked for, go to NIO's decoder with everything
/// after them, for good: the reader tells the decoder the awaited request's method first, as
/// the decoder would have learnt it from the request's write, and from then on passes every
/// read through. What the decoder accepts or refuses is as before this reader.
///
/// Bytes after a reply's end that no request asked for make that reply the connection's last
/// (``UpstreamConnection/receive(_:reusable:)``): they are dropped, never read as the next
/// request's reply.
///
/// - Important: Confined to its channel's event loop, like the ``UpstreamConnection``.
final class PlainReplyReader: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    /// NIO's decoder behind this reader: it reads once this reader no longer does.
    private let decoder: HTTPResponseDecoder
    /// Where the parts go; set by ``UpstreamConnection/configure(_:tls:)`` and dropped when the
    /// reader leaves the pipeline (the connection holds the reader too).
    var connection: UpstreamConnection?
    /// Replies are read here (else by the decoder, to the connection's end).
    private(set) var readsPlainly = true
    /// The request whose reply is awaited.
    private var awaited: HTTPRequestHead?
    /// Bytes received and not read yet.
    private var received: ByteBuffer?
    /// Body bytes of the current reply still to come; `nil` between bodies.
    private var bodyLeft: Int?

    init(decoder: HTTPResponseDecoder) {
        self.decoder = decoder
    }

    /// A request went out on the connection: the next reply answers it.
    func expect(_ request: HTTPRequestHead) {
        awaited = request
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        connection = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard readsPlainly else {
            context.fireChannelRead(data)
            return
        }
        var bytes = unwrapInboundIn(data)
        if received == nil { received = bytes } else { received!.writeBuffer(&bytes) }
        read(context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        // A head cut short: the decoder judges the bytes that came, as it did before.
        if readsPlainly, bodyLeft == nil, let received, received.readableBytes > 0 { fallBack(context: context) }
        context.fireChannelInactive()
    }

    private func read(context: ChannelHandlerContext) {
        while let bytes = received, bytes.readableBytes > 0 {
            if let left = bodyLeft {
                let part = received!.readSlice(length: min(left, bytes.readableBytes))!
                bodyLeft = left - part.readableBytes
                connection?.receive(.body(part))
                if bodyLeft == 0 { end() }
                continue
            }
            guard let request = awaited else {
                // Bytes no request asked for: the decoder refuses them, and the connection closes.
                fallBack(context: context)
                return
            }
            switch bytes.withUnsafeReadableBytes({ PlainReplyHead.parse($0, toHEAD: request.method == .HEAD) }) {
            case .needMore:
                return
            case .unusual:
                fallBack(context: context)
                return
            case .complete(let head, let length):
                received!.moveReaderIndex(forwardBy: length)
                let status = HTTPResponseStatus(statusCode: head.status)
                connection?.receive(.head(HTTPResponseHead(version: head.version, status: status, headers: head.headers)),
                                    keepAlive: head.keepAlive)
                if head.bodyLength > 0 { bodyLeft = head.bodyLength } else { end() }
            }
        }
        received = nil
    }

    /// The reply is whole. Bytes after it answer no request: the reply is the connection's last.
    private func end() {
        (awaited, bodyLeft) = (nil, nil)
        let reusable = (received?.readableBytes ?? 0) == 0
        if !reusable { received = nil }
        connection?.receive(.end(nil), reusable: reusable)
    }

    /// From now on NIO's decoder reads: told the awaited request's method, then given the
    /// bytes not read yet.
    private func fallBack(context: ChannelHandlerContext) {
        readsPlainly = false
        if let awaited { decoder.write(data: .head(awaited)) }
        awaited = nil
        if let bytes = received {
            received = nil
            context.fireChannelRead(wrapInboundOut(bytes))
        }
    }
}
