import ConciergeCore
import Logging
import NIOCore
import NIOHTTP1

/// The proxy listener's per-connection handler: turns NIO's events into calls on a
/// ``ProxyConnectionStateMachine`` and executes the actions it returns.
///
/// Runs on the connection's event loop. The head checks of docs/hardening.md are
/// ``RequestHeadCheck``'s; the states, limits and timeouts are the machine's. Each request is
/// planned once (``ProxyResponder/plan(_:encoded:)``, a ``RequestPlan``) and the plan carried
/// out: a fresh hot-tier hit is answered right here from the stored buffer, with no task (and a
/// read that repeats a head answered so before, without even the decoder: ``RepeatedHitHandler``
/// hands it on as a ``RecognisedRead``), and so is the usual miss (by callbacks:
/// ``ProxyResponder/missOnLoop(_:on:answer:)``); any other plan becomes work on the
/// connection's ``ConnectionLane`` (a child task of ``ProxyListener/run()`` on this loop) that
/// writes its whole reply back through the channel. Every reply goes out through
/// ``ReplyWriter``: on the loop through the connection's instance, from request work through
/// its awaited writes. A streamed body that breaks
/// aborts the upstream request (its stream throws) and is answered 400/408.
///
/// Pipelining is the machine's (NIO's pipelining handler is not installed, so a hit can be
/// written as ready bytes below the response encoder): every part, parser error and half-close
/// goes through ``ProxyConnectionStateMachine/admit(_:)``; while a request is being answered,
/// what arrives next waits there and reading from the socket pauses; once the reply is out the
/// waiting events are handled in order. Replies therefore go out in request order, one at a
/// time, and an error or a half-close never overtakes a reply owed before it.
///
/// Not generic over its responder: NIO calls a handler through its protocol witnesses, which
/// for a generic class run the unspecialized code (every `unwrapInboundIn` then looked up
/// run-time metadata and cast dynamically: ~1k instructions a part). The responder is an
/// existential; a call to it is one indirect call.
final class ProxyHTTPHandler: ChannelDuplexHandler, RemovableChannelHandler, RecognisedReadReceiver {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private let responder: any ProxyResponder
    private let requests: RequestWorkQueue
    /// Where a connection's impossible events and unwritable replies are reported.
    private let logger: Logger
    /// The connection's event loop as the executor its request work prefers.
    private var executor: EventLoopTaskExecutor?
    /// Where the connection's request work runs, opened with its first asynchronous request.
    private var lane: ConnectionLane?
    private var machine: ProxyConnectionStateMachine
    /// Ticks the machine's header and body deadlines; one repeated task per connection, so a
    /// request costs a timestamp, not a timer.
    private var deadlineTimer: RepeatedTask?
    private var remoteAddress: String?
    /// The peer and the listener's session, decided at accept.
    private let identity: ConnectionIdentity
    /// Writes every reply on the event loop, below the response encoder (found when added).
    private var writer: ReplyWriter?
    /// The `Host` this connection's last request was allowed with (``RequestHeadCheck``).
    private var allowedHost: RequestHeadCheck.AllowedHost?
    /// The configuration and the route the last head was read with.
    private var routeMemo = ConnectionRouteMemo()
    /// The route decided when the last head arrived, for the request it dispatches (routed once).
    private var routeOfNextDispatch: PreparedRequest.Route?
    /// What the decoder delivers from a read ``RepeatedHitHandler`` watches, and the hit answered for it.
    private let watch: DecodedReadWatch
    /// The body of the running request while it streams in.
    private var streamedBody: (continuation: AsyncThrowingStream<ByteBuffer, any Error>.Continuation, outcome: ClientBodyOutcome)?

    init(responder: any ProxyResponder, requests: RequestWorkQueue, identity: ConnectionIdentity = .anonymous,
         watch: DecodedReadWatch, logger: Logger = ProxyHTTPHandler.quietLogger) {
        (self.responder, self.requests, self.identity, self.logger) = (responder, requests, identity, logger)
        self.watch = watch
        machine = ProxyConnectionStateMachine(limits: .init(responder.currentConfig.settings.limits))
    }

