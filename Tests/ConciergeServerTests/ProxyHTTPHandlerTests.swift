import ConciergeCore
@testable import ConciergeServer
import NIOCore
import NIOEmbedded
import NIOHTTP1
import Synchronization
import Testing

/// ``ProxyHTTPHandler`` on an `EmbeddedChannel` behind NIO's real HTTP/1.1 server pipeline,
/// with a stub in place of the daemon: no socket, no upstream, and virtual time for the
/// timeouts. One behaviour per test.
@Suite("Proxy connection handler")
struct ProxyHTTPHandlerTests {
    static let host = "Host: 127.0.0.1\r\n"

    @Test("a head not complete within limits.header_timeout is answered 408, then the connection closes")
    func headerTimeout() throws {
        let connection = try EmbeddedProxyConnection(limits: "header_timeout: 2s")
        try connection.send("GET /fast/items HTTP/1.1\r\n" + Self.host)
        connection.advance(by: .milliseconds(1500))
        #expect(try connection.written().isEmpty)
        #expect(connection.isActive)
        connection.advance(by: .milliseconds(500))
        let reply = try connection.written()
        #expect(reply.hasPrefix("HTTP/1.1 408 Request Timeout\r\n"))
        #expect(reply.hasSuffix(#"{"error":"request header timed out"}"#))
        #expect(!connection.isActive)
        connection.finish()
    }

    @Test("a Content-Length above limits.max_body_bytes is 413 before any body is read, and the connection closes")
    func declaredBodyTooLarge() throws {
        let connection = try EmbeddedProxyConnection(limits: "max_body_bytes: 1KB")
        try connection.send("POST /slow/echo HTTP/1.1\r\n" + Self.host + "Content-Length: 5000\r\n\r\n")
        #expect(try connection.written().hasPrefix("HTTP/1.1 413 Payload Too Large\r\n"))
        #expect(!connection.isActive)
        #expect(connection.responder.fastPathCalls.isEmpty)
        connection.finish()
    }

    @Test("a header block above limits.max_header_bytes is 431, and the connection closes")
    func headerBlockTooLarge() throws {
        let connection = try EmbeddedProxyConnection(limits: "max_header_bytes: 1KB")
        try connection.send("GET /fast/items HTTP/1.1\r\n" + Self.host + "X-Filler: \(String(repeating: "f", count: 2000))\r\n\r\n")
        #expect(try connection.written().hasPrefix("HTTP/1.1 431 Request Header Fields Too Large\r\n"))
        #expect(!connection.isActive)
        #expect(connection.responder.fastPathCalls.isEmpty)
        connection.finish()
    }

