import ConciergeCore
import NIOCore
import NIOHTTP1

/// In front of the request decoder: a read whose bytes are exactly a request head that was
/// answered from the hot tier before is answered again without being parsed
/// (``ProxyHTTPHandler/answerRepeatedHit(_:context:)``); a read that is exactly one request
/// head in the plain form (``PlainRequestHead``: `GET` or `HEAD` without a body, keep-alive
/// HTTP/1.1, plain fields) is read here and handed to the proxy handler as the decoder would
/// hand it; any other read goes to the decoder.
///
/// Sound because the same bytes, read by the same parser from the same state, are the same
/// request, and everything else the answer depends on is checked at the time (the
/// configuration object, the environment, the session, a fresh hot-tier entry:
/// ``ProxyPipeline/replayedHit(of:)``). So the bytes are remembered only when
///
/// - the decoder was between requests before the read (``decoderAtBoundary``),
/// - the read ends at its first blank line (``RequestHeadBoundary``): a head ends at
///   the first blank line, so nothing of a next request was in it,
/// - the decoder delivered exactly one head and its end from it, no body part and no error
///   (``ProxyHTTPHandler/endWatch(_:)``), so the decoder is between requests again,
/// - and that request was answered as a remembered hit (keep-alive HTTP/1.1 `GET`, no body).
///
/// A recognised read is answered only while the connection is idle with nothing waiting
/// (``ProxyConnectionStateMachine/canReplayHit``), so replies stay in request order. Once a
/// read leaves the decoder inside a request (a head split over reads, pipelined requests, a
/// body), nothing more on the connection is recognised: the decoder's state is no longer
/// known here, and its bytes must meet whatever the decoder holds.
final class RepeatedHitHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let proxy: ProxyHTTPHandler
    /// The proxy handler's context, found at the first read (it is added after this one).
    private var proxyContext: ChannelHandlerContext?
    /// Every read the decoder got so far held whole requests without bodies.
    private(set) var decoderAtBoundary = true
    /// Reads answered without the decoder on this connection.
    private(set) var repeatsAnswered = 0
    /// Plain heads read without the decoder on this connection.
    private(set) var plainHeadsRead = 0

    init(proxy: ProxyHTTPHandler) {
        self.proxy = proxy
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard decoderAtBoundary else {
            toDecoder(data, context: context)
            return
        }
        let bytes = unwrapInboundIn(data)
        if proxyContext == nil { proxyContext = try? context.pipeline.syncOperations.context(handler: proxy) }
        if let proxyContext, proxy.answerRepeatedHit(bytes, context: proxyContext) {
            repeatsAnswered += 1
            return
        }
        proxy.beginWatch()
        if let proxyContext, let head = bytes.withUnsafeReadableBytes({ PlainRequestHead.parse($0) }) {
            // A whole plain head and nothing else: read here, handed on as the decoder would
            // hand it (head, then end), and the decoder stays between requests.
            proxy.receiveDecoded(.head(head), context: proxyContext)
            proxy.receiveDecoded(.end(nil), context: proxyContext)
            plainHeadsRead += 1
            decoderAtBoundary = proxy.endWatch(bytes)
            return
        }
        let alone = RequestHeadBoundary.endsAtItsOnlyBlankLine(bytes)
        toDecoder(data, context: context)
        decoderAtBoundary = proxy.endWatch(alone ? bytes : nil) && alone
    }

    /// Hands a read on to the decoder, shown to the proxy handler meanwhile: the decoder
    /// reports a refused head while it reads (``RequestHeadCheck/refined(_:read:)``).
    private func toDecoder(_ data: NIOAny, context: ChannelHandlerContext) {
        proxy.decoderInput = unwrapInboundIn(data)
        context.fireChannelRead(data)
        proxy.decoderInput = nil
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        proxyContext = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        proxyContext = nil
        decoderAtBoundary = false
        context.fireChannelInactive()
    }
}
