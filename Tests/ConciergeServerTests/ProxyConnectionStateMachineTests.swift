@testable import ConciergeServer
import NIOCore
import NIOHTTP1
import Testing

/// ``ProxyConnectionStateMachine`` alone: events in, actions out, no channel. Times are
/// `NIODeadline`s the test chooses.
@Suite("Proxy connection state machine")
struct ProxyConnectionStateMachineTests {
    typealias Machine = ProxyConnectionStateMachine

    static let limits = Machine.Limits(headerTimeout: .seconds(10), bodyTimeout: .seconds(30), maxBodyBytes: 1000)
    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    static func at(_ seconds: Int64) -> NIODeadline { start + .seconds(seconds) }

    static func head(_ method: HTTPMethod = .GET, _ uri: String = "/api/items", _ headers: [(String, String)] = [],
                     version: HTTPVersion = .http1_1) -> HTTPRequestHead {
        HTTPRequestHead(version: version, method: method, uri: uri, headers: HTTPHeaders([("Host", "127.0.0.1")] + headers))
    }

    /// A machine on an active connection.
    static func active() -> Machine {
        var machine = Machine(limits: limits)
        machine.channelActive(now: start)
        return machine
    }

    static func receive(_ head: HTTPRequestHead, streams: Bool = false, on machine: inout Machine, at now: NIODeadline = start) -> Machine.Action {
        machine.headReceived(head, streamsBody: streams, limits: limits, now: now, started: .now)
    }

    /// The id of the request an action dispatches.
    static func dispatched(_ action: Machine.Action) -> Machine.Request? {
        if case .dispatch(let request, _, _) = action { return request }
        return nil
    }

    static func localStatus(_ action: Machine.Action) -> (status: Int, close: Bool)? {
        if case .respondLocally(let reply, _, let close) = action { return (reply.status, close) }
        return nil
    }

    @Test("a head not complete within the header timeout is answered 408 below the HTTP layers")
    func headerTimeout() {
        var machine = Self.active()
        #expect(machine.timerFired(now: Self.at(9)).isNone)
        guard case .writeHeaderTimeout = machine.timerFired(now: Self.at(10)) else { Issue.record("no 408"); return }
        #expect(machine.timerFired(now: Self.at(20)).isNone)
    }

    @Test("an idle keep-alive connection past the header timeout is closed quietly")
    func idleKeepAliveClosesQuietly() throws {
        var machine = Self.active()
        _ = Self.receive(Self.head(), on: &machine)
        let request = try #require(Self.dispatched(machine.endReceived(now: Self.at(1))))
        #expect(machine.replyFinished(request: request.id, keepAlive: true, now: Self.at(2)).isNone)
        #expect(machine.timerFired(now: Self.at(11)).isNone)
        guard case .close = machine.timerFired(now: Self.at(12)) else { Issue.record("not closed"); return }
    }

    @Test("a declared Content-Length above the limit is 413 at once, and the connection closes")
    func declaredLengthTooLarge() {
        var machine = Self.active()
        let action = Self.receive(Self.head(.POST, "/api/echo", [("Content-Length", "1001")]), on: &machine)
        #expect(Self.localStatus(action)?.status == 413)
        #expect(Self.localStatus(action)?.close == true)
        #expect(machine.bodyReceived(ByteBuffer(string: "x"), now: Self.start).isNone)
    }

    @Test("a streamed endpoint's body is not held to the buffered-body limit")
    func streamedBodyHasNoLimit() {
        var machine = Self.active()
        let action = Self.receive(Self.head(.POST, "/api/upload", [("Content-Length", "5000")]), streams: true, on: &machine)
        guard case .dispatch(_, .streamed(length: .some(5000)), sendContinue: false) = action else { Issue.record("\(action)"); return }
    }

    @Test("a buffered body growing past the limit is 413 mid-body")
    func bufferedBodyTooLarge() {
        var machine = Self.active()
        _ = Self.receive(Self.head(.POST, "/api/echo", [("Transfer-Encoding", "chunked")]), on: &machine)
        #expect(machine.bodyReceived(ByteBuffer(repeating: 1, count: 600), now: Self.start).isNone)
        #expect(Self.localStatus(machine.bodyReceived(ByteBuffer(repeating: 1, count: 600), now: Self.start))?.status == 413)
    }

    @Test("a buffered body is dispatched whole at the end")
    func bufferedBodyDispatchedWhole() {
        var machine = Self.active()
        _ = Self.receive(Self.head(.POST, "/api/echo", [("Content-Length", "6")]), on: &machine)
        _ = machine.bodyReceived(ByteBuffer(string: "abc"), now: Self.start)
        _ = machine.bodyReceived(ByteBuffer(string: "def"), now: Self.start)
        guard case .dispatch(_, .buffered(let body), _) = machine.endReceived(now: Self.start) else { Issue.record("not dispatched"); return }
        #expect(String(buffer: body) == "abcdef")
    }

