import ConciergeCore
import NIOCore
import NIOHTTP1

/// The one writer of a proxy connection's replies on its event loop: every reply there goes
/// out through it, as bytes below the response encoder, with one flush: hits as ready bytes
/// (``write(_:)``), buffered replies of misses and local answers
/// (``write(_:body:version:isHead:keepAlive:)``) and the header-timeout 408
/// (``writeHeaderTimeout()``). A reply whose body streams (an upstream's body, Server-Sent
/// Events), or one a task finishes off the connection's loop, is written by
/// ``ResponseWriter``, which awaits each write.
///
/// Three methods rather than one taking an enum: a hit passed into an enum's payload would be
/// copied (a retain and release of each of its buffers) on the path that costs the least.
struct ReplyWriter {
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
    func write(_ reply: ProxyReply, body: ByteBuffer, version: HTTPVersion, isHead: Bool, keepAlive: Bool) {
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

extension HTTPMethod {
    /// The method as it appeared on the wire (NIO spells `M-SEARCH` as `MSEARCH`).
    var wireName: String {
        if case .MSEARCH = self { return "M-SEARCH" }
        return rawValue
    }
}
