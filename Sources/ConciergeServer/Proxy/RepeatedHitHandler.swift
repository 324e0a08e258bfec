import ConciergeCore
import NIOCore
import NIOHTTP1

/// A stage in front of the request decoder: it hands each read on as what it is. A read whose
/// bytes are exactly a request head that was answered from the hot tier before goes to the
/// proxy handler as a repeated hit, answered again without being parsed
/// (``ProxyHTTPHandler/answerRepeatedHit(_:context:)``); a read that is exactly one request
/// head in the plain form (``PlainRequestHead``: `GET` or `HEAD` without a body, keep-alive
/// HTTP/1.1, plain fields) is read here and handed on as the typed parts the decoder would
/// deliver (a head, then its end, fired past the decoder); any other read goes to the decoder
/// as bytes. What the decoder delivers while it reads is counted behind it
/// (``DecodedReadWatch``), which remembers a read's bytes with the hit answered for it.
///
/// The repeated hit is a direct call rather than a message through the pipeline: it is the
/// path that costs the least, and a message would cost it a box and dynamic casts.
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

    private let proxy: ProxyHTTPHandler
    private let watch: DecodedReadWatch
    /// The proxy handler's context, found at the first read (it is added after this one).
    private var proxyContext: ChannelHandlerContext?
    /// The watch's context: parts fired from the decoder's context reach it, as decoded ones do.
    private var decoderContext: ChannelHandlerContext?
    /// Every read the decoder got so far held whole requests without bodies.
    private(set) var decoderAtBoundary = true
    /// Reads answered without the decoder on this connection.
    private(set) var repeatsAnswered = 0
    /// Plain heads read without the decoder on this connection.
    private(set) var plainHeadsRead = 0

    init(proxy: ProxyHTTPHandler, watch: DecodedReadWatch) {
        (self.proxy, self.watch) = (proxy, watch)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard decoderAtBoundary else {
            toDecoder(data, context: context)
            return
        }
        let bytes = unwrapInboundIn(data)
        if proxyContext == nil {
            proxyContext = try? context.pipeline.syncOperations.context(handler: proxy)
            decoderContext = try? context.pipeline.syncOperations.context(handlerType: ByteToMessageHandler<HTTPRequestDecoder>.self)
        }
        if let proxyContext, proxy.answerRepeatedHit(bytes, context: proxyContext) {
            repeatsAnswered += 1
            return
        }
        watch.begin()
        if let decoderContext, let head = bytes.withUnsafeReadableBytes({ PlainRequestHead.parse($0) }) {
            // A whole plain head and nothing else: read here, handed on as the decoder would
            // hand it (head, then end), and the decoder stays between requests.
            decoderContext.fireChannelRead(NIOAny(HTTPServerRequestPart.head(head)))
            decoderContext.fireChannelRead(NIOAny(HTTPServerRequestPart.end(nil)))
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
        (proxyContext, decoderContext) = (nil, nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        (proxyContext, decoderContext) = (nil, nil)
        decoderAtBoundary = false
        context.fireChannelInactive()
    }
}

/// Behind the request decoder, in front of the proxy handler: hands every part and error on
/// unchanged (a parser error refined by the read it was found in,
/// ``RequestHeadCheck/refined(_:read:)``), and counts what arrives during a read that
/// ``RepeatedHitHandler`` watches (``begin()`` to ``end(_:)``), with the hits the proxy
/// handler answered meanwhile (``hitAnswered(_:recipe:)``): plain counts, checked on every request.
final class DecodedReadWatch: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart

    /// What arrived during one watched read.
    struct Counts {
        var watching = false
        var heads = 0
        var ends = 0
        /// Body parts, errors, and heads after which the decoder reads no next request.
        var others = 0
        var hits = 0

        mutating func count(_ part: HTTPServerRequestPart) {
            switch part {
            case .head(let head):
                heads += 1
                if !RequestHeadBoundary.decodingGoesOn(after: head) { others += 1 }
            case .body: others += 1
            case .end: ends += 1
            }
        }
    }

    private let responder: any ProxyResponder
    /// The read the decoder is given, while it reads it: what a parser error is judged by.
    var input: ByteBuffer?
    private var counts = Counts()
    /// The hit answered during the watched read, when the hit memo keeps its recipe.
    private var answeredHit: (incoming: IncomingRequest, recipe: HitMemo.Recipe)?

    init(responder: any ProxyResponder) {
        self.responder = responder
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if counts.watching { counts.count(unwrapInboundIn(data)) }
        context.fireChannelRead(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if counts.watching { counts.others += 1 }
        if let parserError = error as? HTTPParserError {
            context.fireErrorCaught(RequestHeadCheck.refined(parserError, read: input))
        } else {
            context.fireErrorCaught(error)
        }
    }

    /// Before a read goes to the request decoder (or its plain head past it): what arrives is
    /// counted until ``end(_:)``.
    func begin() {
        counts = Counts(watching: true)
    }

    /// The proxy handler wrote a hit as ready bytes (`recipe`: the thread's hit memo keeps one
    /// for the request).
    func hitAnswered(_ incoming: IncomingRequest, recipe: HitMemo.Recipe?) {
        guard counts.watching else { return }
        counts.hits += 1
        // Never a traced request's bytes: its `traceparent` is read each time.
        answeredHit = incoming.trace == nil ? recipe.map { (incoming, $0) } : nil
    }

    /// After a read went to the decoder: whether it delivered exactly one request without a
    /// body and nothing else. If that request was answered as a remembered hit, the read's
    /// `bytes` (`nil`: not to be remembered) are remembered with it
    /// (``ProxyResponder/rememberReplay(_:incoming:recipe:)``).
    func end(_ bytes: ByteBuffer?) -> Bool {
        let seen = counts
        counts = Counts()
        var hit: (incoming: IncomingRequest, recipe: HitMemo.Recipe)?
        if seen.hits > 0 {
            hit = answeredHit
            answeredHit = nil
        }
        guard seen.watching, seen.heads == 1, seen.ends == 1, seen.others == 0 else { return false }
        if let bytes, seen.hits == 1, let (incoming, recipe) = hit {
            responder.rememberReplay(bytes, incoming: incoming, recipe: recipe)
        }
        return true
    }
}