    @Test("Expect: 100-continue on a request with a body is answered, and the header is not forwarded")
    func expectContinue() {
        var machine = Self.active()
        let buffered = Self.receive(Self.head(.POST, "/api/echo", [("Content-Length", "5"), ("Expect", "100-continue")]), on: &machine)
        guard case .sendContinue(.http1_1) = buffered else { Issue.record("\(buffered)"); return }
        _ = machine.bodyReceived(ByteBuffer(string: "hello"), now: Self.start)
        let request = Self.dispatched(machine.endReceived(now: Self.start))
        #expect(request?.head.headers.contains(name: "expect") == false)
    }

    @Test("a buffered body that stalls past the body timeout is 408 and the connection closes")
    func bufferedBodyStalls() {
        var machine = Self.active()
        _ = Self.receive(Self.head(.POST, "/api/echo", [("Content-Length", "10")]), on: &machine)
        _ = machine.bodyReceived(ByteBuffer(string: "abc"), now: Self.at(5))
        #expect(machine.timerFired(now: Self.at(34)).isNone)
        let action = machine.timerFired(now: Self.at(35))
        #expect(Self.localStatus(action)?.status == 408)
        #expect(Self.localStatus(action)?.close == true)
    }

    @Test("a streamed body that stalls fails the body stream (the work answers 408)")
    func streamedBodyStalls() {
        var machine = Self.active()
        _ = Self.receive(Self.head(.POST, "/api/upload", [("Content-Length", "10")]), streams: true, on: &machine)
        guard case .forwardBodyPart = machine.bodyReceived(ByteBuffer(string: "abc"), now: Self.at(1)) else { Issue.record("not forwarded"); return }
        guard case .failStreamedBody(.stalled, close: false) = machine.timerFired(now: Self.at(31)) else { Issue.record("not failed"); return }
    }

    @Test("a parser error while streaming fails the body stream; before a head it is answered and closes")
    func parserErrors() {
        var streaming = Self.active()
        _ = Self.receive(Self.head(.POST, "/api/upload", [("Transfer-Encoding", "chunked")]), streams: true, on: &streaming)
        guard case .failStreamedBody(.malformed, close: false) = streaming.parserFailed(.invalidChunkSize) else { Issue.record("not failed"); return }
        var waiting = Self.active()
        let overflow = waiting.parserFailed(.headerOverflow)
        #expect(Self.localStatus(overflow)?.status == 431)
        #expect(Self.localStatus(overflow)?.close == true)
    }

    @Test("the connection closing mid-body fails the body stream")
    func inactiveMidBody() {
        var machine = Self.active()
        _ = Self.receive(Self.head(.POST, "/api/upload", [("Content-Length", "10")]), streams: true, on: &machine)
        guard case .failStreamedBody(.malformed, close: false) = machine.channelInactive() else { Issue.record("not failed"); return }
    }

    @Test("a reply that finishes before its streamed body ends fails the body and closes")
    func replyBeforeBodyEnd() throws {
        var machine = Self.active()
        let request = try #require(Self.dispatched(Self.receive(Self.head(.POST, "/api/upload", [("Content-Length", "10")]), streams: true, on: &machine)))
        guard case .failStreamedBody(.malformed, close: true) = machine.replyFinished(request: request.id, keepAlive: true, now: Self.start) else {
            Issue.record("not failed")
            return
        }
    }

    @Test("a reply without keep-alive closes the connection")
    func replyWithoutKeepAlive() throws {
        var machine = Self.active()
        _ = Self.receive(Self.head(.GET, "/api/items", [("Connection", "close")]), on: &machine)
        let request = try #require(Self.dispatched(machine.endReceived(now: Self.start)))
        guard case .close = machine.replyFinished(request: request.id, keepAlive: false, now: Self.start) else { Issue.record("not closed"); return }
    }

    @Test("a pipelined head that arrives before the previous reply is reported finished starts the next request")
    func pipelinedHeadDuringReply() throws {
        var machine = Self.active()
        _ = Self.receive(Self.head(.GET, "/first"), on: &machine)
        let first = try #require(Self.dispatched(machine.endReceived(now: Self.start)))
        // NIO delivers the next head once the first reply's `.end` is written.
        _ = Self.receive(Self.head(.GET, "/second"), on: &machine)
        let second = try #require(Self.dispatched(machine.endReceived(now: Self.start)))
        #expect(second.id == first.id + 1)
        #expect(machine.replyFinished(request: first.id, keepAlive: true, now: Self.start).isNone)
        guard case .responding(request: second.id) = machine.state else { Issue.record("\(machine.state)"); return }
        #expect(machine.replyFinished(request: second.id, keepAlive: true, now: Self.start).isNone)
        guard case .waitingForHead = machine.state else { Issue.record("\(machine.state)"); return }
    }

