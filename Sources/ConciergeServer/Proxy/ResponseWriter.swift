import NIOCore
import NIOHTTP1
import ServiceLifecycle

/// Writes a ``ProxyReply`` to a channel from a request's work (off the event loop),
/// streaming bodies with back-pressure: each chunk's write completes before the next is read.
enum ResponseWriter {
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
