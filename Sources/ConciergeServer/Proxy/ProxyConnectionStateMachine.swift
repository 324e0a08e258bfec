import ConciergeCore
import NIOCore
import NIOHTTP1

/// One proxy connection's states, and what to do on each of its events, as a value: no
/// channel, no context, no clock of its own.
///
/// ``ProxyHTTPHandler`` calls one mutating method per event (a checked request head, a body
/// part, the end of the request, a timer tick, a finished reply, a parser error, the
/// connection closing) and executes the ``Action`` it returns. Times are the event loop's,
/// passed in, so a test drives the machine (and the handler, on an `EmbeddedEventLoop`)
/// through any timeout without waiting.
///
/// Pipelining is the machine's too, with the semantics of NIO's `HTTPServerPipelineHandler`:
/// what arrives while a reply is being produced (request parts, a parser error, the client's
/// half-close) is an ``Inbound`` event that waits in the machine's queue, in order, and is
/// handed back by ``nextQueued()`` once the reply is out. So a valid request followed by
/// garbage gets its reply first and then the error reply, and a client that half-closes after
/// pipelining gets every reply it is owed before the connection closes.
///
/// - Important: the handler passes every event through ``admit(_:)`` first. The machine
///   still accepts a head while responding (it starts the next request), and
///   ``replyFinished(request:keepAlive:now:)`` names the request it is about, so a late report
///   for an earlier request never ends a later one.
struct ProxyConnectionStateMachine {
    /// What arrives from the client, in the order it arrived.
    enum Inbound {
        case part(HTTPServerRequestPart)
        /// The request decoder failed: nothing after it can be framed.
        case parserError(HTTPParserError)
        /// The client closed its side of the connection.
        case inputClosed
    }

    /// The limits a connection applies; re-read from the configuration for each request.
    struct Limits: Equatable {
        var headerTimeout: TimeAmount
        var bodyTimeout: TimeAmount
        var maxBodyBytes: Int

        init(headerTimeout: TimeAmount, bodyTimeout: TimeAmount, maxBodyBytes: Int) {
            self.headerTimeout = headerTimeout
            self.bodyTimeout = bodyTimeout
            self.maxBodyBytes = maxBodyBytes
        }

        init(_ limits: ConciergeConfig.Limits) {
            self.init(headerTimeout: .nanoseconds(limits.headerTimeout.nanoseconds),
                      bodyTimeout: .nanoseconds(limits.bodyTimeout.nanoseconds), maxBodyBytes: limits.maxBodyBytes)
        }

        /// How often the handler's timer ticks: a quarter of the shortest timeout, at least 100 ms.
        var tickInterval: TimeAmount {
            max(.milliseconds(100), .nanoseconds(min(headerTimeout, bodyTimeout).nanoseconds / 4))
        }
    }

    /// A request whose head was accepted, numbered in the order the connection received them.
    struct Request {
        var id: Int
        var head: HTTPRequestHead
        /// When the head arrived, for the request log's total time.
        var started: ContinuousClock.Instant
        /// The head's `isKeepAlive`, read once: NIO looks the `Connection` field up each time
        /// it is asked, and a request asks three times.
        let keepAlive: Bool

        init(id: Int, head: HTTPRequestHead, started: ContinuousClock.Instant) {
            (self.id, self.head, self.started) = (id, head, started)
            keepAlive = head.isKeepAlive
        }
    }

    /// How a dispatched request's body reaches its work.
    enum DispatchedBody {
        /// Read whole, within `maxBodyBytes`.
        case buffered(ByteBuffer)
        /// Arriving as ``Action/forwardBodyPart(_:)`` actions until ``Action/finishStreamedBody``
        /// or ``Action/failStreamedBody(_:close:)``.
        case streamed(length: Int?)
    }

    enum State {
        /// Not active yet.
        case opening
        /// Waiting for a request head since `since`: the header timeout runs.
        case waitingForHead(since: NIODeadline)
        /// Reading a body that is kept whole before the request runs. `lastProgress` is `nil`
        /// when no body was announced. `answerLocally`: `OPTIONS *`, answered at the end.
        case buffering(Request, body: ByteBuffer, lastProgress: NIODeadline?, answerLocally: Bool)
        /// The request runs while its body arrives and is forwarded part by part.
        case streaming(Request, lastProgress: NIODeadline)
        /// The request is whole and runs; its reply is being produced and written.
        case responding(request: Int)
        /// An error reply went out and the connection closes: the rest of the request is dropped.
        case discarding
        case closed
        /// Only while a buffered body grows in place (no copy of the buffer).
        case modifying
    }

