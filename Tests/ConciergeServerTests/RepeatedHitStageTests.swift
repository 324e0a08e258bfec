import NIOCore
import NIOEmbedded
import NIOHTTP1
import Testing

@testable import ConciergeServer

/// ``RepeatedHitHandler`` alone, as a stage in front of NIO's request decoder: what the handler
/// behind the decoder receives for each kind of read, as typed messages (``RecognisedRead``,
/// or NIO's decoded parts). A recording handler stands where ``ProxyHTTPHandler`` does and
/// reports to the shared ``DecodedReadWatch`` as it does.
@Suite("RepeatedHitHandler as a stage before the decoder")
struct RepeatedHitStageTests {
    static let plain = "GET /items?a=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

    /// What reached the handler behind the decoder, in order.
    enum Received: Equatable {
        case repeatedRead(String, answered: Bool)
        case plainHead(String)
        case head(String)
        case body(String)
        case end
        case error(read: String?)
    }

    /// Stands behind the decoder: records what it receives, answers a repeated read when told
    /// to, and reports to the watch as ``ProxyHTTPHandler`` does.
    final class Recorder: ChannelInboundHandler, RecognisedReadReceiver {
        typealias InboundIn = HTTPServerRequestPart

        let watch: DecodedReadWatch
        var received: [Received] = []
        var answersRepeatedReads = false

        init(watch: DecodedReadWatch) {
            self.watch = watch
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let part = unwrapInboundIn(data)
            watch.count(part)
            switch part {
            case .head(let head): received.append(.head("\(head.method) \(head.uri)"))
            case .body(let bytes): received.append(.body(String(buffer: bytes)))
            case .end: received.append(.end)
            }
        }

        func receive(_ read: RecognisedRead, context: ChannelHandlerContext) -> Bool {
            switch read {
            case .repeated(let bytes):
                received.append(.repeatedRead(String(buffer: bytes), answered: answersRepeatedReads))
                return answersRepeatedReads
            case .plainHead(let head):
                watch.count(.head(head))
                watch.count(.end(nil))
                received.append(.plainHead("\(head.method) \(head.uri)"))
                return true
            }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            watch.errorSeen()
            received.append(.error(read: watch.input.map { String(buffer: $0) }))
        }
    }

    let channel = EmbeddedChannel()
    let stage: RepeatedHitHandler
    let recorder: Recorder

    init() throws {
        let watch = DecodedReadWatch { _, _, _ in }
        recorder = Recorder(watch: watch)
        stage = RepeatedHitHandler(receiver: recorder, watch: watch)
        try channel.pipeline.syncOperations.addHandler(stage)
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))
        try channel.pipeline.syncOperations.addHandler(recorder)
    }

    func read(_ text: String) throws -> [Received] {
        recorder.received = []
        try channel.writeInbound(ByteBuffer(string: text))
        return recorder.received
    }

    @Test("a plain head is handed on read, without the decoder, after a repeated read the receiver declined")
    func plainHead() throws {
        #expect(try read(Self.plain) == [.repeatedRead(Self.plain, answered: false), .plainHead("GET /items?a=1")])
        #expect(stage.plainHeadsRead == 1)
        #expect(stage.decoderAtBoundary)
        #expect(try read(Self.plain) == [.repeatedRead(Self.plain, answered: false), .plainHead("GET /items?a=1")])
        #expect(stage.plainHeadsRead == 2)
    }

    @Test("a repeated read the receiver answers is all it receives: no parts, and the decoder is still between requests")
    func answeredRead() throws {
        recorder.answersRepeatedReads = true
        #expect(try read(Self.plain) == [.repeatedRead(Self.plain, answered: true)])
        #expect(stage.repeatsAnswered == 1)
        #expect(stage.plainHeadsRead == 0)
        #expect(stage.decoderAtBoundary)
    }

    @Test("a head that is not plain goes to the decoder, which hands on its parts; a body leaves the decoder inside a request and nothing more is offered as repeated")
    func throughTheDecoder() throws {
        let delete = "DELETE /items/1 HTTP/1.1\r\nHost: h\r\n\r\n"
        #expect(try read(delete) == [.repeatedRead(delete, answered: false), .head("DELETE /items/1"), .end])
        #expect(stage.plainHeadsRead == 0, "not a plain head: the decoder read it")
        #expect(stage.decoderAtBoundary, "one head and its end from a read that ended at its only blank line")

        let post = "POST /items HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nab"
        #expect(try read(post) == [.repeatedRead(post, answered: false), .head("POST /items"), .body("ab"), .end])
        #expect(!stage.decoderAtBoundary, "the read did not end at its only blank line")
        recorder.answersRepeatedReads = true
        #expect(try read(Self.plain) == [.head("GET /items?a=1"), .end], "bytes to the decoder, no repeated read offered")
        #expect(stage.repeatsAnswered == 0)
    }

    @Test("a parser error reaches the next handler while the watch shows the read it was found in")
    func parserError() throws {
        let bad = "GET / HTTP/1.1\r\nHost: h\r\nBad Header\r\n\r\n"
        #expect(try read(bad) == [.repeatedRead(bad, answered: false), .error(read: bad)])
        #expect(!stage.decoderAtBoundary)
    }
}
