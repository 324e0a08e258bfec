import ConciergeCore
import NIOCore
import NIOEmbedded
import NIOHTTP1

extension FuzzTargets {
    /// What the upstream side's plain reader rests on, against NIO's response decoder: a head
    /// ``PlainReplyHead/parse(_:toHEAD:)`` reads as complete is read by the decoder the same way
    /// (version, status, every field name and value in order, keep-alive), and the decoder then takes the
    /// body of the length the plain head says, ends the reply, and reports no error. A head the
    /// plain parser calls unusual is the decoder's alone, and is not checked.
    ///
    /// Input: the first byte's low bit says whether the request was a `HEAD`; the rest is the
    /// reply's bytes (a body the input lacks is filled in).
    public static func plainReply(_ data: [UInt8]) {
        guard let flags = data.first else { return }
        let toHEAD = flags & 1 == 1
        let bytes = Array(data.dropFirst())
        guard case .complete(let plain, let length) = bytes.withUnsafeBytes({ PlainReplyHead.parse($0, toHEAD: toHEAD) }) else { return }

        let channel = EmbeddedChannel()
        let decoder = HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes)
        let parts = DecodedReply()
        guard (try? channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(decoder))) != nil,
              (try? channel.pipeline.syncOperations.addHandler(parts)) != nil else { return }
        defer { _ = try? channel.finish() }
        decoder.write(data: .head(HTTPRequestHead(version: .http1_1, method: toHEAD ? .HEAD : .GET, uri: "/")))
        // The body is filled in up to 64 KB; a longer one (a length of any size is plain) is
        // not sent, and the decoder must then have the head and be waiting for it.
        let whole = plain.bodyLength <= 1 << 16
        var reply = Array(bytes[..<length])
        if whole {
            let body = bytes[length...].prefix(plain.bodyLength)
            reply += body + Array(repeating: UInt8(ascii: "x"), count: plain.bodyLength - body.count)
        }
        do { try channel.writeInbound(ByteBuffer(bytes: reply)) } catch { parts.failed = true }

        guard !parts.failed, let head = parts.head else {
            preconditionFailure("a plain head the decoder refused: \(String(decoding: bytes[..<length], as: UTF8.self).debugDescription)")
        }
        let fields = head.headers.map { [$0.name, $0.value] }
        let plainFields = plain.headers.map { [$0.name, $0.value] }
        guard head.version == plain.version, Int(head.status.code) == plain.status, fields == plainFields,
              head.isKeepAlive == plain.keepAlive,
              whole ? parts.bodyBytes == plain.bodyLength && parts.ended : parts.bodyBytes == 0 && !parts.ended
        else {
            preconditionFailure("the decoder read a plain head otherwise: \(head) \(parts.bodyBytes) body bytes, ended \(parts.ended); plain \(plain)")
        }
    }

    /// One reply as NIO's decoder delivered it.
    final class DecodedReply: ChannelInboundHandler {
        typealias InboundIn = HTTPClientResponsePart
        var head: HTTPResponseHead?
        var bodyBytes = 0
        var ended = false
        var failed = false

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head): self.head = head
            case .body(let part): bodyBytes += part.readableBytes
            case .end: ended = true
            }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            failed = true
        }
    }
}
