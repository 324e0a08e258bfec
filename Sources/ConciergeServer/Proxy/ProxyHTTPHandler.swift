import ConciergeCore
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// Why a client's request body did not arrive whole (docs/hardening.md, framing).
enum ClientBodyFailure: Error, Sendable {
    /// Cut short (EOF mid-body) or malformed (bad chunk): 400.
    case malformed(String)
    /// No body bytes for `limits.body_timeout`: 408.
    case stalled

    var reply: ProxyReply {
        switch self {
        case .malformed(let why): return .error(400, "malformed request body: \(why)")
        case .stalled: return .error(408, "request body timed out")
        }
    }
}

/// Remembers that a streamed request body broke, so the request's task answers the client
/// with 400/408 instead of the upstream error the aborted upstream request produced.
final class ClientBodyOutcome: Sendable {
    private let failure = Mutex<ClientBodyFailure?>(nil)

    func fail(_ reason: ClientBodyFailure) {
        failure.withLock { if $0 == nil { $0 = reason } }
    }

    var failed: ClientBodyFailure? { failure.withLock { $0 } }
}

/// The proxy listener's per-connection handler (receiving, the checks of docs/hardening.md,
/// and the reply).
///
/// Runs on the connection's event loop. Checks the head (size, method, target, `Host`,
/// transfer coding, declared length), answers `Expect: 100-continue`, drops header names
/// with `_`, and enforces the header and body timeouts. A fresh hot-tier hit is answered
/// right here from the stored buffer; anything else runs the pipeline in a task whose reply
/// is written back through the channel. A streamed body that breaks aborts the upstream
/// request (its stream throws) and is answered 400/408.
final class ProxyHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private enum State {
        case idle
        case buffering(HTTPRequestHead, ByteBuffer, started: ContinuousClock.Instant)
        case streaming(HTTPRequestHead, AsyncThrowingStream<ByteBuffer, any Error>.Continuation, ClientBodyOutcome)
        /// A reply was already sent (error); the rest of the request is dropped.
        case discarding
        case responding
    }

    private let server: ProxyServerContext
    private var state = State.idle
    /// Checks the head and body deadlines; one repeated task per connection, so a request
    /// costs only a timestamp, not a timer.
    private var deadlineTimer: RepeatedTask?
    /// When the connection started waiting for a request head; `nil` while a request runs.
    private var waitingForHeadSince: NIODeadline?
    /// When the request body last made progress; `nil` when no body is being read.
    private var bodyProgressAt: NIODeadline?
    private var requestsServed = 0
    private var remoteAddress: String?
    /// A local answer (`OPTIONS *`) waiting for the end of the request.
    private var pendingLocalReply: ProxyReply?
    /// The route decided when the head arrived, until the request is dispatched.
    private var currentRoute: PreparedRequest.Route?

    init(server: ProxyServerContext) {
        self.server = server
    }

    func channelActive(context: ChannelHandlerContext) {
        remoteAddress = context.remoteAddress?.ipAddress
        armHeaderTimeout(context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadlineTimer?.cancel()
        deadlineTimer = nil
        failStreamedBody(.malformed("connection closed before the body ended"))
        context.fireChannelInactive()
    }

    private func armHeaderTimeout(context: ChannelHandlerContext) {
        waitingForHeadSince = .now()
        guard deadlineTimer == nil else { return }
        let limits = server.runtime.current.config.limits
        let headerTimeout = TimeAmount.nanoseconds(limits.headerTimeout.nanoseconds)
        let bodyTimeout = TimeAmount.nanoseconds(limits.bodyTimeout.nanoseconds)
        let shortest = min(headerTimeout, bodyTimeout)
        let check = max(TimeAmount.milliseconds(100), TimeAmount.nanoseconds(shortest.nanoseconds / 4))
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        deadlineTimer = context.eventLoop.scheduleRepeatedTask(initialDelay: check, delay: check) { _ in
            let (handler, context) = loopBound.value
            let now = NIODeadline.now()
            if let since = handler.waitingForHeadSince, now - since >= headerTimeout {
                handler.headerTimedOut(context: context)
            } else if let since = handler.bodyProgressAt, now - since >= bodyTimeout {
                handler.bodyStalled(context: context)
            }
        }
    }

    /// 408 before closing, unless the connection is an idle keep-alive one that already
    /// served requests (closed quietly, like nginx's `keepalive_timeout`).
    private func headerTimedOut(context: ChannelHandlerContext) {
        deadlineTimer?.cancel()
        deadlineTimer = nil
        waitingForHeadSince = nil
        guard requestsServed == 0 else {
            context.close(promise: nil)
            return
        }
        state = .discarding
        // No head reached the HTTP layers, so NIO's pipeline handler would refuse a reply:
        // the 408 goes out as ready bytes below the response encoder.
        let body = #"{"error":"request header timed out"}"#
        let bytes = "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n"
            + "Connection: close\r\n\r\n" + body
        if let encoder = try? context.pipeline.syncOperations.context(handlerType: HTTPResponseEncoder.self) {
            encoder.writeAndFlush(NIOAny(ByteBuffer(string: bytes))).whenComplete { _ in context.close(promise: nil) }
        } else {
            context.close(promise: nil)
        }
    }

    private func bodyStalled(context: ChannelHandlerContext) {
        bodyProgressAt = nil
        switch state {
        case .buffering(let head, _, _):
            state = .discarding
            respondLocally(ClientBodyFailure.stalled.reply, head: head, keepAlive: false, context: context)
        case .streaming:
            // The request's task answers 408 once the aborted upstream request returns.
            failStreamedBody(.stalled)
        default:
            break
        }
    }

    /// Ends a streamed body with an error, so the upstream request is aborted.
    private func failStreamedBody(_ reason: ClientBodyFailure) {
        guard case .streaming(_, let continuation, let outcome) = state else { return }
        outcome.fail(reason)
        continuation.finish(throwing: reason)
        bodyProgressAt = nil
        state = .responding
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            waitingForHeadSince = nil
            receiveHead(head, context: context)
        case .body(var part):
            switch state {
            case .buffering(let head, var buffer, let started):
                bodyProgressAt = .now()
                let limit = server.runtime.current.config.limits.maxBodyBytes
                if buffer.readableBytes + part.readableBytes > limit {
                    state = .discarding
                    bodyProgressAt = nil
                    respondLocally(.error(413, "request body larger than \(limit) bytes"), head: head, keepAlive: false, context: context)
                    return
                }
                state = .idle  // avoid a copy-on-write of the buffer while appending
                buffer.writeBuffer(&part)
                state = .buffering(head, buffer, started: started)
            case .streaming(_, let continuation, _):
                bodyProgressAt = .now()
                continuation.yield(part)
            default:
                break
            }
        case .end:
            bodyProgressAt = nil
            switch state {
            case .buffering(let head, let buffer, let started):
                state = .responding
                dispatch(head, body: .buffered(buffer), started: started, context: context)
            case .streaming(_, let continuation, _):
                continuation.finish()
                state = .responding
            case .discarding:
                state = .idle
                context.close(promise: nil)
            default:
                break
            }
        }
    }

    /// Why a request head is refused before routing, or `nil`.
    private func refusal(_ head: inout HTTPRequestHead, config: RuntimeConfig) -> ProxyReply? {
        let limits = config.config.limits
        var headerBytes = head.uri.utf8.count
        for (name, value) in head.headers { headerBytes += name.utf8.count + value.utf8.count + 4 }
        if headerBytes > limits.maxHeaderBytes {
            return .error(431, "request header block larger than \(limits.maxHeaderBytes) bytes")
        }
        switch head.method {
        case .CONNECT: return .error(405, "CONNECT is not supported: Concierge is not a forward proxy")
        case .TRACE: return .error(405, "TRACE is not supported")
        default: break
        }
        if case .unsupported(let codings) = TransferCoding.of(head.headers["transfer-encoding"]) {
            return .error(501, "transfer coding '\(HTTPFieldSyntax.printable(codings))' is not supported (only a final chunked)")
        }
        var authority: String? = nil
        if head.uri == "*" {
            guard head.method == .OPTIONS else { return .error(400, "the asterisk target is for OPTIONS only") }
        } else if !head.uri.hasPrefix("/") {
            guard let (origin, host) = server.originForm(head.uri) else {
                return .error(400, "absolute-form target names a host that is not an upstream")
            }
            head.uri = origin
            authority = host
        }
        if authority == nil {
            let verdict = config.hostPolicy.verdict(hostFields: head.headers["host"], requiresHost: head.version.major > 1 || head.version.minor >= 1)
            switch verdict {
            case .allowed: break
            case .malformed(let why): return .error(400, why)
            case .forbidden(let name): return .error(403, "host not allowed: \(HTTPFieldSyntax.printable(name))")
            }
        }
        if let expectation = head.headers.first(name: "expect"), expectation.lowercased() != "100-continue" {
            return .error(417, "unsupported expectation")
        }
        if !limits.underscoresInHeaders {
            let underscored = Set(head.headers.map(\.name).filter { $0.utf8.contains(UInt8(ascii: "_")) })
            for name in underscored { head.headers.remove(name: name) }
        }
        return nil
    }

    private func receiveHead(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let config = server.runtime.current
        var head = head
        if let reply = refusal(&head, config: config) {
            state = .discarding
            respondLocally(reply, head: head, keepAlive: false, context: context)
            return
        }
        if head.uri == "*" {
            var reply = ProxyReply(status: 200, body: .buffer(ByteBuffer()))
            reply.headers.add(name: "Allow", value: "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
            // Answered once the (ignored) body has been read.
            pendingLocalReply = reply
            state = .buffering(head, context.channel.allocator.buffer(capacity: 0), started: .now)
            return
        }
        let limits = config.config.limits
        let route = server.route(method: head.method.wireName, target: head.uri)
        currentRoute = route
        let streamsBody = route?.streamsBody ?? false
        let length = head.headers.first(name: "content-length").flatMap(Int.init)
        if let length, length > limits.maxBodyBytes, !streamsBody {
            state = .discarding
            respondLocally(.error(413, "request body larger than \(limits.maxBodyBytes) bytes"), head: head, keepAlive: false, context: context)
            return
        }
        let started = ContinuousClock.now
        let hasBody = (length ?? 0) > 0 || TransferCoding.of(head.headers["transfer-encoding"]) == .chunked
        if hasBody {
            bodyProgressAt = .now()
            if head.headers.contains(name: "expect") {
                context.writeAndFlush(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .continue))), promise: nil)
                head.headers.remove(name: "expect")
            }
        }
        if hasBody, streamsBody {
            let (stream, continuation) = AsyncThrowingStream.makeStream(of: ByteBuffer.self, throwing: (any Error).self)
            let outcome = ClientBodyOutcome()
            state = .streaming(head, continuation, outcome)
            dispatch(head, body: .stream(stream, length: length), started: started, context: context, bodyOutcome: outcome)
        } else {
            state = .buffering(head, context.channel.allocator.buffer(capacity: 0), started: started)
        }
    }

    private func dispatch(_ head: HTTPRequestHead, body: IncomingRequest.Body, started: ContinuousClock.Instant, context: ChannelHandlerContext,
                          bodyOutcome: ClientBodyOutcome? = nil) {
        let keepAlive = head.isKeepAlive
        if let local = pendingLocalReply {
            pendingLocalReply = nil
            writeSynchronously(local, version: head.version, isHead: false, keepAlive: keepAlive, context: context)
            return
        }
        var incoming = IncomingRequest(method: head.method.wireName, target: head.uri, headers: head.headers, body: body,
                                       clientAddress: remoteAddress)
        incoming.route = currentRoute
        currentRoute = nil
        var prepared: ProxyPipeline.Preparation? = nil
        if case .buffered = body, let fast = server.fastPath(incoming) {
            switch fast {
            case .answer(let answer):
                writeSynchronously(answer.reply, version: head.version, isHead: head.method == .HEAD, keepAlive: keepAlive, context: context)
                server.log(incoming, answer, started: started)
                return
            case .prepared(let preparation):
                prepared = preparation
            }
        }
        let channel = context.channel
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let server = self.server
        let version = head.version
        let isHead = head.method == .HEAD
        Task {
            var answer = await server.handle(incoming, prepared: prepared)
            var keepAlive = keepAlive
            if let failure = bodyOutcome?.failed {
                answer.reply = failure.reply
                keepAlive = false
            }
            let ok = await ResponseWriter.write(answer.reply, version: version, keepAlive: keepAlive, isHead: isHead, to: channel)
            server.log(incoming, answer, started: started)
            channel.eventLoop.execute {
                let (handler, context) = loopBound.value
                handler.responseFinished(keepAlive: keepAlive && ok, context: context)
            }
        }
    }

    private func responseFinished(keepAlive: Bool, context: ChannelHandlerContext) {
        requestsServed += 1
        if case .streaming = state {
            // The reply is out before the body ended (the upstream answered early): the rest
            // of the body cannot be forwarded any more.
            failStreamedBody(.malformed("reply sent before the body ended"))
            state = .idle
            context.close(promise: nil)
            return
        }
        if keepAlive, context.channel.isActive {
            if case .discarding = state {} else { state = .idle }
            armHeaderTimeout(context: context)
        } else {
            state = .idle
            context.close(promise: nil)
        }
    }

    private func respondLocally(_ reply: ProxyReply, head: HTTPRequestHead, keepAlive: Bool, context: ChannelHandlerContext) {
        writeSynchronously(reply, version: head.version, isHead: head.method == .HEAD, keepAlive: keepAlive, context: context)
        server.log(IncomingRequest(method: head.method.wireName, target: head.uri, headers: head.headers, clientAddress: remoteAddress),
                   ProxyAnswer(reply, RequestReport()), started: .now)
        if !keepAlive {
            context.close(promise: nil)
        }
    }

    /// Writes a buffered reply on the event loop (fast hits and local answers).
    private func writeSynchronously(_ reply: ProxyReply, version: HTTPVersion, isHead: Bool, keepAlive: Bool, context: ChannelHandlerContext) {
        guard case .buffer(let body) = reply.body else { return }
        var responseHead = HTTPResponseHead(version: version, status: HTTPResponseStatus(statusCode: reply.status), headers: reply.headers)
        responseHead.headers.replaceOrAdd(name: "Content-Length", value: String(body.readableBytes))
        if !keepAlive { responseHead.headers.replaceOrAdd(name: "Connection", value: "close") }
        context.write(wrapOutboundOut(.head(responseHead)), promise: nil)
        if !isHead, body.readableBytes > 0 {
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        if case .responding = state { state = .idle }
        requestsServed += 1
        if keepAlive { armHeaderTimeout(context: context) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let parserError = error as? HTTPParserError else {
            context.close(promise: nil)
            return
        }
        switch state {
        case .idle, .buffering:
            let (status, message): (Int, String) = {
                switch parserError {
                case .headerOverflow: return (431, "request header block too large")
                case .invalidMethod: return (501, "method not implemented")
                case .invalidEOFState: return (400, "malformed request: connection closed before the request ended")
                // llhttp's "invalid Transfer-Encoding" (a coding other than a final chunked
                // without a length) has no case of its own in NIO.
                case .unknown: return (501, "unsupported transfer coding or framing")
                default: return (400, "malformed request: \(parserError)")
                }
            }()
            state = .discarding
            let reply = ProxyReply.error(status, message)
            writeSynchronously(reply, version: .http1_1, isHead: false, keepAlive: false, context: context)
            context.close(promise: nil)
        case .streaming:
            // The request's task answers 400 once the aborted upstream request returns.
            failStreamedBody(.malformed("\(parserError)"))
        case .discarding, .responding:
            context.close(promise: nil)
        }
    }
}

extension HTTPMethod {
    /// The method as it appeared on the wire (NIO spells `M-SEARCH` as `MSEARCH`).
    var wireName: String {
        if case .MSEARCH = self { return "M-SEARCH" }
        return rawValue
    }
}

/// Writes a ``ProxyReply`` to a channel from outside the event loop, streaming bodies
/// with back-pressure (each chunk's write completes before the next is read).
enum ResponseWriter {
    /// - Returns: `false` when the connection failed mid-reply (it must not be reused).
    static func write(_ reply: ProxyReply, version: HTTPVersion, keepAlive: Bool, isHead: Bool, to channel: any Channel) async -> Bool {
        var head = HTTPResponseHead(version: version, status: HTTPResponseStatus(statusCode: reply.status), headers: reply.headers)
        if !keepAlive { head.headers.replaceOrAdd(name: "Connection", value: "close") }
        do {
            switch reply.body {
            case .buffer(let body):
                head.headers.replaceOrAdd(name: "Content-Length", value: String(body.readableBytes))
                channel.write(HTTPServerResponsePart.head(head), promise: nil)
                if !isHead, body.readableBytes > 0 { channel.write(HTTPServerResponsePart.body(.byteBuffer(body)), promise: nil) }
                try await channel.writeAndFlush(HTTPServerResponsePart.end(nil)).get()
            case .upstream(let body):
                try await channel.writeAndFlush(HTTPServerResponsePart.head(head)).get()
                var failed = false
                do {
                    for try await chunk in body where !isHead {
                        try await channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(chunk))).get()
                    }
                } catch {
                    failed = true
                }
                if failed {
                    channel.close(promise: nil)
                    return false
                }
                try await channel.writeAndFlush(HTTPServerResponsePart.end(nil)).get()
            case .events(let stream):
                head.headers.remove(name: "Content-Length")
                try await channel.writeAndFlush(HTTPServerResponsePart.head(head)).get()
                // The stream may stay quiet for long: end it when the client goes away.
                let pump = Task {
                    for await chunk in stream {
                        do {
                            try await channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(chunk))).get()
                        } catch {
                            return
                        }
                    }
                }
                channel.closeFuture.whenComplete { _ in pump.cancel() }
                await pump.value
                try? await channel.writeAndFlush(HTTPServerResponsePart.end(nil)).get()
                channel.close(promise: nil)
                return false
            }
            return true
        } catch {
            channel.close(promise: nil)
            return false
        }
    }
}
