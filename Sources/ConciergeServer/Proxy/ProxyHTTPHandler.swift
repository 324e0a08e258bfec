import ConciergeCore
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// The proxy listener's per-connection handler (receiving, and the reply).
///
/// Runs on the connection's event loop. A fresh hot-tier hit is answered right here from
/// the stored buffer; anything else runs ``ProxyPipeline/handle(_:)`` in a task whose reply
/// is written back through the channel. Enforces the header-size, body-size and
/// header-timeout limits, refuses `CONNECT` and absolute-form targets to foreign hosts.
final class ProxyHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private enum State {
        case idle
        case buffering(HTTPRequestHead, ByteBuffer, started: ContinuousClock.Instant)
        case streaming(HTTPRequestHead, AsyncStream<ByteBuffer>.Continuation)
        /// A reply was already sent (error); the rest of the request is dropped.
        case discarding
        case responding
    }

    private let server: ProxyServerContext
    private var state = State.idle
    /// Checks the head deadline; one repeated task per connection, so a request costs only
    /// a timestamp, not a timer.
    private var headerTimer: RepeatedTask?
    /// When the connection started waiting for a request head; `nil` while a request runs.
    private var waitingForHeadSince: NIODeadline?
    private var remoteAddress: String?

    init(server: ProxyServerContext) {
        self.server = server
    }

    func channelActive(context: ChannelHandlerContext) {
        remoteAddress = context.remoteAddress?.ipAddress
        armHeaderTimeout(context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        headerTimer?.cancel()
        headerTimer = nil
        if case .streaming(_, let continuation) = state { continuation.finish() }
        context.fireChannelInactive()
    }

    private func armHeaderTimeout(context: ChannelHandlerContext) {
        waitingForHeadSince = .now()
        guard headerTimer == nil else { return }
        let timeout = TimeAmount.nanoseconds(server.runtime.current.config.limits.headerTimeout.nanoseconds)
        let check = max(TimeAmount.milliseconds(100), TimeAmount.nanoseconds(timeout.nanoseconds / 4))
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        headerTimer = context.eventLoop.scheduleRepeatedTask(initialDelay: check, delay: check) { _ in
            let (handler, context) = loopBound.value
            if let since = handler.waitingForHeadSince, NIODeadline.now() - since >= timeout {
                handler.headerTimer?.cancel()
                handler.headerTimer = nil
                context.close(promise: nil)
            }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            waitingForHeadSince = nil
            receiveHead(head, context: context)
        case .body(var part):
            switch state {
            case .buffering(let head, var buffer, let started):
                let limit = server.runtime.current.config.limits.maxBodyBytes
                if buffer.readableBytes + part.readableBytes > limit {
                    state = .discarding
                    respondLocally(.error(413, "request body larger than \(limit) bytes"), head: head, keepAlive: false, context: context)
                    return
                }
                state = .idle  // avoid a copy-on-write of the buffer while appending
                buffer.writeBuffer(&part)
                state = .buffering(head, buffer, started: started)
            case .streaming(_, let continuation):
                continuation.yield(part)
            default:
                break
            }
        case .end:
            switch state {
            case .buffering(let head, let buffer, let started):
                state = .responding
                dispatch(head, body: .buffered(buffer), started: started, context: context)
            case .streaming(_, let continuation):
                continuation.finish()
            case .discarding:
                state = .idle
                context.close(promise: nil)
            default:
                break
            }
        }
    }

    private func receiveHead(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let limits = server.runtime.current.config.limits
        var headerBytes = head.uri.utf8.count
        for (name, value) in head.headers { headerBytes += name.utf8.count + value.utf8.count + 4 }
        if headerBytes > limits.maxHeaderBytes {
            state = .discarding
            respondLocally(.error(431, "request header block larger than \(limits.maxHeaderBytes) bytes"), head: head, keepAlive: false, context: context)
            return
        }
        if head.method == .CONNECT {
            state = .discarding
            respondLocally(.error(405, "CONNECT is not supported: Concierge is not a forward proxy"), head: head, keepAlive: false, context: context)
            return
        }
        var head = head
        if !head.uri.hasPrefix("/") {
            guard let origin = server.originForm(head.uri) else {
                state = .discarding
                respondLocally(.error(400, "absolute-form target names a host that is not an upstream"), head: head, keepAlive: false, context: context)
                return
            }
            head.uri = origin
        }
        let streamsBody = server.streams(method: head.method.rawValue, target: head.uri)
        if let length = head.headers.first(name: "content-length").flatMap(Int.init), length > limits.maxBodyBytes, !streamsBody {
            state = .discarding
            respondLocally(.error(413, "request body larger than \(limits.maxBodyBytes) bytes"), head: head, keepAlive: false, context: context)
            return
        }
        let started = ContinuousClock.now
        let hasBody = (head.headers.first(name: "content-length").flatMap(Int.init) ?? 0) > 0
            || head.headers["transfer-encoding"].contains { $0.lowercased().contains("chunked") }
        if hasBody, streamsBody {
            let (stream, continuation) = AsyncStream.makeStream(of: ByteBuffer.self)
            state = .streaming(head, continuation)
            let length = head.headers.first(name: "content-length").flatMap(Int.init)
            dispatch(head, body: .stream(stream, length: length), started: started, context: context)
        } else {
            state = .buffering(head, context.channel.allocator.buffer(capacity: 0), started: started)
        }
    }

    private func dispatch(_ head: HTTPRequestHead, body: IncomingRequest.Body, started: ContinuousClock.Instant, context: ChannelHandlerContext) {
        let incoming = IncomingRequest(method: head.method.rawValue, target: head.uri, headers: head.headers, body: body,
                                       clientAddress: remoteAddress)
        let keepAlive = head.isKeepAlive
        var prepared: ProxyPipeline.Preparation? = nil
        if case .buffered = body, let fast = server.fastPath(incoming) {
            switch fast {
            case .reply(let reply):
                writeSynchronously(reply, head: head, keepAlive: keepAlive, context: context)
                server.log(incoming, reply, started: started)
                return
            case .prepared(let preparation):
                if case .reply(let reply) = preparation, case .buffer = reply.body {
                    writeSynchronously(reply, head: head, keepAlive: keepAlive, context: context)
                    server.log(incoming, reply, started: started)
                    return
                }
                prepared = preparation
            }
        }
        let channel = context.channel
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let server = self.server
        let version = head.version
        let isHead = head.method == .HEAD
        Task {
            let reply = await server.handle(incoming, prepared: prepared)
            let ok = await ResponseWriter.write(reply, version: version, keepAlive: keepAlive, isHead: isHead, to: channel)
            server.log(incoming, reply, started: started)
            channel.eventLoop.execute {
                let (handler, context) = loopBound.value
                handler.responseFinished(keepAlive: keepAlive && ok, context: context)
            }
        }
    }

    private func responseFinished(keepAlive: Bool, context: ChannelHandlerContext) {
        if case .streaming(_, let continuation) = state { continuation.finish() }
        if keepAlive, context.channel.isActive {
            if case .discarding = state {} else { state = .idle }
            armHeaderTimeout(context: context)
        } else {
            state = .idle
            context.close(promise: nil)
        }
    }

    private func respondLocally(_ reply: ProxyReply, head: HTTPRequestHead, keepAlive: Bool, context: ChannelHandlerContext) {
        var reply = reply
        if !keepAlive { reply.headers.replaceOrAdd(name: "Connection", value: "close") }
        writeSynchronously(reply, head: head, keepAlive: keepAlive, context: context)
        server.log(IncomingRequest(method: head.method.rawValue, target: head.uri, headers: head.headers, clientAddress: remoteAddress),
                   reply, started: .now)
        if !keepAlive {
            context.close(promise: nil)
        }
    }

    /// Writes a buffered reply on the event loop (fast hits and local errors).
    private func writeSynchronously(_ reply: ProxyReply, head: HTTPRequestHead, keepAlive: Bool, context: ChannelHandlerContext) {
        guard case .buffer(let body) = reply.body else { return }
        var responseHead = HTTPResponseHead(version: head.version, status: HTTPResponseStatus(statusCode: reply.status), headers: reply.headers)
        responseHead.headers.replaceOrAdd(name: "Content-Length", value: String(body.readableBytes))
        if !keepAlive { responseHead.headers.replaceOrAdd(name: "Connection", value: "close") }
        context.write(wrapOutboundOut(.head(responseHead)), promise: nil)
        if head.method != .HEAD, body.readableBytes > 0 {
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        if case .responding = state { state = .idle }
        if keepAlive { armHeaderTimeout(context: context) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let parserError = error as? HTTPParserError, case .idle = state {
            let (status, message): (Int, String) = {
                switch parserError {
                case .headerOverflow: return (431, "request header block too large")
                case .invalidMethod: return (405, "unsupported method")
                default: return (400, "malformed request: \(parserError)")
                }
            }()
            let body = JSONValue.object(["error": .string(message)]).serializedBytes
            var head = HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: status))
            head.headers.add(name: "Content-Type", value: "application/json")
            head.headers.add(name: "Content-Length", value: String(body.count))
            head.headers.add(name: "Connection", value: "close")
            context.write(wrapOutboundOut(.head(head)), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in context.close(promise: nil) }
            return
        }
        context.close(promise: nil)
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
