import ConciergeCore
import NIOCore
import NIOHTTP1
import NIOSSL

/// One keep-alive HTTP/1.1 client channel to an upstream: the last handler of its pipeline
/// (after `NIOSSLClientHandler` for https, and NIO's request encoder and response decoder).
/// It runs one exchange at a time and buffers the reply up to a limit.
///
/// - Important: Confined to its channel's event loop, like the ``UpstreamLoopPool`` that
///   drives it: every method is called there.
final class UpstreamConnection: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    /// How one exchange ended.
    enum Outcome {
        /// A whole reply; `keepAlive` is false when either side said `Connection: close`
        /// (or HTTP/1.0 without keep-alive).
        case response(UpstreamResponse, keepAlive: Bool)
        /// No usable reply. `beforeReply` is true when not one reply byte arrived (the
        /// connection was closed or reset under the request), so an idempotent request may
        /// be sent again on another connection.
        case failed(UpstreamFailure, beforeReply: Bool)
    }

    private struct Exchange {
        let maxBody: Int
        /// A reply to HEAD announces a length it does not send.
        let isHead: Bool
        let completion: (Outcome) -> Void
        let closeAfter: Bool
    }

    private var context: ChannelHandlerContext?
    /// The ``UpstreamWireWriter``'s context: request bytes are written from there.
    private var wireContext: ChannelHandlerContext?
    private var exchange: Exchange?
    /// The reply so far, kept outside `exchange` so the body grows in place.
    private var replyHead: HTTPResponseHead?
    private var replyBody: ByteBuffer?
    private var isClosed = false
    /// Exchanges completed on this connection: more than zero makes it a reused one.
    private(set) var completedExchanges = 0
    /// Called once, when the channel goes inactive (after any exchange in flight has failed).
    var onClose: (() -> Void)?

    var isBusy: Bool { exchange != nil }
    var closeFuture: EventLoopFuture<Void>? { context?.channel.closeFuture }

    /// Sends a request; `completion` is called exactly once, on the event loop.
    func execute(_ request: UpstreamWireRequest, maxBody: Int, completion: @escaping (Outcome) -> Void) {
        precondition(exchange == nil, "one exchange at a time on an upstream connection")
        guard let context, !isClosed else {
            completion(.failed(.unreachable("upstream connection closed"), beforeReply: true))
            return
        }
        exchange = Exchange(maxBody: maxBody, isHead: request.method == .HEAD, completion: completion, closeAfter: request.closeAfter)
        (replyHead, replyBody) = (nil, nil)
        // The head tells NIO's response decoder the method (``UpstreamWireWriter`` drops it);
        // the ready bytes go out from the writer's place in the pipeline, below the decoder,
        // which has nothing to observe in them (a write through it costs ~5k instructions).
        context.write(wrapOutboundOut(.head(HTTPRequestHead(version: .http1_1, method: request.method, uri: request.target))), promise: nil)
        // No promise: a write that fails closes the channel (after `errorCaught`), and either
        // fails the exchange as not one reply byte arrived.
        if let wire = wireContext {
            wire.writeAndFlush(NIOAny(request.bytes), promise: nil)
        } else {
            context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(request.bytes))), promise: nil)
        }
    }

    /// Closes the channel; an exchange in flight is dropped without a callback (its owner
    /// already answered it: deadline, cancellation).
    func abandon() {
        (exchange, replyHead, replyBody) = (nil, nil, nil)
        close()
    }

    func close() {
        guard let context, !isClosed else { return }
        context.close(promise: nil)
    }

    // MARK: ChannelInboundHandler

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        wireContext = try? context.pipeline.syncOperations.context(handlerType: UpstreamWireWriter.self)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        (self.context, wireContext) = (nil, nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard let exchange else {
            // A reply nobody asked for: the connection's framing can no longer be trusted.
            close()
            return
        }
        switch unwrapInboundIn(data) {
        case .head(let head):
            replyHead = head
            guard Self.announcesBody(head, isHead: exchange.isHead),
                  let length = head.headers.first(name: "content-length").flatMap(Int.init) else { return }
            if length > exchange.maxBody {
                fail(.tooLarge, error: nil)
            } else if length > 0 {
                replyBody = context.channel.allocator.buffer(capacity: min(length, 1 << 20))
            }
        case .body(let part):
            guard (replyBody?.readableBytes ?? 0) + part.readableBytes <= exchange.maxBody else {
                fail(.tooLarge, error: nil)
                return
            }
            if replyBody == nil { replyBody = part } else { replyBody!.writeImmutableBuffer(part) }
        case .end:
            finish()
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(.unreachable("\(error)"), error: error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        isClosed = true
        let midReply = exchange != nil && replyHead != nil
        fail(.unreachable(midReply ? "upstream closed the connection mid-reply" : "upstream closed the connection"), error: nil)
        onClose?()
        onClose = nil
        context.fireChannelInactive()
    }

    // MARK: Ending an exchange

    private func finish() {
        guard let exchange, let head = replyHead else { return }
        let body = replyBody ?? ByteBuffer()
        (self.exchange, replyHead, replyBody) = (nil, nil, nil)
        completedExchanges += 1
        let response = UpstreamResponse(status: Int(head.status.code), headers: head.headers, body: body)
        // A body read to the end of the connection ends while the channel is already inactive.
        let open = !isClosed && context?.channel.isActive == true
        exchange.completion(.response(response, keepAlive: head.isKeepAlive && !exchange.closeAfter && open))
    }

    private static func announcesBody(_ head: HTTPResponseHead, isHead: Bool) -> Bool {
        !isHead && head.status != .noContent && head.status != .notModified
    }

    /// Fails the exchange in flight, if any, and closes the connection.
    /// - Parameter error: the underlying error; a decoding error means reply bytes arrived.
    private func fail(_ failure: UpstreamFailure, error: (any Error)?) {
        if let exchange {
            let beforeReply = replyHead == nil && !(error is HTTPParserError)
            (self.exchange, replyHead, replyBody) = (nil, nil, nil)
            exchange.completion(.failed(failure, beforeReply: beforeReply))
        }
        close()
    }
}

extension UpstreamConnection {
    /// Adds TLS (for https), the request writer, NIO's HTTP/1.1 response decoder and an
    /// ``UpstreamConnection`` to a new channel's pipeline. Runs on the channel's event loop.
    static func configure(_ channel: any Channel, tls: (context: NIOSSLContext, serverName: String?)?) throws {
        let pipeline = channel.pipeline.syncOperations
        if let tls {
            try pipeline.addHandler(NIOSSLClientHandler(context: tls.context, serverHostname: tls.serverName))
        }
        try pipeline.addHandler(UpstreamWireWriter())
        try pipeline.addHandler(ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes)))
        try pipeline.addHandler(UpstreamConnection())
    }
}

/// In place of NIO's request encoder, below its response decoder: writes the ready bytes of
/// an ``UpstreamWireRequest`` (sent as one body part). The head that comes first only told
/// the decoder the method (a reply to HEAD announces a length it does not send); it is
/// not written.
final class UpstreamWireWriter: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = HTTPClientRequestPart
    typealias OutboundOut = ByteBuffer

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .body(.byteBuffer(let bytes)):
            context.write(wrapOutboundOut(bytes), promise: promise)
        case .head, .end:
            promise?.succeed()
        case .body(.fileRegion):
            promise?.fail(ChannelError.operationUnsupported)
        }
    }
}
