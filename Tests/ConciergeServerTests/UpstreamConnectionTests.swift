import ConciergeCore
import NIOCore
import NIOEmbedded
import NIOHTTP1
import Testing

@testable import ConciergeServer

/// One upstream connection's pipeline (``UpstreamConnection/configure(_:tls:)``) on an
/// `EmbeddedChannel`: plain replies read by the ``PlainReplyReader``, the rest by NIO's
/// decoder; compared with a pipeline of NIO's decoder alone over a grid of replies and reads.
@Suite("Upstream connection: plain replies, NIO's decoder for the rest")
struct UpstreamConnectionTests {
    /// The channel (connected, so active) and its connection handler.
    static func connection() throws -> (EmbeddedChannel, UpstreamConnection) {
        let channel = EmbeddedChannel()
        try UpstreamConnection.configure(channel, tls: nil)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 8)).wait()
        return (channel, try channel.pipeline.syncOperations.handler(type: UpstreamConnection.self))
    }

    /// The pipeline before the plain reader: NIO's decoder alone, told each request's method
    /// by the request head's write through it.
    static func decoderOnly() throws -> (EmbeddedChannel, UpstreamConnection) {
        let channel = EmbeddedChannel()
        let connection = UpstreamConnection()
        try channel.pipeline.syncOperations.addHandler(UpstreamWireWriter())
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes)))
        try channel.pipeline.syncOperations.addHandler(connection)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 8)).wait()
        return (channel, connection)
    }

    static func request(_ method: String, _ target: String) throws -> UpstreamWireRequest {
        try UpstreamWireRequest.encode(method: method, target: target, authority: "origin.test", headers: [:], body: nil)
    }

    /// What each exchange ended with, as text: `200 [fields] body keep-alive|close` or `failed`.
    final class Ended {
        var outcomes: [String] = []

        func record(_ outcome: UpstreamConnection.Outcome) {
            switch outcome {
            case .response(let response, let keepAlive):
                let fields = response.headers.map { "\($0.name)=\($0.value)" }.joined(separator: "|")
                outcomes.append("\(response.status) [\(fields)] \(String(buffer: response.body)) \(keepAlive ? "keep-alive" : "close")")
            case .failed:
                outcomes.append("failed")
            }
        }
    }

    static func written(_ channel: EmbeddedChannel) throws -> String {
        var text = ""
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { text += String(buffer: buffer) }
        return text
    }

    static func reader(_ channel: EmbeddedChannel) throws -> PlainReplyReader {
        try channel.pipeline.syncOperations.handler(type: PlainReplyReader.self)
    }

    @Test("a reply to HEAD ends at its head though it announces a length; the next GET reads its body; only the request bytes go out")
    func headThenGet() throws {
        let (channel, connection) = try Self.connection()
        let ended = Ended()
        connection.execute(try Self.request("HEAD", "/a"), maxBody: 1 << 20) { ended.record($0) }
        try channel.writeInbound(ByteBuffer(string: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"))
        connection.execute(try Self.request("GET", "/b"), maxBody: 1 << 20) { ended.record($0) }
        try channel.writeInbound(ByteBuffer(string: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
        #expect(ended.outcomes == ["200 [Content-Length=5]  keep-alive", "200 [Content-Length=2] ok keep-alive"])
        #expect(try Self.written(channel) == "HEAD /a HTTP/1.1\r\nHost: origin.test\r\n\r\nGET /b HTTP/1.1\r\nHost: origin.test\r\n\r\n")
        #expect(try Self.reader(channel).readsPlainly)
        _ = try? channel.finish()
    }

    @Test("bytes after a plain reply's end that no request asked for: that reply is the connection's last, the bytes answer nothing")
    func bytesAfterPlainReply() throws {
        let (channel, connection) = try Self.connection()
        let ended = Ended()
        let second = try Self.request("GET", "/second")
        connection.execute(try Self.request("GET", "/first"), maxBody: 1 << 20) { outcome in
            ended.record(outcome)
            // As the pool does: a connection that stays open takes the waiting request.
            if case .response(_, keepAlive: true) = outcome { connection.execute(second, maxBody: 1 << 20) { ended.record($0) } }
        }
        let bytes = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst" + "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
        try channel.writeInbound(ByteBuffer(string: bytes))
        #expect(ended.outcomes == ["200 [Content-Length=5] first close"])
        _ = try? channel.finish()
    }

    @Test("a request sent from the end of a reply the decoder read is not answered by bytes that came with that reply: unsolicited, the connection fails")
    func bytesAfterDecodedReply() throws {
        let (channel, connection) = try Self.connection()
        let ended = Ended()
        // A chunked reply first: from then on NIO's decoder reads this connection's replies.
        connection.execute(try Self.request("GET", "/chunked"), maxBody: 1 << 20) { ended.record($0) }
        try channel.writeInbound(ByteBuffer(string: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"))
        #expect(try !Self.reader(channel).readsPlainly)
        let second = try Self.request("GET", "/second")
        connection.execute(try Self.request("GET", "/first"), maxBody: 1 << 20) { outcome in
            ended.record(outcome)
            connection.execute(second, maxBody: 1 << 20) { ended.record($0) }
        }
        let bytes = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst" + "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"
        _ = try? channel.writeInbound(ByteBuffer(string: bytes))
        #expect(ended.outcomes == ["200 [Transfer-Encoding=chunked] ok keep-alive", "200 [Content-Length=5] first keep-alive", "failed"])
        #expect(!channel.isActive)
        _ = try? channel.finish()
    }

    @Test("bytes before any request: unsolicited, the connection closes")
    func bytesBeforeRequest() throws {
        let (channel, _) = try Self.connection()
        _ = try? channel.writeInbound(ByteBuffer(string: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
        #expect(!channel.isActive)
        _ = try? channel.finish()
    }

    @Test("a head longer than PlainReplyHead.maxBytes goes to the decoder, whole or cut: the same exchanges as the decoder alone")
    func longHead() throws {
        let field = "X-Long: " + String(repeating: "a", count: PlainReplyHead.maxBytes) + "\r\n"
        let bytes = Array("HTTP/1.1 200 OK\r\n\(field)Content-Length: 2\r\n\r\nok".utf8)
        for cuts in [[], [100], [PlainReplyHead.maxBytes - 1], [PlainReplyHead.maxBytes + 1], [bytes.count - 3]] {
            let expected = try Self.run(Self.decoderOnly, method: "GET", reply: bytes, cuts: cuts)
            let actual = try Self.run(Self.connection, method: "GET", reply: bytes, cuts: cuts)
            #expect(actual.outcomes == expected.outcomes, "cut at \(cuts)")
            #expect(actual.plain == false)
        }
    }

    /// Replies to compare: plain ones and every kind of reply the reader leaves to the decoder.
    static let replies: [(method: String, bytes: String)] = [
        ("GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Thu, 26 Nov 2026 10:00:00 GMT\r\nContent-Type: application/json\r\ncontent-length: 11\r\nConnection: keep-alive\r\nCache-Control: max-age=60\r\n\r\n{\"code\":0}\n"),
        ("GET", "HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n"),
        ("GET", "HTTP/1.1 503 Service Unavailable\r\nX-Empty:\r\nX-Spaces:   a  b\r\nX-Tab:\tt\tu\r\nContent-Length: 1\r\n\r\nx"),
        ("GET", "HTTP/1.1 200 OK\r\nContent-Length:  3\r\nConnection: close\r\n\r\nabc"),
        ("GET", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nConnection: CLOSE\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n"),
        ("GET", "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n"),
        ("HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"),
        ("GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
        ("GET", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nokk"),
        ("GET", "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok"),
        ("GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Fold: a\r\n b\r\n\r\nok"),
        ("GET", "HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 200 OK\r\nX-A : x\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok"),
        ("GET", "HTTP/1.1 200 OK\r\nX-Obs: caf\u{E9}\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 600 Odd\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\nok\r\n0\r\n\r\n"),
        ("GET", "HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "garbage\r\n\r\n"),
        ("HEAD", "HTTP/1.1 200 OK\r\nX-Content-Length: 5\r\n\r\n"),
        ("GET", "HTTP/1.1 200 OK\r\nProxy-Connection: close\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.0 200 OK\r\nConnection: Upgrade ,Keep-Alive\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 200 OK\r\nConnection: keep-alive,\tCLOSE\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.0 200 OK\r\nConnection: keep-alive\t\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 200 OK\r\nX-Trailing: a \r\nContent-Length: 2\r\n\r\nok"),
        ("GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\t\r\n\r\nok"),
    ]

    /// Whether the reader reads `reply` itself (else the decoder does).
    static func isPlain(_ index: Int) -> Bool { index < 12 }

    /// Feeds `reply` (cut at `cuts`) for one request and then a plain reply for a second, to the
    /// pipeline `make` builds; what both exchanges ended with, and whether the reader (if any)
    /// still reads plainly.
    static func run(_ make: () throws -> (EmbeddedChannel, UpstreamConnection), method: String, reply: [UInt8],
                    cuts: [Int]) throws -> (outcomes: [String], plain: Bool?) {
        let (channel, connection) = try make()
        let ended = Ended()
        connection.execute(try request(method, "/one"), maxBody: 1 << 20) { ended.record($0) }
        var start = 0
        for cut in cuts + [reply.count] where cut > start {
            _ = try? channel.writeInbound(ByteBuffer(bytes: reply[start..<cut]))
            start = cut
        }
        // A second request only where the pool would send one: after a reply that keeps the
        // connection open.
        if channel.isActive, ended.outcomes.count == 1, ended.outcomes[0].hasSuffix("keep-alive") {
            connection.execute(try request("GET", "/two"), maxBody: 1 << 20) { ended.record($0) }
            _ = try? channel.writeInbound(ByteBuffer(string: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\ntwo"))
        }
        let plain = try? reader(channel).readsPlainly
        _ = try? channel.finish()
        return (ended.outcomes, plain)
    }

    @Test("every reply of the grid, whole, cut at each byte, and byte by byte: the same exchanges as NIO's decoder alone; the plain ones read by the reader")
    func sameAsDecoderAlone() throws {
        var compared = 0
        for (index, reply) in Self.replies.enumerated() {
            let bytes = Array(reply.bytes.utf8)
            var cutsList: [[Int]] = [[], Array(1..<bytes.count)]
            for cut in 1..<bytes.count { cutsList.append([cut]) }
            for cuts in cutsList {
                let expected = try Self.run(Self.decoderOnly, method: reply.method, reply: bytes, cuts: cuts)
                let actual = try Self.run(Self.connection, method: reply.method, reply: bytes, cuts: cuts)
                #expect(actual.outcomes == expected.outcomes, "reply \(index) cut at \(cuts.count > 1 ? "every byte" : "\(cuts)")")
                if Self.isPlain(index) {
                    #expect(actual.plain == true, "reply \(index) should be read plainly (cuts \(cuts.count))")
                    #expect(expected.outcomes.first.map { $0 != "failed" } == true, "reply \(index): \(expected.outcomes)")
                } else {
                    #expect(actual.plain != true, "reply \(index) should go to the decoder")
                }
                compared += 1
            }
        }
        #expect(compared > 1_000)
    }
}
