import ConciergeCore
import Foundation
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTP1
import Testing

@testable import ConciergeServer

/// Requests recognised by their bytes (``RepeatedHitHandler``): a read that repeats a head
/// answered from the hot tier is answered without the decoder, and only when that cannot
/// change what any byte means.
@Suite("Repeated hits recognised by their bytes")
struct RepeatedHitTests {
    static let head = "GET /items?a=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\n\r\n"

    @Test("a read ends at its only blank line: CRLF and LF line ends; anything before or after it, or none, is not that")
    func blankLine() {
        func check(_ text: String) -> Bool { RequestHeadBoundary.endsAtItsOnlyBlankLine(ByteBuffer(string: text)) }
        #expect(check(Self.head))
        #expect(check("GET / HTTP/1.1\nHost: h\n\n"))
        #expect(check("GET / HTTP/1.1\r\nHost: h\n\r\n"))
        #expect(!check("GET / HTTP/1.1\r\nHost: h\r\n"), "no blank line yet")
        #expect(!check("GET / HTTP/1.1\r\nHost: h\r\n\r"), "cut inside the blank line")
        #expect(!check(Self.head + "G"), "a next request begins")
        #expect(!check(Self.head + Self.head), "two requests")
        #expect(!check("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nab"), "a body follows")
        #expect(!check("\n\n" + Self.head), "a blank line first")
        #expect(!check(""))
    }