    @Test("CONNECT is 405: Concierge is not a forward proxy")
    func connectRefused() throws {
        let connection = try EmbeddedProxyConnection()
        try connection.send("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
        // The handler writes a JSON body too; NIO's HTTP layers below it send a reply to CONNECT without one.
        #expect(try connection.written().hasPrefix("HTTP/1.1 405 Method Not Allowed\r\n"))
        #expect(!connection.isActive)
        #expect(connection.responder.fastPathCalls.isEmpty)
        connection.finish()
    }

    @Test("a keep-alive connection serves a second request after the first, and stays open")
    func keepAlive() throws {
        let connection = try EmbeddedProxyConnection()
        try connection.send("GET /fast/one HTTP/1.1\r\n" + Self.host + "\r\n")
        let first = try connection.written()
        #expect(first.hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(first.hasSuffix("fast /fast/one"))
        #expect(connection.isActive)
        try connection.send("GET /fast/two HTTP/1.1\r\n" + Self.host + "\r\n")
        let second = try connection.written()
        #expect(second.hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(second.hasSuffix("fast /fast/two"))
        #expect(connection.isActive)
        connection.finish()
    }

    @Test("a reply answered on the event loop whose body is not buffered is not written: the connection closes")
    func unbufferedReplyOnTheLoopCloses() throws {
        let connection = try EmbeddedProxyConnection()
        try connection.send("GET /unbuffered/one HTTP/1.1\r\n" + Self.host + "\r\n")
        #expect(try connection.written() == "")
        #expect(!connection.isActive)
        connection.finish()
    }

    @Test("a connection's allowed Host does not let a later request with another Host through")
    func hostCheckedPerRequest() throws {
        let connection = try EmbeddedProxyConnection()
        try connection.send("GET /fast/one HTTP/1.1\r\n" + Self.host + "\r\n")
        #expect(try connection.written().hasPrefix("HTTP/1.1 200 OK\r\n"))
        try connection.send("GET /fast/two HTTP/1.1\r\nHost: evil.example\r\n\r\n")
        #expect(try connection.written().hasPrefix("HTTP/1.1 403 Forbidden\r\n"))
        connection.finish()

        let another = try EmbeddedProxyConnection()
        try another.send("GET /fast/one HTTP/1.1\r\n" + Self.host + "\r\n")
        #expect(try another.written().hasPrefix("HTTP/1.1 200 OK\r\n"))
        try another.send("GET /fast/two HTTP/1.1\r\n" + Self.host + Self.host + "\r\n")
        #expect(try another.written().hasPrefix("HTTP/1.1 400 Bad Request\r\n"), "two Host fields, though each was allowed")
        another.finish()
    }

    @Test("a connection routes a path once per configuration generation, whatever the query")
    func routedOncePerPath() throws {
        let connection = try EmbeddedProxyConnection()
        for target in ["/fast/one?a=1", "/fast/one?a=2", "/fast/one", "/fast/two?a=1"] {
            try connection.send("GET \(target) HTTP/1.1\r\n" + Self.host + "\r\n")
            #expect(try connection.written().hasPrefix("HTTP/1.1 200 OK\r\n"))
        }
        #expect(connection.responder.routeCalls == ["/fast/one?a=1", "/fast/two?a=1"])
        connection.responder.bumpGeneration()
        try connection.send("GET /fast/two?a=3 HTTP/1.1\r\n" + Self.host + "\r\n")
        #expect(try connection.written().hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(connection.responder.routeCalls.last == "/fast/two?a=3", "a reload routes again")
        try connection.send("POST /fast/two?a=3 HTTP/1.1\r\n" + Self.host + "Content-Length: 0\r\n\r\n")
        _ = try connection.written()
        #expect(connection.responder.routeCalls.count == 4, "another method is routed on its own")
        connection.finish()
    }

    // Pipelining with the semantics of NIO's HTTPServerPipelineHandler (its tests
    // testLegitRequestFollowedByParserErrorArrivingWhilstResponseOutstanding,
    // testParserErrorOnly, testHalfCloseWithQueuedRequests and their kin).
    static let garbage = "GET /next HTTP/1.1\r\nNot a header line\r\n\r\n"

    @Test("a valid request followed by garbage in one write gets its reply, then the 400, then the close")
    func legitRequestFollowedByParserErrorWhileReplyOutstanding() throws {
        let connection = try EmbeddedProxyConnection()
        try connection.send("GET /slow/first HTTP/1.1\r\n" + Self.host + "\r\n" + Self.garbage)
        #expect(connection.responder.waiting == ["/slow/first"])
        #expect(try connection.written().isEmpty, "the error waits behind the reply owed")
        #expect(connection.isActive)
        connection.responder.answer("/slow/first", with: "first")
        connection.settle()
        let written = try connection.written()
        let replies = written.components(separatedBy: "HTTP/1.1 ").filter { !$0.isEmpty }
        #expect(replies.count == 2)
        #expect(replies.first?.hasPrefix("200 OK\r\n") == true)
        #expect(replies.first?.hasSuffix("first") == true)
        #expect(replies.last?.hasPrefix("400 Bad Request\r\n") == true)
        #expect(!connection.isActive)
        connection.finish()
    }

    @Test("a hit answered on the event loop followed by garbage gets its reply, then the 400")
    func hitFollowedByParserError() throws {
        let connection = try EmbeddedProxyConnection()
        try connection.send("GET /fast/one HTTP/1.1\r\n" + Self.host + "\r\n" + Self.garbage)
        let written = try connection.written()
        #expect(written.hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(written.contains("fast /fast/one"))
        #expect(written.range(of: "HTTP/1.1 400 Bad Request\r\n").map { $0.lowerBound > written.range(of: "fast /fast/one")!.lowerBound } == true)
        #expect(!connection.isActive)
        connection.finish()
    }

    @Test("garbage alone is answered 400 at once and the connection closes")
    func parserErrorOnly() throws {
        let connection = try EmbeddedProxyConnection()
        try connection.send(Self.garbage)
        #expect(try connection.written().hasPrefix("HTTP/1.1 400 Bad Request\r\n"))
        #expect(!connection.isActive)
        #expect(connection.responder.fastPathCalls.isEmpty)
        connection.finish()
    }

    @Test("a client that half-closes after pipelining two requests gets both replies, in order, then the close")
    func halfCloseWithQueuedRequests() throws {
        let connection = try EmbeddedProxyConnection()
        try connection.send("GET /slow/first HTTP/1.1\r\n" + Self.host + "\r\nGET /slow/second HTTP/1.1\r\n" + Self.host + "\r\n")
        connection.halfClose()
        #expect(connection.isActive, "replies are still owed")
        #expect(connection.responder.waiting == ["/slow/first"])
        connection.responder.answer("/slow/first", with: "first")
        connection.settle()
        #expect(try connection.written().hasSuffix("first"))
        #expect(connection.isActive, "the second reply is still owed")
        #expect(connection.responder.waiting == ["/slow/second"])
        connection.responder.answer("/slow/second", with: "second")
        connection.settle()
        #expect(try connection.written().hasSuffix("second"))
        #expect(!connection.isActive)
        connection.finish()
    }

    @Test("a half-close while a reply is produced closes the connection once that reply is out")
    func halfCloseWhileReplyOutstanding() throws {
        let connection = try EmbeddedProxyConnection()
        try connection.send("GET /slow/only HTTP/1.1\r\n" + Self.host + "\r\n")
        connection.halfClose()
        #expect(connection.isActive)
        connection.responder.answer("/slow/only", with: "only")
        connection.settle()
        #expect(try connection.written().hasSuffix("only"))
        #expect(!connection.isActive)
        connection.finish()
    }

    @Test("a half-close on an idle connection closes it at once")
    func halfCloseWhileIdle() throws {
        let connection = try EmbeddedProxyConnection()
        try connection.send("GET /fast/one HTTP/1.1\r\n" + Self.host + "\r\n")
        #expect(try connection.written().hasPrefix("HTTP/1.1 200 OK\r\n"))
        connection.halfClose()
        #expect(!connection.isActive)
        connection.finish()
    }

    @Test("pipelined requests are answered in order: the second reply is written only after the slow first one")
    func pipelinedInOrder() throws {
        let connection = try EmbeddedProxyConnection()
        try connection.send("GET /slow/first HTTP/1.1\r\n" + Self.host + "\r\nGET /fast/second HTTP/1.1\r\n" + Self.host + "\r\n")
        // The first runs as request work, waiting for the stub; the second is held back.
        #expect(connection.responder.waiting == ["/slow/first"])
        #expect(connection.responder.fastPathCalls == ["/slow/first"])
        #expect(try connection.written().isEmpty)
        connection.responder.answer("/slow/first", with: "slow first")
        connection.settle()
        let replies = try connection.written()
        let first = try #require(replies.range(of: "slow first"))
        let second = try #require(replies.range(of: "fast /fast/second"))
        #expect(first.upperBound <= second.lowerBound)
        #expect(replies.components(separatedBy: "HTTP/1.1 200 OK\r\n").count == 3)
        #expect(connection.isActive)
        connection.finish()
    }

    @Test("the connection goes on reading while a reply is produced; once a pipelined request waits, reading waits for the replies")
    func readsHeldOnlyForPipelinedParts() throws {
        let connection = try EmbeddedProxyConnection()
        let before = connection.readsPassed
        try connection.send("GET /slow/first HTTP/1.1\r\n" + Self.host + "\r\n")
        #expect(connection.responder.waiting == ["/slow/first"])
        #expect(connection.readReachesSocket(), "a client that waits for its reply keeps its socket's read interest")
        try connection.send("GET /fast/second HTTP/1.1\r\n" + Self.host + "\r\n")
        #expect(try connection.written().isEmpty)
        #expect(!connection.readReachesSocket(), "a request waits behind the running one: reading waits")
        connection.responder.answer("/slow/first", with: "slow first")
        connection.settle()
        #expect(connection.readsPassed == before + 2, "the held read went on once both replies were out")
        #expect(try connection.written().hasSuffix("fast /fast/second"))
        #expect(connection.readReachesSocket())
        connection.finish()
    }

    @Test("a streamed body that stalls past limits.body_timeout is answered 408 by the request's work")
    func streamedBodyStalls() throws {
        let connection = try EmbeddedProxyConnection(limits: "body_timeout: 4s")
        try connection.send("POST /stream/upload HTTP/1.1\r\n" + Self.host + "Content-Length: 10\r\n\r\nabc")
        #expect(connection.responder.waiting == ["/stream/upload"])
        connection.advance(by: .seconds(5))
        let reply = try connection.written()
        #expect(reply.hasPrefix("HTTP/1.1 408 Request Timeout\r\n"))
        #expect(reply.contains("request body timed out"))
        #expect(!connection.isActive)
        connection.finish()
    }

    @Test("a connection's asynchronous requests share one lane; closing the connection ends it")
    func oneLanePerConnection() throws {
        let connection = try EmbeddedProxyConnection()
        for target in ["/slow/one", "/slow/two"] {
            try connection.send("GET \(target) HTTP/1.1\r\n" + Self.host + "\r\n")
            #expect(connection.responder.waiting == [target])
            connection.responder.answer(target, with: "answer \(target)")
            connection.settle()
            #expect(try connection.written().hasSuffix("answer \(target)"))
            #expect(connection.openLanes == 1)
        }
        _ = try? connection.channel.close().wait()
        connection.settle()
        #expect(connection.openLanes == 0)
        connection.finish()
    }

    @Test("an idle kept-alive connection holds no work once the listener stops taking work; its next request is 503")
    func idleLaneEndsAtShutdown() throws {
        let connection = try EmbeddedProxyConnection()
        try connection.send("GET /slow/one HTTP/1.1\r\n" + Self.host + "\r\n")
        connection.responder.answer("/slow/one", with: "answer one")
        connection.settle()
        #expect(try connection.written().hasSuffix("answer one"))
        #expect(connection.isActive)
        connection.stopTakingWork()
        #expect(connection.workDone, "the idle connection's lane ended with the listener's work loop")
        #expect(connection.openLanes == 0)
        try connection.send("GET /slow/late HTTP/1.1\r\n" + Self.host + "\r\n")
        #expect(try connection.written().hasPrefix("HTTP/1.1 503 Service Unavailable\r\n"))
        #expect(!connection.isActive)
        connection.finish()
    }

    @Test("a request after the listener stopped taking work is 503, and the connection closes")
    func shuttingDown() throws {
        let connection = try EmbeddedProxyConnection()
        connection.stopTakingWork()
        try connection.send("GET /slow/late HTTP/1.1\r\n" + Self.host + "\r\n")
        #expect(try connection.written().hasPrefix("HTTP/1.1 503 Service Unavailable\r\n"))
        #expect(!connection.isActive)
        #expect(connection.responder.waiting.isEmpty)
        connection.finish()
    }
}

/// A ``ProxyHTTPHandler`` on an `EmbeddedChannel`, set up as ``ProxyListener`` sets up a
/// connection, with a ``StubResponder``, and the listener's ``RequestWorkQueue`` running.
///
/// An `EmbeddedChannel` may only be touched from the thread that made it, and request work is
/// async; so the work runs on a ``ManualTaskExecutor`` that ``settle()`` drains on the test's
/// own thread, between runs of the embedded event loop. Tests are synchronous functions.
final class EmbeddedProxyConnection {
    let channel = EmbeddedChannel()
    let responder: StubResponder
    private let executor = ManualTaskExecutor()
    private let requests = RequestWorkQueue()
    private let worker = WorkerState()

