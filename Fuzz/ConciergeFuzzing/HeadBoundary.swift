import ConciergeCore
import NIOCore
import NIOEmbedded
import NIOHTTP1

extension FuzzTargets {
    /// What the proxy listener's repeated hits rest on, against NIO's request decoder: reads
    /// go to a decoder, and as long as every read ended at its only blank line
    /// (``RequestHeadBoundary/endsAtItsOnlyBlankLine(_:)``) and delivered one head after which
    /// decoding goes on, its end, and nothing else, the decoder must be between requests: a
    /// next request is read as a request of its own. The first time a read does not show that,
    /// nothing more is checked (the listener stops recognising reads there too).
    ///
    /// Input: the first byte's bits cut the rest into up to four reads.
    public static func headBoundary(_ data: [UInt8]) {
        guard let cuts = data.first else { return }
        let rest = Array(data.dropFirst())
        var reads: [[UInt8]] = []
        var from = 0
        for shift in stride(from: 0, to: 6, by: 2) where from < rest.count {
            let length = (Int(cuts >> shift) & 3) == 0 ? rest.count - from : (rest.count - from + 1) / 2
            reads.append(Array(rest[from..<from + max(1, length)]))
            from += max(1, length)
        }
        if from < rest.count { reads.append(Array(rest[from...])) }

        let channel = EmbeddedChannel()
        let parts = DeliveredParts()
        guard (try? channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))) != nil,
              (try? channel.pipeline.syncOperations.addHandler(parts)) != nil else { return }
        defer { _ = try? channel.finish() }
        func deliver(_ bytes: [UInt8]) -> [DeliveredParts.Part] {
            parts.seen.removeAll()
            do { try channel.writeInbound(ByteBuffer(bytes: bytes)) } catch { parts.seen.append(.error) }
            return parts.seen
        }
        for read in reads {
            let alone = read.withUnsafeBytes { RequestHeadBoundary.endsAtItsOnlyBlankLine($0) }
            let seen = deliver(read)
            guard alone, seen.count == 2, case .head(let goesOn) = seen[0], goesOn, case .end = seen[1] else { return }
        }
        let probe = deliver(Array("GET /probe HTTP/1.1\r\nHost: h\r\n\r\n".utf8))
        guard probe.count == 2, case .head = probe[0], case .end = probe[1], parts.lastURI == "/probe" else {
            preconditionFailure("after reads that each held one whole request, the decoder was not between requests: \(reads)")
        }
    }

    /// What the decoder delivered, part by part.
    final class DeliveredParts: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        enum Part {
            /// `goesOn`: ``RequestHeadBoundary/decodingGoesOn(after:)``.
            case head(goesOn: Bool)
            case body, end, error
        }

        var seen: [Part] = []
        var lastURI = ""

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                lastURI = head.uri
                seen.append(.head(goesOn: RequestHeadBoundary.decodingGoesOn(after: head)))
            case .body: seen.append(.body)
            case .end: seen.append(.end)
            }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            seen.append(.error)
        }
    }
}