    @Test("OPTIONS * is answered locally at the end of the request, and the connection stays open")
    func optionsAsterisk() {
        var machine = Self.active()
        #expect(Self.receive(Self.head(.OPTIONS, "*"), on: &machine).isNone)
        guard case .respondLocally(let reply, _, close: false) = machine.endReceived(now: Self.start) else { Issue.record("not answered"); return }
        #expect(reply.headers["Allow"] == ["GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"])
        guard case .waitingForHead = machine.state else { Issue.record("\(machine.state)"); return }
    }

    @Test("a refused head is answered and closes; the rest of its request is dropped")
    func refusedHead() {
        var machine = Self.active()
        let action = machine.headRefused(Self.head(.CONNECT, "example.com:443"), reply: .error(405, "no"))
        #expect(Self.localStatus(action)?.status == 405)
        #expect(Self.localStatus(action)?.close == true)
        #expect(machine.bodyReceived(ByteBuffer(string: "x"), now: Self.start).isNone)
        #expect(Self.dispatched(machine.endReceived(now: Self.start)) == nil)
    }

    @Test("work refused during shutdown is answered 503 and closes")
    func workRefused() throws {
        var machine = Self.active()
        _ = Self.receive(Self.head(), on: &machine)
        let request = try #require(Self.dispatched(machine.endReceived(now: Self.start)))
        let action = machine.workRefused(request)
        #expect(Self.localStatus(action)?.status == 503)
        #expect(Self.localStatus(action)?.close == true)
    }
}

/// Events no sequence of NIO's events brings in the state they come in: explicit, never dropped
/// silently (the handler reports them and closes the connection).
@Suite("Proxy connection state machine: impossible events")
struct ProxyConnectionStateMachineImpossibleTests {
    typealias Machine = ProxyConnectionStateMachine
    typealias T = ProxyConnectionStateMachineTests

    static func isImpossible(_ action: Machine.Action) -> Bool {
        if case .impossible = action { return true }
        return false
    }

    static func isClosed(_ machine: Machine) -> Bool {
        if case .closed = machine.state { return true }
        return false
    }

    @Test("a head inside a request (buffering or streaming its body) is impossible, and the machine closes")
    func headInsideRequest() {
        var buffering = T.active()
        #expect(T.receive(T.head(.POST, "/api/echo", [("Content-Length", "10")]), on: &buffering).isNone)
        #expect(Self.isImpossible(T.receive(T.head(), on: &buffering)))
        #expect(Self.isClosed(buffering))
        var streaming = T.active()
        _ = T.receive(T.head(.POST, "/api/upload", [("Content-Length", "10")]), streams: true, on: &streaming)
        #expect(Self.isImpossible(streaming.headRefused(T.head(), reply: .error(400, "no"))))
        #expect(Self.isClosed(streaming))
    }

    @Test("a body part or an end with no request being read is impossible, and the machine closes")
    func partWithoutRequest() throws {
        var idle = T.active()
        #expect(Self.isImpossible(idle.bodyReceived(ByteBuffer(string: "x"), now: T.start)))
        #expect(Self.isClosed(idle))
        var idleEnd = T.active()
        #expect(Self.isImpossible(idleEnd.endReceived(now: T.start)))
        var responding = T.active()
        _ = T.receive(T.head(), on: &responding)
        _ = try #require(T.dispatched(responding.endReceived(now: T.start)))
        #expect(Self.isImpossible(responding.bodyReceived(ByteBuffer(string: "x"), now: T.start)))
        #expect(Self.isClosed(responding))
        var opening = Machine(limits: T.limits)
        #expect(Self.isImpossible(opening.endReceived(now: T.start)))
    }

    @Test("a head after an error reply, or once closed, is dropped (no action), as before")
    func headAfterErrorDropped() {
        var machine = T.active()
        _ = machine.headRefused(T.head(.CONNECT, "example.com:443"), reply: .error(405, "no"))
        #expect(T.receive(T.head(), on: &machine).isNone)
        _ = machine.channelInactive()
        #expect(T.receive(T.head(), on: &machine).isNone)
    }
}

extension ProxyConnectionStateMachine.Action {
    var isNone: Bool {
        if case .none = self { return true }
        return false
    }
}