    final class WorkerState: Sendable {
        let done = Mutex(false)
    }

    private let reads = ReadCounter()

    /// Counts the `read` events that pass the whole pipeline, to the channel (the socket).
    final class ReadCounter: ChannelOutboundHandler {
        typealias OutboundIn = Any
        var passed = 0

        func read(context: ChannelHandlerContext) {
            passed += 1
            context.read()
        }
    }

    /// `limits`: the inside of the config's `limits: { ... }`.
    init(limits: String = "") throws {
        responder = try StubResponder(limits: limits)
        try channel.pipeline.syncOperations.addHandler(reads)
        try ProxyListener.configureConnection(channel.pipeline.syncOperations, responder: responder, requests: requests)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 40000)).wait()
        let (requests, worker) = (self.requests, self.worker)
        Task(executorPreference: executor) {
            await requests.run()
            worker.done.withLock { $0 = true }
        }
        settle()
    }

    /// Runs event-loop tasks and request work until neither has anything left to do.
    func settle() {
        repeat {
            channel.embeddedEventLoop.run()
        } while executor.runQueuedJobs()
    }

    func send(_ text: String) throws {
        try channel.writeInbound(ByteBuffer(string: text))
        settle()
    }

    /// The client shuts its sending side down, as NIO reports it with half-closure allowed.
    func halfClose() {
        channel.pipeline.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        settle()
    }

    func advance(by amount: TimeAmount) {
        channel.embeddedEventLoop.advanceTime(by: amount)
        settle()
    }

    /// The bytes written since the last call, as text.
    func written() throws -> String {
        var text = ""
        while let part = try channel.readOutbound(as: IOData.self) {
            if case .byteBuffer(let buffer) = part { text += String(buffer: buffer) }
        }
        return text
    }

    var isActive: Bool { channel.isActive }

    /// The reads that reached the channel so far.
    var readsPassed: Int { reads.passed }

    /// Issues a `read` as NIO's auto-read does after each read from the socket; whether it
    /// passed the handlers to the channel (else one of them holds it back).
    func readReachesSocket() -> Bool {
        let before = reads.passed
        channel.pipeline.read()
        settle()
        return reads.passed > before
    }

    /// The listener's work loop returned.
    var workDone: Bool { worker.done.withLock { $0 } }

    /// Connection lanes whose task has not ended.
    var openLanes: Int { requests.openLanes }

    /// As the listener does at shutdown: no more work is taken.
    func stopTakingWork() {
        requests.finish()
        settle()
    }

    /// Ends the listener's work loop and checks that it returned (no work left suspended).
    func finish() {
        stopTakingWork()
        #expect(worker.done.withLock { $0 }, "request work still running")
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }
}