    enum Action {
        case none
        /// Answer `Expect: 100-continue`, then read the body.
        case sendContinue(HTTPVersion)
        /// Run the request (the fast path, else its work as a task); `sendContinue` answers
        /// `Expect: 100-continue` first.
        case dispatch(Request, body: DispatchedBody, sendContinue: Bool)
        case forwardBodyPart(ByteBuffer)
        case finishStreamedBody
        /// End the streamed body with an error, so the upstream request is aborted and the
        /// request's work answers 400/408; `close` closes the connection too.
        case failStreamedBody(ClientBodyFailure, close: Bool)
        /// Write a reply Concierge makes itself; `head` is `nil` when no request head was read
        /// (the reply is then not logged).
        case respondLocally(ProxyReply, head: HTTPRequestHead?, close: Bool)
        /// Write the 408 for a head that never completed below the HTTP layers, then close.
        case writeHeaderTimeout
        case close
        /// An event no sequence of NIO's events brings in the state it came in (`what`): the
        /// machine is closed; the handler reports it (a debug build stops) and closes the connection.
        case impossible(StaticString)
    }

    private(set) var state = State.opening
    /// Replies finished on this connection.
    private(set) var served = 0
    private(set) var limits: Limits
    private var lastRequestID = 0
    /// Events that arrived while a reply was being produced, in order.
    private var inbox = CircularBuffer<Inbound>()
    /// A socket `read` held back while events wait in ``inbox`` (back-pressure on pipelining clients).
    private var readHeld = false
    /// The client closed its side: the connection closes once the replies owed are out.
    private(set) var inputClosed = false

    init(limits: Limits) {
        self.limits = limits
    }

    // MARK: - Pipelining

    /// An event from the client: returned when the handler is to handle it now, `nil` when it
    /// waits behind the reply being produced (``nextQueued()`` hands it back later).
    mutating func admit(_ event: Inbound) -> Inbound? {
        guard isResponding || !inbox.isEmpty else { return event }
        inbox.append(event)
        return nil
    }

    /// After a reply: the next waiting event, unless a reply is being produced again.
    mutating func nextQueued() -> Inbound? {
        isResponding ? nil : inbox.popFirst()
    }

    /// The channel asks to read more: `true` passes the read to the socket. Reading goes on
    /// while a reply is produced until an event waits (a pipelining client): then the read is
    /// held until the queue is empty, so at most one read's worth of events waits.
    mutating func readRequested() -> Bool {
        guard inbox.isEmpty else {
            readHeld = true
            return false
        }
        return true
    }

    /// Once the queue is empty, whether a held read goes to the socket now.
    mutating func releaseHeldRead() -> Bool {
        guard readHeld, inbox.isEmpty else { return false }
        readHeld = false
        return true
    }

    /// The client half-closed: an idle connection closes now, a busy one after the replies owed.
    mutating func inputEnded() -> Action {
        inputClosed = true
        return closeIfIdleAfterInputClosed()
    }

    /// `.close` when the client half-closed, no request is in progress and nothing waits.
    mutating func closeIfIdleAfterInputClosed() -> Action {
        guard inputClosed, isWaitingForHead, inbox.isEmpty else { return .none }
        state = .closed
        return .close
    }

    // MARK: - Events

    mutating func channelActive(now: NIODeadline) {
        if case .opening = state { state = .waitingForHead(since: now) }
    }

    /// A head the checks of docs/hardening.md refused with `reply`.
    mutating func headRefused(_ head: HTTPRequestHead, reply: ProxyReply) -> Action {
        if let outOfPlace = headOutOfPlace() { return outOfPlace }
        state = .discarding
        return .respondLocally(reply, head: head, close: true)
    }

    /// A head that passed the checks. `streamsBody`: the endpoint takes its body as a stream.
    /// A reply is being produced or written: what arrives next waits (the handler's pipelining).
    var isResponding: Bool {
        if case .responding = state { return true }
        return false
    }

    /// Idle between requests with nothing waiting and the client still sending: a request
    /// recognised by its bytes may be answered at once (``hitReplayed(limits:now:)``).
    var canReplayHit: Bool {
        guard case .waitingForHead = state else { return false }
        return inbox.isEmpty && !inputClosed
    }

