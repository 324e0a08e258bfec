import ConciergeCore
import NIOCore
import NIOHTTP1

/// A stage in front of the request decoder that hands each read on as what it is:
///
/// - a read whose bytes are exactly a request head answered from the hot tier before goes to
///   the handler behind the decoder as ``RecognisedRead/repeated(_:)``, answered again without
///   the bytes being parsed, or declined (then they go to the decoder);
/// - a read that is exactly one request head in the plain form (``PlainRequestHead``: `GET` or
///   `HEAD` without a body, keep-alive HTTP/1.1, plain fields) is read here and handed on as
///   ``RecognisedRead/plainHead(_:)``, which that handler receives as the decoder's head and end;
/// - any other read goes to the decoder as bytes.
///
/// Recognised reads go straight to the ``RecognisedReadReceiver`` (``ProxyHTTPHandler``), not
/// through the pipeline: a message through the pipeline is boxed in `NIOAny` and cast back
/// dynamically by each handler, which measured +2.5 % instructions for both the HIT and the
/// MISS (callgrind, docs/benchmarks.md). The decoder, between requests with nothing buffered,
/// is not missed. What the decoder delivers meanwhile is counted in the connection's
/// ``DecodedReadWatch``, which also remembers a read's bytes with the hit answered for it.
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
///   (``DecodedReadWatch/end(_:)``), so the decoder is between requests again,
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

    private let receiver: any RecognisedReadReceiver
    private let watch: DecodedReadWatch
    /// The receiver's context, found at the first read (it is added after this one).
    private var receiverContext: ChannelHandlerContext?
    /// Every read the decoder got so far held whole requests without bodies.
    private(set) var decoderAtBoundary = true
    /// Reads answered without the decoder on this connection.
    private(set) var repeatsAnswered = 0
    /// Plain heads read without the decoder on this connection.
    private(set) var plainHeadsRead = 0

    init(receiver: any RecognisedReadReceiver, watch: DecodedReadWatch) {
        (self.receiver, self.watch) = (receiver, watch)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard decoderAtBoundary else {
            toDecoder(data, context: context)
            return
        }
        if receiverContext == nil { receiverContext = try? context.pipeline.syncOperations.context(handler: receiver) }
        guard let receiverContext else {
            // No receiver behind the decoder: every read goes to the decoder.
            decoderAtBoundary = false
            toDecoder(data, context: context)
            return
        }
        let bytes = unwrapInboundIn(data)
        if receiver.receive(.repeated(bytes), context: receiverContext) {
            repeatsAnswered += 1
            return
        }
        watch.begin()
        if let head = bytes.withUnsafeReadableBytes({ PlainRequestHead.parse($0) }) {
            // A whole plain head and nothing else: read here, received as the decoder would
            // hand it (head, then end), and the decoder stays between requests.
            _ = receiver.receive(.plainHead(head), context: receiverContext)
            plainHeadsRead += 1
            decoderAtBoundary = watch.end(bytes)
            return
        }
        let alone = RequestHeadBoundary.endsAtItsOnlyBlankLine(bytes)
        toDecoder(data, context: context)
        decoderAtBoundary = watch.end(alone ? bytes : nil) && alone
    }

    /// Hands a read on to the decoder, shown to the watch meanwhile: a parser error is judged
    /// by the read it was found in (``RequestHeadCheck/refined(_:read:)``).
    private func toDecoder(_ data: NIOAny, context: ChannelHandlerContext) {
        watch.input = unwrapInboundIn(data)
        context.fireChannelRead(data)
        watch.input = nil
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        receiverContext = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        receiverContext = nil
        decoderAtBoundary = false
        context.fireChannelInactive()
    }
}

/// A read ``RepeatedHitHandler`` recognised, handed to the handler behind the decoder.
enum RecognisedRead {
    /// Bytes that repeat a request head answered from the hot tier: answered again, or declined
    /// (then they go to the decoder).
    case repeated(ByteBuffer)
    /// One plain request head and nothing else, read without the decoder: received as the
    /// decoder's head and end would be (always taken).
    case plainHead(HTTPRequestHead)
}

/// The handler behind the request decoder that receives what ``RepeatedHitHandler`` recognised.
protocol RecognisedReadReceiver: ChannelHandler {
    /// Takes `read` on the receiver's `context`; `false`: a repeated read not answered.
    func receive(_ read: RecognisedRead, context: ChannelHandlerContext) -> Bool
}