    // MARK: - NIO events

    func channelActive(context: ChannelHandlerContext) {
        remoteAddress = context.remoteAddress?.ipAddress
        machine.channelActive(now: context.eventLoop.now)
        let interval = machine.limits.tickInterval
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        deadlineTimer = context.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
            let (handler, context) = loopBound.value
            handler.execute(handler.machine.timerFired(now: context.eventLoop.now), context: context)
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadlineTimer?.cancel()
        deadlineTimer = nil
        // The request running (if any) still finishes; then the lane's task ends.
        lane?.finish()
        lane = nil
        execute(machine.channelInactive(), context: context)
        context.fireChannelInactive()
    }

    func handlerAdded(context: ChannelHandlerContext) {
        writer = (try? context.pipeline.syncOperations.context(handlerType: HTTPResponseEncoder.self)).map(ReplyWriter.init)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        receiveDecoded(unwrapInboundIn(data), context: context)
    }

    /// A part of a request as the decoder delivers it: from NIO's decoder, or read without it
    /// by ``RepeatedHitHandler`` (``PlainRequestHead``), in the same order.
    private func receiveDecoded(_ part: HTTPServerRequestPart, context: ChannelHandlerContext) {
        watch.count(part)
        if let event = machine.admit(.part(part)) { handle(event, context: context) }
    }

    /// What ``RepeatedHitHandler`` recognised: a repeated read answered (or not), a plain head
    /// received as its head and end.
    func receive(_ read: RecognisedRead, context: ChannelHandlerContext) -> Bool {
        switch read {
        case .repeated(let bytes):
            return answerRepeatedHit(bytes, context: context)
        case .plainHead(let head):
            receiveDecoded(.head(head), context: context)
            receiveDecoded(.end(nil), context: context)
            return true
        }
    }