/// A `TaskExecutor` that runs its jobs only in ``runQueuedJobs()``, on the caller's thread.
final class ManualTaskExecutor: TaskExecutor {
    private let jobs = Mutex<[UnownedJob]>([])

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        jobs.withLock { $0.append(job) }
    }

    /// Runs jobs, including those they enqueue, until none is left; `true` when any ran.
    func runQueuedJobs() -> Bool {
        var ran = false
        while let job = jobs.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) {
            job.runSynchronously(on: asUnownedTaskExecutor())
            ran = true
        }
        return ran
    }
}

/// The daemon's side of a connection, scripted by target: `/fast/…` is a hot hit answered by
/// the fast path (`fast <target>`); `/slow/…` waits in ``handle(_:plan:)`` until the test
/// calls ``answer(_:with:)``; `/stream/…` takes its body as a stream and waits for it to end.
final class StubResponder: ProxyResponder {
    let currentConfig: RuntimeConfig
    private let calls = Mutex<[String]>([])
    private let pending = Mutex<[(target: String, reply: CheckedContinuation<ProxyAnswer, Never>)]>([])
    private let streamed = Mutex<[String]>([])

    init(limits: String) throws {
        // `/stream/…` streams its body (not envelope, not cached); everything else is buffered.
        let yaml = "upstreams: { a: http://127.0.0.1:9 }\n" + (limits.isEmpty ? "" : "limits: { \(limits) }\n")
            + "endpoints:\n  - { name: stream, match: \"~^/stream/\", envelope: false }\n  - { name: buffered, match: \"~^/\" }\n"
        currentConfig = RuntimeConfig(config: try ConfigLoader.parse(yaml: yaml))
    }

