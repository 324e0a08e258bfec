import Testing

@testable import ConciergeServer

/// The pool's rules as a value, without a channel: limits, the waiting line, hand-backs,
/// removals and requests that give up.
@Suite("Upstream pool state")
struct UpstreamPoolStateTests {
    typealias State = UpstreamPoolState

    func state(max: Int = 2, waiting: Int = 2) -> State {
        State(limits: .init(maxConnections: max, maxWaiting: waiting))
    }

    @Test("requests open connections up to the limit, then wait, then are refused when the line is full")
    func limits() {
        var s = state(max: 2, waiting: 1)
        #expect(s.lease(1) == .connect(0))
        #expect(s.lease(2) == .connect(1))
        #expect(s.lease(3) == .wait)
        #expect(s.lease(4) == .refused)
        #expect(s.connectionCount == 2)
        #expect(s.waitingCount == 1)
    }

    @Test("an opened connection serves the request that opened it; handed back it serves the first waiter, else idles")
    func handBack() {
        var s = state(max: 1, waiting: 4)
        #expect(s.lease(1) == .connect(0))
        #expect(s.lease(2) == .wait)
        #expect(s.lease(3) == .wait)
        #expect(s.connected(0) == .execute(1, on: 0))
        #expect(s.released(0) == .execute(2, on: 0))
        #expect(s.released(0) == .execute(3, on: 0))
        #expect(s.released(0) == .idle(0))
        #expect(s.isIdle(0))
        #expect(s.lease(4) == .execute(0))
        #expect(!s.isIdle(0))
    }

    @Test("the most recently used idle connection is taken first")
    func mostRecentIdle() {
        var s = state(max: 2)
        _ = s.lease(1)
        _ = s.lease(2)
        _ = s.connected(0)
        _ = s.connected(1)
        #expect(s.released(1) == .idle(1))
        #expect(s.released(0) == .idle(0))
        #expect(s.lease(3) == .execute(0))
        #expect(s.idleCount == 1)
    }

    @Test("a connection gone frees its place: the first waiter opens a new one there")
    func removalHandsPlaceToWaiter() {
        var s = state(max: 1, waiting: 2)
        _ = s.lease(1)
        _ = s.connected(0)
        #expect(s.lease(2) == .wait)
        let removal = s.removed(0)
        #expect(removal.owner == 1)
        #expect(removal.next == .connect(1, for: 2))
        #expect(s.connectionCount == 1)
        #expect(s.waitingCount == 0)
        // Removing again does nothing.
        #expect(s.removed(0).owner == nil)
        #expect(s.connectionCount == 1)
    }

    @Test("a failed connect reports the request it was for; an idle connection closed by the upstream just leaves")
    func connectFailureAndIdleClose() {
        var s = state(max: 2)
        _ = s.lease(1)
        #expect(s.removed(0) == (owner: 1, next: nil))
        _ = s.lease(2)
        _ = s.connected(1)
        _ = s.released(1)
        #expect(s.removed(1) == (owner: nil, next: nil))
        #expect(s.isEmpty)
        #expect(s.lease(3) == .connect(2))
    }

    @Test("a retry takes the failed connection's place on a new connection, ahead of waiters")
    func retryAheadOfWaiters() {
        var s = state(max: 1, waiting: 2)
        _ = s.lease(1)
        _ = s.connected(0)
        #expect(s.lease(2) == .wait)
        let removal = s.removed(0, retrying: 1)
        #expect(removal.next == .connect(1, for: 1))
        #expect(s.waitingCount == 1)
        #expect(s.connected(1) == .execute(1, on: 1))
        #expect(s.released(1) == .execute(2, on: 1))
    }

    @Test("a request that gives up leaves the line, leaves its opening connection to the next request, or names the connection to close")
    func withdraw() {
        var s = state(max: 2, waiting: 2)
        _ = s.lease(1)
        _ = s.lease(2)
        _ = s.lease(3)
        _ = s.connected(0)
        #expect(s.withdraw(3) == .waiting)
        #expect(s.withdraw(2) == .connecting(1))
        #expect(s.withdraw(1) == .executing(0))
        #expect(s.withdraw(9) == .unknown)
        // The connection opened for request 2 now serves a waiter, or idles.
        #expect(s.lease(4) == .wait)
        #expect(s.connected(1) == .execute(4, on: 1))
        #expect(s.released(1) == .idle(1))
    }

    @Test("drain hands back every connection and waiter and leaves the state empty")
    func drain() {
        var s = state(max: 1, waiting: 2)
        _ = s.lease(1)
        _ = s.lease(2)
        let drained = s.drain()
        #expect(drained.connections == [0])
        #expect(drained.waiting == [2])
        #expect(s.isEmpty)
    }

    @Test("a thousand requests over ten connections: never more than ten, every request served once, in arrival order")
    func manyRequestsBounded() {
        var s = state(max: 10, waiting: 1000)
        var served: [Int] = []
        var opening: [(State.ConnectionID, State.RequestID)] = []
        for r in 0..<1000 {
            switch s.lease(r) {
            case .connect(let c): opening.append((c, r))
            case .wait: continue
            default: Issue.record("unexpected lease for \(r)")
            }
        }
        #expect(s.connectionCount == 10)
        var busy: [State.ConnectionID] = []
        for (c, r) in opening {
            #expect(s.connected(c) == .execute(r, on: c))
            busy.append(c)
        }
        while let c = busy.popLast() {
            #expect(s.connectionCount <= 10)
            if case .execute(let r, on: c) = s.released(c) {
                served.append(r)
                busy.insert(c, at: 0)
            }
        }
        #expect(served == Array(10..<1000))
        #expect(s.idleCount == 10)
    }
}