    @Test("the machine answers a recognised read only when idle with nothing waiting and the client still sending")
    func machineGate() {
        let limits = ProxyConnectionStateMachine.Limits(headerTimeout: .seconds(10), bodyTimeout: .seconds(10), maxBodyBytes: 1 << 20)
        var machine = ProxyConnectionStateMachine(limits: limits)
        var replayed = machine.hitReplayed(limits: limits, now: .now())
        #expect(!replayed, "not active yet")
        machine.channelActive(now: .now())
        replayed = machine.hitReplayed(limits: limits, now: .now())
        #expect(replayed)
        #expect(machine.served == 1)
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: "/a", headers: ["Host": "h"])
        _ = machine.headReceived(head, streamsBody: false, limits: limits, now: .now(), started: .now)
        replayed = machine.hitReplayed(limits: limits, now: .now())
        #expect(!replayed, "a request is being read")
        guard case .dispatch(let request, _, _) = machine.endReceived(now: .now()) else {
            Issue.record("no dispatch")
            return
        }
        replayed = machine.hitReplayed(limits: limits, now: .now())
        #expect(!replayed, "a reply is owed")
        _ = machine.admit(.part(.head(head)))
        _ = machine.replyFinished(request: request.id, keepAlive: true, now: .now())
        replayed = machine.hitReplayed(limits: limits, now: .now())
        #expect(!replayed, "a pipelined request waits")
        while machine.nextQueued() != nil {}
        _ = machine.inputEnded()
        #expect(!machine.canReplayHit, "the client half-closed")
    }

    // MARK: - Over the pipeline's real stages and cache

    func fastHit(_ fixture: StageFixture, _ target: String) -> (EncodedHit, HitMemo.Recipe?)? {
        let incoming = IncomingRequest(method: "GET", target: target, headers: ["Host": "127.0.0.1"])
        if case .encodedHit(let hit, let recipe) = fixture.pipeline.plan(incoming, encoded: true) { return (hit, recipe) }
        return nil
    }

    /// The hit of `/items?a=1` remembered under `bytes`, as the handler remembers it.
    func remembered(_ fixture: StageFixture, _ bytes: ByteBuffer) async throws -> EncodedHit {
        _ = await fixture.get("/items?a=1")
        let (hit, recipe) = try #require(fastHit(fixture, "/items?a=1"))
        let incoming = IncomingRequest(method: "GET", target: "/items?a=1", headers: ["Host": "127.0.0.1"])
        fixture.pipeline.rememberReplay(bytes, incoming: incoming, recipe: try #require(recipe))
        return hit
    }

    @Test("the same bytes give the same hit; one byte more, less or changed gives none")
    func sameBytes() async throws {
        let fixture = try StageFixture(encodedHits: true) { FastPathMemoTests.items($0) }
        let bytes = ByteBuffer(string: Self.head)
        let hit = try await remembered(fixture, bytes)
        let replayed = try #require(fixture.pipeline.replayedHit(of: bytes))
        #expect(replayed.hit.head == hit.head && replayed.hit.body == hit.body)
        #expect(replayed.incoming.target == "/items?a=1")
        #expect(fixture.pipeline.replayedHit(of: ByteBuffer(string: Self.head.replacingOccurrences(of: "a=1", with: "a=2"))) == nil)
        #expect(fixture.pipeline.replayedHit(of: ByteBuffer(string: Self.head + "\r\n")) == nil)
        #expect(fixture.pipeline.replayedHit(of: ByteBuffer(string: String(Self.head.dropLast()))) == nil)
        #expect(fixture.transport.calls(to: "/items") == 1)
        await fixture.finish()
    }

    @Test("after a login, a reload or an invalidation the remembered bytes give no hit")
    func stateChanges() async throws {
        let bytes = ByteBuffer(string: Self.head)
        let login = try StageFixture(encodedHits: true) { FastPathMemoTests.items($0) }
        _ = try await remembered(login, bytes)
        try await login.login("bob", access: "token-bob")
        #expect(login.pipeline.replayedHit(of: bytes) == nil)
        await login.finish()

        let reload = try StageFixture(encodedHits: true) { FastPathMemoTests.items($0) }
        _ = try await remembered(reload, bytes)
        reload.runtime.replace(with: try ConfigLoader.parse(yaml: StageFixture.yaml + "\nstorage:\n  path: \(reload.directory.path)/c.sqlite\n"))
        #expect(reload.pipeline.replayedHit(of: bytes) == nil)
        await reload.finish()

        let invalidated = try StageFixture(encodedHits: true) { FastPathMemoTests.items($0) }
        _ = try await remembered(invalidated, bytes)
        #expect(try await invalidated.cache.invalidate(.endpoints(["items"], scope: .everyone)) == 1)
        #expect(invalidated.pipeline.replayedHit(of: bytes) == nil)
        await invalidated.finish()
    }

    // MARK: - On a connection (EmbeddedChannel, the listener's handlers, the real pipeline)

    /// A connection through ``ProxyListener/configureConnection(_:responder:requests:)`` to the
    /// fixture's pipeline; `/items?a=1` is in the hot tier before it opens.
    final class Connection {
        let channel = EmbeddedChannel()
        let stats: ProxyStats
        let repeated: RepeatedHitHandler

        init(_ fixture: StageFixture) throws {
            stats = fixture.stats
            let context = ProxyServerContext(pipeline: fixture.pipeline, stats: fixture.stats,
                                             requestLog: RequestLog(logger: .init(label: "test") { _ in SwiftLogNoOpLogHandler() }))
            try ProxyListener.configureConnection(channel.pipeline.syncOperations, responder: context, requests: RequestWorkQueue())
            repeated = try channel.pipeline.syncOperations.handler(type: RepeatedHitHandler.self)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 40000)).wait()
        }

        func send(_ text: String) throws -> String {
            try channel.writeInbound(ByteBuffer(string: text))
            channel.embeddedEventLoop.run()
            var written = ""
            while let part = try channel.readOutbound(as: IOData.self) {
                if case .byteBuffer(let buffer) = part { written += String(buffer: buffer) }
            }
            return written
        }
    }

    static func replies(in text: String) -> Int { text.components(separatedBy: "HTTP/1.1 ").count - 1 }

    /// `body` with a connection to a fixture's pipeline, `/items?a=1` in the hot tier; both
    /// closed after it, whether it throws or not.
    func onConnection(_ body: (StageFixture, Connection) async throws -> Void) async throws {
        let fixture = try StageFixture(encodedHits: true) { FastPathMemoTests.items($0) }
        _ = await fixture.get("/items?a=1")
        let connection = try Connection(fixture)
        do {
            try await body(fixture, connection)
        } catch {
            _ = try? connection.channel.finish()
            await fixture.finish()
            throw error
        }
        _ = try? connection.channel.finish()
        await fixture.finish()
    }

    @Test("a head repeated in reads of its own is answered without the decoder, the same reply, counted and logged as a hit")
    func repeatedReads() async throws {
        try await onConnection { fixture, connection in
            let hitsBefore = fixture.stats.value(.hits)
            let first = try connection.send(Self.head)
            #expect(first.hasPrefix("HTTP/1.1 200 OK") && first.contains("X-Cache: HIT"))
            #expect(connection.repeated.repeatsAnswered == 0, "the first is parsed")
            for _ in 0..<3 { #expect(try connection.send(Self.head) == first) }
            #expect(connection.repeated.repeatsAnswered == 3)
            #expect(fixture.stats.value(.hits) - hitsBefore == 4)
            #expect(fixture.transport.calls(to: "/items") == 1)
        }
    }

    @Test("a plain head in a read of its own is read without the decoder; other reads go to it, and once it holds a request's bytes, everything does")
    func plainHeads() async throws {
        try await onConnection { fixture, connection in
            let first = try connection.send(Self.head)
            #expect(first.hasPrefix("HTTP/1.1 200 OK") && first.contains("X-Cache: HIT"))
            #expect(connection.repeated.plainHeadsRead == 1)
            #expect(connection.repeated.decoderAtBoundary)
            // White space ending a value is not plain: the decoder reads it, the same request.
            let unusual = try connection.send(Self.head.replacingOccurrences(of: "application/json\r\n", with: "application/json \r\n"))
            #expect(unusual.hasPrefix("HTTP/1.1 200 OK") && unusual.contains("X-Cache: HIT"))
            #expect(connection.repeated.plainHeadsRead == 1)
            #expect(connection.repeated.decoderAtBoundary)
            // Two heads in one read: the decoder's, both answered in order; after that, the
            // decoder reads every read (a plain head too).
            let both = try connection.send(Self.head + "GET /items?a=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            #expect(Self.replies(in: both) == 2, "\(both)")
            #expect(!connection.repeated.decoderAtBoundary)
            let cut = "GET /items?a=1 HTTP/1.1\r\nHo"
            #expect(try connection.send(cut) == "")
            #expect(try connection.send("st: 127.0.0.1\r\n\r\n").hasPrefix("HTTP/1.1 200 OK"))
            #expect(try connection.send(Self.head).hasPrefix("HTTP/1.1 200 OK"))
            #expect(connection.repeated.plainHeadsRead == 1)
            #expect(connection.repeated.repeatsAnswered == 0)
            #expect(fixture.transport.calls(to: "/items") == 1)
        }
    }

    @Test("a plain head cut short is the decoder's: a head completed by the next read is one request, not two")
    func plainHeadCut() async throws {
        try await onConnection { _, connection in
            #expect(try connection.send("GET /items?a=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n") == "")
            let reply = try connection.send("Accept: application/json\r\n\r\n")
            #expect(Self.replies(in: reply) == 1 && reply.contains("X-Cache: HIT"), "\(reply)")
            #expect(connection.repeated.plainHeadsRead == 0)
            #expect(!connection.repeated.decoderAtBoundary)
        }
    }

    @Test("a head split over two reads leaves the decoder's state unknown: nothing more on the connection is recognised")
    func splitHead() async throws {
        try await onConnection { fixture, connection in
            let first = try connection.send(Self.head)
            let cut = Self.head.index(Self.head.startIndex, offsetBy: 20)
            #expect(try connection.send(String(Self.head[..<cut])) == "")
            #expect(try connection.send(String(Self.head[cut...])) == first)
            #expect(!connection.repeated.decoderAtBoundary)
            #expect(try connection.send(Self.head) == first)
            #expect(connection.repeated.repeatsAnswered == 0)
        }
    }

    @Test("a remembered head after a partial request line is parsed with it (refused), never answered as a hit")
    func noSmuggling() async throws {
        try await onConnection { fixture, connection in
            _ = try connection.send(Self.head)
            _ = try connection.send(Self.head)
            #expect(connection.repeated.repeatsAnswered == 1, "remembered")
            #expect(try connection.send("GET /x HTTP/1.1\r\n") == "")
            let reply = try connection.send(Self.head)
            #expect(reply.hasPrefix("HTTP/1.1 400"), "the decoder read both reads as one malformed head: \(reply)")
            #expect(!reply.contains("X-Cache: HIT"))
            #expect(connection.repeated.repeatsAnswered == 1)
        }
    }

    @Test("pipelined heads in one read are parsed and answered in order, and not remembered")
    func pipelined() async throws {
        try await onConnection { fixture, connection in
            let one = try connection.send(Self.head)
            let two = try connection.send(Self.head + Self.head)
            #expect(two == one + one)
            #expect(Self.replies(in: two) == 2)
            #expect(!connection.repeated.decoderAtBoundary)
            #expect(try connection.send(Self.head + Self.head) == one + one)
            #expect(connection.repeated.repeatsAnswered == 0)
        }
    }

    @Test("after a reload the remembered head is parsed again and answered under the new configuration")
    func reload() async throws {
        try await onConnection { fixture, connection in
            _ = try connection.send(Self.head)
            _ = try connection.send(Self.head)
            #expect(connection.repeated.repeatsAnswered == 1)
            let bumped = StageFixture.yaml + "\ncache:\n  version: 2\nstorage:\n  path: \(fixture.directory.path)/c.sqlite\n"
            fixture.runtime.replace(with: try ConfigLoader.parse(yaml: bumped))
            _ = await fixture.get("/items?a=1")  // the new version's entry
            let reply = try connection.send(Self.head)
            #expect(reply.contains("X-Cache: HIT"))
            #expect(connection.repeated.repeatsAnswered == 1, "parsed: the recipe was the old configuration's")
            #expect(fixture.transport.calls(to: "/items") == 2)
        }
    }
}

/// The argument ``RepeatedHitHandler`` rests on, checked against NIO's decoder itself: a read
/// that ends at its only blank line, from which a decoder between requests delivered one head,
/// its end and nothing else, leaves that decoder between requests (the next request is read as
/// a request of its own).
@Suite("Repeated hits: the decoder's boundary")
struct RepeatedHitBoundaryTests {
    final class Log {
        var items: [String] = []
    }

    final class Parts: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        let log: Log

        init(log: Log) {
            self.log = log
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                let goesOn = RequestHeadBoundary.decodingGoesOn(after: head)
                log.items.append(goesOn ? "head \(head.uri)" : "last head \(head.uri)")
            case .body: log.items.append("body")
            case .end: log.items.append("end")
            }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            log.items.append("error")
        }
    }

    /// What the decoder delivers for `reads`, one list per read.
    static func decode(_ reads: [String]) throws -> [[String]] {
        let channel = EmbeddedChannel()
        let log = Log()
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))
        try channel.pipeline.syncOperations.addHandler(Parts(log: log))
        var delivered: [[String]] = []
        for read in reads {
            log.items.removeAll()
            do { try channel.writeInbound(ByteBuffer(string: read)) } catch { log.items.append("error") }
            delivered.append(log.items)
        }
        _ = try? channel.finish()
        return delivered
    }

    static let probe = "GET /probe HTTP/1.1\r\nHost: h\r\n\r\n"

    @Test("over heads with every line end, stray CR and LF, leading blank lines, framing fields and trailing bytes")
    func boundary() throws {
        let leads = ["", "\r\n", "\n"]
        let lines = ["GET /a HTTP/1.1", "GET /a?x=%ff HTTP/1.1", "GET /a HTTP/1.0", "GET  /a HTTP/1.1", "GET /a HTTP/1.1\r"]
        let fields = [[], ["Host: h"], ["Host: h", "Content-Length: 0"], ["Host: h", "Content-Length: 3"],
                      ["Host: h", "Transfer-Encoding: chunked"], ["Host: h", "X: a\rb"], ["Host: h", "X: a", " folded"],
                      ["Host: h", "Connection: close"], ["Host: h", "Connection: keep-alive"],
                      ["Host: h", "Connection: upgrade", "Upgrade: websocket"], ["Host: h", "Upgrade: h2c"]]
        let ends = ["\r\n", "\n"]
        let blanks = ["\r\n", "\n", "\r\r\n"]
        let tails = ["", "abc", "0\r\n\r\n", "G", "\r\n", "GET /b HTTP/1.1\r\n\r\n"]
        var premises = 0, excluded = 0
        for lead in leads {
            for line in lines {
                for fieldSet in fields {
                    for end in ends {
                        for blank in blanks {
                            for tail in tails {
                                let read = lead + ([line] + fieldSet).map { $0 + end }.joined() + blank + tail
                                guard RequestHeadBoundary.endsAtItsOnlyBlankLine(ByteBuffer(string: read)) else { continue }
                                let delivered = try Self.decode([read, Self.probe])
                                guard delivered[0].count == 2, delivered[0][1] == "end" else { continue }
                                guard delivered[0][0].hasPrefix("head ") else {
                                    if delivered[0][0].hasPrefix("last head ") { excluded += 1 }
                                    continue
                                }
                                premises += 1
                                #expect(delivered[1] == ["head /probe", "end"], "after \(read.debugDescription)")
                            }
                        }
                    }
                }
            }
        }
        #expect(premises > 20, "the grid must reach the premise often: \(premises)")
        #expect(excluded > 20, "and requests after which the decoder stops: \(excluded)")
    }
}