    /// Reading goes on while a reply is produced, until something arrives for a later request
    /// (a pipelining client): then reads wait until the replies owed are out. A client that
    /// waits for each reply never stops reading, so its socket's readiness is never taken out
    /// of epoll and put back (two `epoll_ctl` calls per request that goes to the upstream).
    func read(context: ChannelHandlerContext) {
        if machine.readRequested() { context.read() }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case ChannelEvent.inputClosed = event, let event = machine.admit(.inputClosed) {
            handle(event, context: context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        watch.errorSeen()
        if let parserError = error as? HTTPParserError {
            let refined = RequestHeadCheck.refined(parserError, read: watch.input)
            if let event = machine.admit(.parserError(refined)) { handle(event, context: context) }
        } else {
            execute(machine.connectionFailed(), context: context)
        }
    }

    private func handle(_ event: ProxyConnectionStateMachine.Inbound, context: ChannelHandlerContext) {
        switch event {
        case .part(let part): receive(part, context: context)
        case .parserError(let error): execute(machine.parserFailed(error), context: context)
        case .inputClosed: execute(machine.inputEnded(), context: context)
        }
    }

    /// After a reply: the waiting events in order, until one starts a reply of its own; once
    /// none waits, a held read goes on, and a half-closed idle connection closes.
    private func resumeAfterReply(context: ChannelHandlerContext) {
        while let event = machine.nextQueued() { handle(event, context: context) }
        if machine.releaseHeldRead() { context.read() }
        execute(machine.closeIfIdleAfterInputClosed(), context: context)
    }

    private func receive(_ part: HTTPServerRequestPart, context: ChannelHandlerContext) {
        switch part {
        case .head(let head):
            receiveHead(head, context: context)
        case .body(let part):
            execute(machine.bodyReceived(part, now: context.eventLoop.now), context: context)
        case .end:
            execute(machine.endReceived(now: context.eventLoop.now), context: context)
        }
    }

    private func receiveHead(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let (config, limits) = routeMemo.config(responder)
        var head = head
        if let reply = RequestHeadCheck.refusal(&head, config: config, responder: responder, allowedHost: &allowedHost) {
            execute(machine.headRefused(head, reply: reply), context: context)
            return
        }
        let route = head.uri == "*" ? nil : routeMemo.route(head.method, target: head.uri, responder)
        routeOfNextDispatch = route
        let streamsBody = route?.streamsBody ?? false
        let action = machine.headReceived(head, streamsBody: streamsBody, limits: limits,
                                          now: context.eventLoop.now, started: .now)
        execute(action, context: context)
    }

    // MARK: - Actions

    private func execute(_ action: ProxyConnectionStateMachine.Action, context: ChannelHandlerContext) {
        switch action {
        case .none:
            break
        case .sendContinue(let version):
            context.writeAndFlush(wrapOutboundOut(.head(HTTPResponseHead(version: version, status: .continue))), promise: nil)
        case .dispatch(let request, let body, let sendContinue):
            if sendContinue { execute(.sendContinue(request.head.version), context: context) }
            dispatch(request, body: body, context: context)
        case .forwardBodyPart(let part):
            streamedBody?.continuation.yield(part)
        case .finishStreamedBody:
            streamedBody?.continuation.finish()
            streamedBody = nil
        case .failStreamedBody(let reason, let close):
            if let streamedBody {
                streamedBody.outcome.fail(reason)
                streamedBody.continuation.finish(throwing: reason)
            }
            streamedBody = nil
            if close { context.close(promise: nil) }
        case .respondLocally(let reply, let head, let close):
            write(reply, version: head?.version ?? .http1_1, isHead: head?.method == .HEAD, keepAlive: !close, context: context)
            if let head {
                let incoming = IncomingRequest(method: head.method.wireName, target: head.uri, headers: head.headers, clientAddress: remoteAddress)
                responder.log(incoming, ProxyAnswer(reply, RequestReport()), started: .now)
            }
            if close { context.close(promise: nil) }
        case .writeHeaderTimeout:
            guard let writer else {
                context.close(promise: nil)
                return
            }
            writer.writeHeaderTimeout()
        case .close:
            context.close(promise: nil)
        case .impossible(let what):
            // The machine is closed already: a debug build stops here, a release build reports it.
            logger.error("proxy connection: impossible event, closing", metadata: ["event": "\(what)"])
            assertionFailure("ProxyConnectionStateMachine: \(what)")
            context.close(promise: nil)
        }
    }

    /// For handlers made without a logger (tests): reports nothing.
    static let quietLogger = Logger(label: "concierge.proxy") { _ in SwiftLogNoOpLogHandler() }
    /// The fast path on the event loop, else the request's work to the listener's task group.
    private func dispatch(_ request: ProxyConnectionStateMachine.Request, body: ProxyConnectionStateMachine.DispatchedBody,
                          context: ChannelHandlerContext) {
        let head = request.head
        var incoming = IncomingRequest(method: head.method.wireName, target: head.uri, headers: head.headers, clientAddress: remoteAddress)
        incoming.route = routeOfNextDispatch
        incoming.identity = identity
        routeOfNextDispatch = nil
        if let tracer = responder.tracer, incoming.route != nil { incoming.trace = tracer.begin(incoming) }
        switch body {
        case .buffered(let buffer):
            incoming.body = .buffered(buffer)
            let takesBytes = writer != nil && head.method == .GET && head.version == .http1_1 && request.keepAlive
            switch responder.plan(incoming, encoded: takesBytes) {
            case .answer(let answer):
                replySynchronously(answer, to: request, incoming, context: context)
            case .encodedHit(let hit, let recipe):
                writeEncoded(hit, recipe: recipe, to: request, incoming, context: context)
            case .missOnLoop(let miss):
                if answerOnLoop(miss, to: request, incoming, context: context) { return }
                submit(request, incoming, plan: miss.awaited, bodyOutcome: nil, context: context)
            case .task(let plan):
                submit(request, incoming, plan: plan, bodyOutcome: nil, context: context)
            case nil:
                submit(request, incoming, plan: nil, bodyOutcome: nil, context: context)
            }
        case .streamed(let length):
            let (stream, continuation) = AsyncThrowingStream.makeStream(of: ByteBuffer.self, throwing: (any Error).self)
            let outcome = ClientBodyOutcome()
            streamedBody = (continuation, outcome)
            incoming.body = .stream(StreamHandle(stream), length: length)
            submit(request, incoming, plan: nil, bodyOutcome: outcome, context: context)
        }
    }

    /// The usual miss as callbacks on this loop (``ProxyResponder/missOnLoop(_:on:answer:)``),
    /// its reply written as a fast answer is (possibly before `missOnLoop` returns, for a
    /// request the pool refuses at once); whether it was taken (else the request becomes work).
    private func answerOnLoop(_ miss: RequestPlan.LoopMiss, to request: ProxyConnectionStateMachine.Request,
                              _ incoming: IncomingRequest, context: ChannelHandlerContext) -> Bool {
        guard let registered = requests.beginOnLoop(context.channel) else { return false }
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let requests = self.requests
        let taken = responder.missOnLoop(miss, on: context.eventLoop) { answer in
            let (handler, context) = loopBound.value
            // A miss's answer is always buffered (else the connection closes: replySynchronously).
            handler.replySynchronously(answer, to: request, incoming, context: context)
            requests.end(registered)
        }
        if !taken { requests.end(registered) }
        return taken
    }

    private func replySynchronously(_ answer: ProxyAnswer, to request: ProxyConnectionStateMachine.Request, _ incoming: IncomingRequest,
                                     keepAlive: Bool? = nil, context: ChannelHandlerContext) {
        let keepAlive = keepAlive ?? request.keepAlive
        // Before the write, as a reply's end may deliver the next pipelined request right away.
        let next = machine.replyFinished(request: request.id, keepAlive: keepAlive, now: context.eventLoop.now)
        write(answer.reply, version: request.head.version, isHead: request.head.method == .HEAD, keepAlive: keepAlive, context: context)
        responder.log(incoming, answer, started: request.started)
        execute(next, context: context)
        resumeAfterReply(context: context)
    }

    /// A hit as ready bytes, below the response encoder: the entry's head, `Cache-Status` and
    /// `Age`, the body (in the same buffer unless it is large); one flush.
    /// `recipe`: the thread's hit memo keeps one for the request, so its bytes may be
    /// remembered too (``RepeatedHitHandler``).
    private func writeEncoded(_ hit: EncodedHit, recipe: HitMemo.Recipe?, to request: ProxyConnectionStateMachine.Request,
                              _ incoming: IncomingRequest, context: ChannelHandlerContext) {
        guard let writer else {
            context.close(promise: nil)
            return
        }
        let next = machine.replyFinished(request: request.id, keepAlive: true, now: context.eventLoop.now)
        writer.write(hit)
        responder.log(incoming, hit.answer, started: request.started)
        watch.hitAnswered(incoming, recipe: recipe)
        execute(next, context: context)
        resumeAfterReply(context: context)
    }

    // MARK: - Requests recognised by their bytes (RepeatedHitHandler)

    /// A request recognised by its bytes (``RecognisedRead/repeated(_:)``), answered from the hot tier without
    /// parsing them: only between requests, with nothing waiting. `false`: the bytes go to the
    /// request decoder.
    private func answerRepeatedHit(_ bytes: ByteBuffer, context: ChannelHandlerContext) -> Bool {
        guard let writer, machine.canReplayHit, let (hit, incoming) = responder.replayedHit(of: bytes, listenerSession: identity.listenerSession) else {
            return false
        }
        let started = ContinuousClock.now
        let (_, limits) = routeMemo.config(responder)
        guard machine.hitReplayed(limits: limits, now: context.eventLoop.now) else { return false }
        var logged = incoming
        if let tracer = responder.tracer, tracer.sampleRatio > 0 { logged.trace = tracer.begin(incoming) }
        writer.write(hit)
        logged.clientAddress = remoteAddress
        responder.log(logged, hit.answer, started: started)
        return true
    }

    private func submit(_ request: ProxyConnectionStateMachine.Request, _ incoming: IncomingRequest, plan: RequestPlan.TaskPlan?,
                        bodyOutcome: ClientBodyOutcome?, context: ChannelHandlerContext) {
        let work = requestWork(request, incoming, plan: plan, bodyOutcome: bodyOutcome, context: context)
        if lane == nil, context.channel.isActive { lane = requests.openLane(executor: work.executor) }
        if lane?.submit(work.run) != true {
            streamedBody = nil
            execute(machine.workRefused(request), context: context)
        }
    }

    /// The pipeline call and the whole reply, run by the listener's task group.
    private func requestWork(_ request: ProxyConnectionStateMachine.Request, _ incoming: IncomingRequest,
                             plan: RequestPlan.TaskPlan?, bodyOutcome: ClientBodyOutcome?,
                             context: ChannelHandlerContext) -> RequestWork {
        let channel = context.channel
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let responder = self.responder
        let (id, version, started) = (request.id, request.head.version, request.started)
        let (isHead, requestKeepAlive) = (request.head.method == .HEAD, request.keepAlive)
        if executor == nil { executor = EventLoopTaskExecutor(context.eventLoop) }
        return RequestWork(executor: executor) {
            await withTaskCancellationHandler {
                var answer = await responder.handle(incoming, plan: plan)
                var keepAlive = requestKeepAlive
                if let failure = bodyOutcome?.failed {
                    answer.reply = failure.reply
                    keepAlive = false
                }
                if case .buffer = answer.reply.body, channel.eventLoop.inEventLoop {
                    // On the connection's loop (the work's executor): written as a fast answer
                    // is, with no wait for the flush.
                    let (handler, context) = loopBound.value
                    handler.replySynchronously(answer, to: request, incoming, keepAlive: keepAlive, context: context)
                    return
                }
                let written = await ReplyWriter.write(answer.reply, version: version, keepAlive: keepAlive, isHead: isHead, to: channel)
                responder.log(incoming, answer, started: started)
                let reusable = keepAlive && written
                let finish: @Sendable () -> Void = {
                    let (handler, context) = loopBound.value
                    let next = handler.machine.replyFinished(request: id, keepAlive: reusable, now: context.eventLoop.now)
                    handler.execute(next, context: context)
                    handler.resumeAfterReply(context: context)
                }
                if channel.eventLoop.inEventLoop { finish() } else { channel.eventLoop.execute(finish) }
            } onCancel: {
                // The listener's grace period is over: closing the connection fails the reply's
                // pending writes and ends a streamed body, so the work returns promptly.
                channel.close(promise: nil)
            }
        }
    }

    // MARK: - Writing on the event loop

    /// Writes a buffered reply synchronously (fast hits, local answers, and the buffered replies
    /// of request work running on this loop) through the connection's ``ReplyWriter``. A reply
    /// it cannot write here (a body that is not buffered: ``ReplyWriter/Unwritable``; no
    /// response encoder in the pipeline) is reported and the connection closes: never expected,
    /// as each caller hands buffered replies only.
    private func write(_ reply: ProxyReply, version: HTTPVersion, isHead: Bool, keepAlive: Bool, context: ChannelHandlerContext) {
        do {
            guard let writer else { throw ReplyWriter.Unwritable() }
            try writer.write(reply, version: version, isHead: isHead, keepAlive: keepAlive)
        } catch {
            logger.error("proxy connection: a reply that cannot be written on the event loop, closing",
                         metadata: ["status": "\(reply.status)", "encoder": "\(writer != nil)"])
            context.close(promise: nil)
        }
    }
}