    /// Targets the fast path was asked about, in order.
    var fastPathCalls: [String] { calls.withLock { $0 } }
    /// Targets whose work waits for the stub.
    var waiting: [String] { pending.withLock { $0.map(\.target) } + streamed.withLock { $0 } }

    func answer(_ target: String, with body: String) {
        let waiter = pending.withLock { list in list.firstIndex { $0.target == target }.map { list.remove(at: $0) } }
        waiter?.reply.resume(returning: ProxyAnswer(ProxyReply(status: 200, body: .buffer(ByteBuffer(string: body))), RequestReport()))
    }

    func plan(_ incoming: IncomingRequest, encoded: Bool) -> RequestPlan? {
        calls.withLock { $0.append(incoming.target) }
        if incoming.target.hasPrefix("/unbuffered/") {
            // A fast answer whose body streams: never planned by the daemon, refused by the writer.
            let (events, _) = AsyncStream.makeStream(of: ByteBuffer.self)
            return .answer(ProxyAnswer(ProxyReply(status: 200, body: .events(StreamHandle(events))), RequestReport()))
        }
        guard incoming.target.hasPrefix("/fast/") else { return nil }
        return .answer(ProxyAnswer(ProxyReply(status: 200, body: .buffer(ByteBuffer(string: "fast \(incoming.target)"))), RequestReport()))
    }