    /// A hit answered for a request head recognised by its bytes, without parsing them (when
    /// ``canReplayHit``): a request received and its reply finished, as a head, its end and
    /// ``replyFinished(request:keepAlive:now:)`` with keep-alive would count them.
    mutating func hitReplayed(limits: Limits, now: NIODeadline) -> Bool {
        guard canReplayHit else { return false }
        self.limits = limits
        lastRequestID += 1
        served += 1
        state = .waitingForHead(since: now)
        return true
    }

    /// Idle between requests.
    var isWaitingForHead: Bool {
        if case .waitingForHead = state { return true }
        return false
    }

    mutating func headReceived(_ head: HTTPRequestHead, streamsBody: Bool, limits: Limits, now: NIODeadline,
                               started: ContinuousClock.Instant) -> Action {
        if let outOfPlace = headOutOfPlace() { return outOfPlace }
        self.limits = limits
        lastRequestID += 1
        var request = Request(id: lastRequestID, head: head, started: started)
        if head.uri == "*" {
            state = .buffering(request, body: ByteBuffer(), lastProgress: nil, answerLocally: true)
            return .none
        }
        let length = head.headers.first(name: "content-length").flatMap(Int.init)
        if let length, length > limits.maxBodyBytes, !streamsBody {
            state = .discarding
            return .respondLocally(Self.tooLarge(limits), head: head, close: true)
        }
        let hasBody = (length ?? 0) > 0 || TransferCoding.of(head.headers["transfer-encoding"]) == .chunked
        let sendContinue = hasBody && head.headers.contains(name: "expect")
        if sendContinue { request.head.headers.remove(name: "expect") }
        if hasBody, streamsBody {
            state = .streaming(request, lastProgress: now)
            return .dispatch(request, body: .streamed(length: length), sendContinue: sendContinue)
        }
        state = .buffering(request, body: ByteBuffer(), lastProgress: hasBody ? now : nil, answerLocally: false)
        return sendContinue ? .sendContinue(head.version) : .none
    }

    mutating func bodyReceived(_ part: ByteBuffer, now: NIODeadline) -> Action {
        switch state {
        case .buffering(let request, var body, _, let answerLocally):
            if body.readableBytes + part.readableBytes > limits.maxBodyBytes {
                state = .discarding
                return .respondLocally(Self.tooLarge(limits), head: request.head, close: true)
            }
            state = .modifying
            var part = part
            body.writeBuffer(&part)
            state = .buffering(request, body: body, lastProgress: now, answerLocally: answerLocally)
            return .none
        case .streaming(let request, _):
            state = .streaming(request, lastProgress: now)
            return .forwardBodyPart(part)
        case .discarding, .closed:
            // The rest of a refused request, or parts the decoder had read before the close: dropped.
            return .none
        case .waitingForHead, .responding:
            // No request is being read: the decoder sends a head first, and parts that arrive
            // while a reply is produced wait in the inbox (``admit(_:)``).
            return impossible("a body part with no request being read")
        case .opening, .modifying:
            return impossible("a body part before the channel is active, or inside a mutation")
        }
    }

    mutating func endReceived(now: NIODeadline) -> Action {
        switch state {
        case .buffering(let request, let body, _, let answerLocally):
            guard !answerLocally else {
                let keepAlive = request.keepAlive
                served += 1
                state = keepAlive ? .waitingForHead(since: now) : .closed
                return .respondLocally(Self.allowedMethods, head: request.head, close: !keepAlive)
            }
            state = .responding(request: request.id)
            return .dispatch(request, body: .buffered(body), sendContinue: false)
        case .streaming(let request, _):
            state = .responding(request: request.id)
            return .finishStreamedBody
        case .discarding:
            state = .closed
            return .close
        case .closed:
            return .none
        case .waitingForHead, .responding:
            // The end of a request not being read (see ``bodyReceived(_:now:)``).
            return impossible("a request's end with no request being read")
        case .opening, .modifying:
            return impossible("a request's end before the channel is active, or inside a mutation")
        }
    }

