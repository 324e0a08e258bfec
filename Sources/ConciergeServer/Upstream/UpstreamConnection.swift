import ConciergeCore
import NIOCore
import NIOHTTP1
import NIOSSL

/// One keep-alive HTTP/1.1 client channel to an upstream: the last handler of its pipeline
/// (after `NIOSSLClientHandler` for https, the ``PlainReplyReader`` and NIO's response decoder).
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
    /// Reads the replies while they are plain; told of each request while it does.
    private var reader: PlainReplyReader?
    /// NIO's response decoder in this pipeline (a class, run on this channel's loop), told
    /// each request's method directly once it reads the replies: a reply to HEAD announces a
    /// length it does not send.
    private let decoder: HTTPResponseDecoder?
    /// The ``UpstreamWireWriter``'s context: request bytes are written from there.
    private var wireContext: ChannelHandlerContext?
    private var exchange: Exchange?
    /// The reply so far, kept outside `exchange` so the body grows in place.
    private var replyHead: HTTPResponseHead?
    /// Whether the reply's head keeps the connection open, when its reader said so.
    private var replyKeepAlive: Bool?
    private var replyBody: ByteBuffer?
    private var isClosed = false
    /// In ``channelRead(context:data:)``: the decoder is decoding.
    private var isReading = false
    /// Exchanges completed on this connection: more than zero makes it a reused one.
    private(set) var completedExchanges = 0
    /// Called once, when the channel goes inactive (after any exchange in flight has failed).
    var onClose: (() -> Void)?

    /// - Parameters:
    ///   - decoder: the response decoder in front of this handler; `nil` writes each request's
    ///     head through the pipeline for it to observe instead.
    ///   - reader: the reader of plain replies in front of the decoder, if any.
    init(decoder: HTTPResponseDecoder? = nil, reader: PlainReplyReader? = nil) {
        (self.decoder, self.reader) = (decoder, reader)
    }

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
        (replyHead, replyKeepAlive, replyBody) = (nil, nil, nil)
        // The head tells NIO's response decoder the method: handed to it directly, as
        // `ByteToMessageHandler` would on a write (through the pipeline, where
        // ``UpstreamWireWriter`` drops it, that costs ~5k instructions). The ready bytes go out
        // from the writer's place in the pipeline, below the decoder, which has nothing to
        // observe in them.
        // Not while the decoder is decoding (a request sent from the end of the last reply):
        // `ByteToMessageHandler` holds such a write back until the bytes it has are decoded,
        // so a reply the upstream sent before this request stays unsolicited, and fails.
        let head = HTTPRequestHead(version: .http1_1, method: request.method, uri: request.target)
        if let reader, reader.readsPlainly {
            reader.expect(head)
        } else if let decoder, !isReading {
            decoder.write(data: .head(head))
        } else {
            context.write(wrapOutboundOut(.head(head)), promise: nil)
        }
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
        (self.context, wireContext, reader) = (nil, nil, nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        isReading = true
        defer { isReading = false }
        receive(unwrapInboundIn(data))
    }

    /// One part of the reply in flight, from NIO's decoder or the ``PlainReplyReader``.
    /// - Parameters:
    ///   - keepAlive: with a head, whether it keeps the connection open (else the head's
    ///     `isKeepAlive` says, which reads the fields again unless NIO's decoder made them).
    ///   - reusable: `false` for an end followed by bytes no request asked for: the
    ///     connection is not used again.
    func receive(_ part: HTTPClientResponsePart, keepAlive: Bool? = nil, reusable: Bool = true) {
        guard let exchange else {
            // A reply nobody asked for: the connection's framing can no longer be trusted.
            close()
            return
        }
        switch part {
        case .head(let head):
            (replyHead, replyKeepAlive) = (head, keepAlive)
            guard Self.announcesBody(head, isHead: exchange.isHead),
                  let length = head.headers.first(name: "content-length").flatMap(Int.init) else { return }
            if length > exchange.maxBody {
                fail(.tooLarge, error: nil)
            } else if length > 0, let context {
                replyBody = context.channel.allocator.buffer(capacity: min(length, 1 << 20))
            }
        case .body(let part):
            guard (replyBody?.readableBytes ?? 0) + part.readableBytes <= exchange.maxBody else {
                fail(.tooLarge, error: nil)
                return
            }
            if replyBody == nil { replyBody = part } else { replyBody!.writeImmutableBuffer(part) }
        case .end:
            finish(reusable: reusable)
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

    private func finish(reusable: Bool) {
        guard let exchange, let head = replyHead else { return }
        let body = replyBody ?? ByteBuffer()
        (self.exchange, replyHead, replyBody) = (nil, nil, nil)
        completedExchanges += 1
        let response = UpstreamResponse(status: Int(head.status.code), headers: head.headers, body: body)
        // A body read to the end of the connection ends while the channel is already inactive.
        let open = !isClosed && context?.channel.isActive == true
        let keepsAlive = replyKeepAlive ?? head.isKeepAlive
        exchange.completion(.response(response, keepAlive: keepsAlive && !exchange.closeAfter && open && reusable))
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
    /// Adds TLS (for https), the request writer, the reader of plain replies, NIO's HTTP/1.1
    /// response decoder and an ``UpstreamConnection`` to a new channel's pipeline. Runs on the
    /// channel's event loop.
    static func configure(_ channel: any Channel, tls: (context: NIOSSLContext, serverName: String?)?) throws {
        let pipeline = channel.pipeline.syncOperations
        if let tls {
            try pipeline.addHandler(NIOSSLClientHandler(context: tls.context, serverHostname: tls.serverName))
        }
        try pipeline.addHandler(UpstreamWireWriter())
        let decoder = HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes)
        let reader = PlainReplyReader(decoder: decoder)
        let connection = UpstreamConnection(decoder: decoder, reader: reader)
        reader.connection = connection
        try pipeline.addHandler(reader)
        try pipeline.addHandler(ByteToMessageHandler(decoder))
        try pipeline.addHandler(connection)
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
