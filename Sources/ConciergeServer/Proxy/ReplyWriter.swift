import ConciergeCore
import NIOCore
import NIOHTTP1
import ServiceLifecycle

/// The one writer of the proxy's replies: every reply leaves a proxy connection through it.
///
/// - On the connection's event loop, as bytes below the response encoder with one flush (an
///   instance, holding the encoder's context): hits as ready bytes (``write(_:)``), buffered
///   replies of misses, local answers and request work finished on the loop
///   (``write(_:version:isHead:keepAlive:)``, which refuses a reply whose body is not
///   buffered: ``Unwritable``) and the header-timeout 408 (``writeHeaderTimeout()``).
/// - From a request's work (``write(_:version:keepAlive:isHead:to:)``, static, through the
///   channel's HTTP parts): a reply whose body streams (an upstream's body, Server-Sent
///   Events), or one a task finishes off the connection's loop; each write is awaited, so a
///   streamed body goes with back-pressure (each chunk's write completes before the next is read).
///
/// Separate methods rather than one taking an enum: a hit passed into an enum's payload would
/// be copied (a retain and release of each of its buffers) on the path that costs the least.
struct ReplyWriter {
    /// A reply that cannot be written synchronously on the loop: its body streams.
    struct Unwritable: Error, Equatable {}

    /// Bodies up to this size are copied behind the head they follow: one write, one iovec.
    static var inlineBodyBytes: Int { 16 * 1024 }

    /// The response encoder's context: what is written there passes below it.
    let encoder: ChannelHandlerContext

    /// A hot-tier hit as ready bytes: the entry's head, `Cache-Status` and `Age`, the body.
    func write(_ hit: EncodedHit) {
        let (head, body) = hit.bytes(allocator: encoder.channel.allocator, inlineBody: Self.inlineBodyBytes)
        send(head, then: body)
    }

    /// A buffered reply: the status line, its headers with its own `Content-Length` (and
    /// `Connection: close` when the connection ends) in place of theirs, the body.
    /// - Throws: ``Unwritable`` when the body is not buffered; nothing is written then.
    func write(_ reply: ProxyReply, version: HTTPVersion, isHead: Bool, keepAlive: Bool) throws(Unwritable) {
        guard case .buffer(let body) = reply.body else { throw Unwritable() }
        let (bytes, rest) = Self.bytes(reply, body: body, version: version, isHead: isHead, keepAlive: keepAlive)
        send(bytes, then: rest)
    }

    /// 408 for a head that never completed (no request to answer): the connection closes once
    /// it is out.
    func writeHeaderTimeout() {
        let channel = encoder.channel
        encoder.writeAndFlush(NIOAny(Self.headerTimeoutBytes())).whenComplete { _ in channel.close(promise: nil) }
    }

    private func send(_ bytes: ByteBuffer, then body: ByteBuffer?) {
        if let body {
            encoder.write(NIOAny(bytes), promise: nil)
            encoder.writeAndFlush(NIOAny(body), promise: nil)
        } else {
            encoder.writeAndFlush(NIOAny(bytes), promise: nil)
        }
    }

    /// A buffered reply's bytes: the head (a `WireHead`) with the body behind it when it is
    /// small, else the body apart; nothing of the body for `HEAD`.
    static func bytes(_ reply: ProxyReply, body: ByteBuffer, version: HTTPVersion, isHead: Bool,
                      keepAlive: Bool) -> (head: ByteBuffer, body: ByteBuffer?) {
        let head = WireHead(.status(version, reply.status), fields: reply.headers,
                            omitting: keepAlive ? WireHead.lengthField : WireHead.lengthAndConnectionFields,
                            contentLength: body.readableBytes, closes: !keepAlive)
        let inline = !isHead && body.readableBytes <= inlineBodyBytes
        var bytes = head.bytes(followedBy: inline ? body.readableBytes : 0)
        if isHead || body.readableBytes == 0 { return (bytes, nil) }
        guard inline else { return (bytes, body) }
        bytes.writeImmutableBuffer(body)
        return (bytes, nil)
    }

    private static func headerTimeoutBytes() -> ByteBuffer {
        let body = #"{"error":"request header timed out"}"#
        let head = WireHead(.status(.http1_1, 408), fields: ["Content-Type": "application/json"], contentLength: body.utf8.count, closes: true)
        var bytes = head.bytes(followedBy: body.utf8.count)
        bytes.writeString(body)
        return bytes
    }
}

// MARK: - From a request's work

extension ReplyWriter {
    /// Writes a reply from a request's work (off the event loop, or a body that streams),
    /// awaiting each write.
    ///
    /// - Returns: `false` when the connection failed mid-reply or must not be reused (it is
    ///   then closed).
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
                return true
            case .upstream(let body):
                try await channel.writeAndFlush(HTTPServerResponsePart.head(head)).get()
                return try await writeUpstreamBody(body, isHead: isHead, to: channel)
            case .events(let stream):
                head.headers.remove(name: "Content-Length")
                try await channel.writeAndFlush(HTTPServerResponsePart.head(head)).get()
                await writeEvents(stream.stream, to: channel)
                return false
            }
        } catch {
            channel.close(promise: nil)
            return false
        }
    }

    /// Relays the upstream's body; an upstream that breaks off closes the connection (the
    /// client sees a cut reply, never a shorter "complete" one).
    private static func writeUpstreamBody(_ body: UpstreamBody, isHead: Bool, to channel: any Channel) async throws -> Bool {
        do {
            for try await chunk in body where !isHead {
                try await channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(chunk))).get()
            }
        } catch {
            channel.close(promise: nil)
            return false
        }
        try await channel.writeAndFlush(HTTPServerResponsePart.end(nil)).get()
        return true
    }

    /// Relays Server-Sent Events until the stream ends, the client goes away, or a graceful
    /// shutdown begins (the stream may stay quiet for long); then ends the reply and closes.
    private static func writeEvents(_ stream: AsyncStream<ByteBuffer>, to channel: any Channel) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await chunk in stream {
                    guard (try? await channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(chunk))).get()) != nil else { return }
                }
            }
            group.addTask { try? await channel.closeFuture.get() }
            // Returns at a graceful shutdown, or throws when cancelled.
            group.addTask { try? await gracefulShutdown() }
            await group.next()
            group.cancelAll()
            // Not awaited: a subscriber that stopped reading must not hold the shutdown. Closing
            // fails a pending chunk write and ends the `closeFuture` child.
            channel.writeAndFlush(HTTPServerResponsePart.end(nil), promise: nil)
            channel.close(promise: nil)
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