    /// The handler's periodic check of the header and body deadlines.
    mutating func timerFired(now: NIODeadline) -> Action {
        switch state {
        case .waitingForHead(let since) where now - since >= limits.headerTimeout:
            state = .closed
            // An idle keep-alive connection is closed quietly, like nginx's `keepalive_timeout`.
            return served == 0 ? .writeHeaderTimeout : .close
        case .buffering(let request, _, let lastProgress?, _) where now - lastProgress >= limits.bodyTimeout:
            state = .discarding
            return .respondLocally(ClientBodyFailure.stalled.reply, head: request.head, close: true)
        case .streaming(let request, let lastProgress) where now - lastProgress >= limits.bodyTimeout:
            // The request's work answers 408 once the aborted upstream request returns.
            state = .responding(request: request.id)
            return .failStreamedBody(.stalled, close: false)
        default:
            return .none
        }
    }

    /// The reply to request `id` is written (`keepAlive`: the connection may serve another).
    /// Call it before writing a reply synchronously, and execute its action after the write.
    mutating func replyFinished(request id: Int, keepAlive: Bool, now: NIODeadline) -> Action {
        served += 1
        switch state {
        case .responding(let current) where current == id:
            state = keepAlive ? .waitingForHead(since: now) : .closed
            return keepAlive ? .none : .close
        case .streaming(let request, _) where request.id == id:
            // The upstream answered before the body ended: the rest can no longer be forwarded.
            state = .closed
            return .failStreamedBody(.malformed("reply sent before the body ended"), close: true)
        case .closed:
            return .none
        default:
            // An earlier request's reply: its `.end` already let the next request in.
            return keepAlive ? .none : .close
        }
    }

    /// The listener no longer takes request work (graceful shutdown): 503, then close.
    mutating func workRefused(_ request: Request) -> Action {
        state = .discarding
        return .respondLocally(.error(503, "shutting down"), head: request.head, close: true)
    }

    mutating func parserFailed(_ error: HTTPParserError) -> Action {
        switch state {
        case .opening, .waitingForHead, .buffering:
            state = .discarding
            return .respondLocally(Self.reply(to: error), head: nil, close: true)
        case .streaming(let request, _):
            // The request's work answers 400 once the aborted upstream request returns.
            state = .responding(request: request.id)
            return .failStreamedBody(.malformed("\(error)"), close: false)
        case .responding, .discarding, .closed:
            return .close
        case .modifying:
            return impossible("a parser error inside a mutation")
        }
    }

    /// Any other error on the connection: close it (a streamed body fails when it is inactive).
    func connectionFailed() -> Action {
        .close
    }

    mutating func channelInactive() -> Action {
        let previous = state
        state = .closed
        guard case .streaming = previous else { return .none }
        return .failStreamedBody(.malformed("connection closed before the body ended"), close: false)
    }

    /// A transition no sequence of NIO's events reaches: the connection closes rather than go
    /// on in a state nothing planned for (``Action/impossible(_:)``: the handler reports it,
    /// and a debug build stops there).
    private mutating func impossible(_ what: StaticString) -> Action {
        state = .closed
        return .impossible(what)
    }

    /// `nil` when a head may start a request now; else what becomes of it: dropped after an
    /// error reply or once closed, impossible inside a request or a mutation (the decoder
    /// delivers the next head only after the previous request's end).
    private mutating func headOutOfPlace() -> Action? {
        switch state {
        case .opening, .waitingForHead, .responding: return nil
        case .discarding, .closed: return Action.none
        case .buffering, .streaming, .modifying: return impossible("a request head inside a request")
        }
    }

    // MARK: - Replies

    static func tooLarge(_ limits: Limits) -> ProxyReply {
        .error(413, "request body larger than \(limits.maxBodyBytes) bytes")
    }

    /// The answer to `OPTIONS *`.
    static var allowedMethods: ProxyReply {
        var reply = ProxyReply(status: 200, body: .buffer(ByteBuffer()))
        reply.headers.add(name: "Allow", value: "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
        return reply
    }

    static func reply(to error: HTTPParserError) -> ProxyReply {
        switch error {
        case .headerOverflow: return .error(431, "request header block too large")
        case .invalidMethod: return .error(501, "method not implemented")
        case .invalidEOFState: return .error(400, "malformed request: connection closed before the request ended")
        // RFC 9112 §6.1, §6.3: the length is ambiguous (see ``RequestHeadCheck/refined(_:read:)``).
        case .unexpectedContentLength: return .error(400, "malformed request: Content-Length with Transfer-Encoding, or two Content-Length fields")
        // llhttp's "invalid Transfer-Encoding" (a coding other than a final chunked without a
        // length) has no case of its own in NIO.
        case .unknown: return .error(501, "unsupported transfer coding or framing")
        default: return .error(400, "malformed request: \(error)")
        }
    }
}