    func handle(_ incoming: IncomingRequest, plan: RequestPlan.TaskPlan?) async -> ProxyAnswer {
        if case .stream(let body, _) = incoming.body {
            streamed.withLock { $0.append(incoming.target) }
            defer { streamed.withLock { $0.removeAll { $0 == incoming.target } } }
            do {
                for try await _ in body.stream {}
                return ProxyAnswer(ProxyReply(status: 200, body: .buffer(ByteBuffer(string: "uploaded"))), RequestReport())
            } catch {
                return ProxyAnswer(.error(502, "upstream request aborted"), RequestReport())
            }
        }
        return await withCheckedContinuation { continuation in
            pending.withLock { $0.append((incoming.target, continuation)) }
        }
    }

    var configGeneration: Int { generation.withLock { $0 } }
    /// Stands for a reload: the connection's next head reads the configuration and routes again.
    func bumpGeneration() { generation.withLock { $0 += 1 } }
    private let generation = Mutex(0)
    private let routed = Mutex<[String]>([])
    /// The targets routed so far.
    var routeCalls: [String] { routed.withLock { $0 } }

    func route(method: String, target: String) -> PreparedRequest.Route? {
        routed.withLock { $0.append(target) }
        return PreparedRequest.Route(method: method, target: target, config: currentConfig, environment: "a")
    }

    func originForm(_ uri: String) -> (origin: String, host: String)? { nil }

    func log(_ incoming: IncomingRequest, _ answer: ProxyAnswer, started: ContinuousClock.Instant) {}
}
