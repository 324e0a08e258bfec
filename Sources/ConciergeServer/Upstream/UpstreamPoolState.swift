import NIOCore

/// One upstream origin's connections on one event loop, as a value: which connections exist
/// (opening, lent to a request, idle), which requests wait for one, and what to do next.
/// It opens and closes nothing itself: each event returns the step the owner
/// (``UpstreamLoopPool``) carries out, so the rules are tested without a channel.
///
/// Rules:
/// - at most `maxConnections` connections (opening ones included);
/// - a request takes the most recently used idle connection, else opens a new one while
///   under the limit, else waits in line (at most `maxWaiting`; beyond that it is refused);
/// - a connection handed back goes to the first waiter, else becomes idle;
/// - a connection gone (closed, failed, not reusable) frees its place: the first waiter
///   opens a new one there;
/// - a connection opened for a request that gave up meanwhile serves the next one, or idles.
///
/// - Important: Waiters exist only while every place is taken and no connection is idle.
struct UpstreamPoolState {
    typealias ConnectionID = Int
    typealias RequestID = Int

    struct Limits: Sendable, Equatable {
        var maxConnections: Int
        var maxWaiting: Int
    }

    /// What a request gets when it asks for a connection.
    enum Lease: Equatable {
        /// Send on this idle connection now.
        case execute(ConnectionID)
        /// Open this new connection and send on it.
        case connect(ConnectionID)
        /// Every place is taken: wait for a connection to be handed back or to go.
        case wait
        /// Every place is taken and the line is full.
        case refused
    }

    /// Where a connection (or a freed place) goes next.
    enum Handoff: Equatable {
        case execute(RequestID, on: ConnectionID)
        case connect(ConnectionID, for: RequestID)
        /// No one waits: the connection idles (from now on, for the idle timeout).
        case idle(ConnectionID)
    }

    /// Where a request that gives up (deadline, cancellation) stood.
    enum Withdrawal: Equatable {
        case waiting
        /// Its connection is still opening; it will serve the next request or idle.
        case connecting(ConnectionID)
        /// It was being sent or answered on this connection, which must be closed.
        case executing(ConnectionID)
        case unknown
    }

    private enum Slot: Equatable {
        case connecting(owner: RequestID?)
        case leased(RequestID)
        case idle
    }

    let limits: Limits
    private var slots: [ConnectionID: Slot] = [:]
    /// Idle connections, most recently used last.
    private var idle: [ConnectionID] = []
    private var waiting = CircularBuffer<RequestID>()
    private var nextConnectionID: ConnectionID

    init(limits: Limits, firstConnectionID: ConnectionID = 0) {
        self.limits = limits
        nextConnectionID = firstConnectionID
    }

    var connectionCount: Int { slots.count }
    var idleCount: Int { idle.count }
    var waitingCount: Int { waiting.count }
    var isEmpty: Bool { slots.isEmpty && waiting.isEmpty }

    func isIdle(_ connection: ConnectionID) -> Bool { slots[connection] == .idle }

    /// A request asks for a connection.
    mutating func lease(_ request: RequestID) -> Lease {
        if let connection = idle.popLast() {
            slots[connection] = .leased(request)
            return .execute(connection)
        }
        if slots.count < limits.maxConnections {
            return .connect(open(for: request))
        }
        guard waiting.count < limits.maxWaiting else { return .refused }
        waiting.append(request)
        return .wait
    }

    /// A connection finished opening.
    mutating func connected(_ connection: ConnectionID) -> Handoff? {
        guard case .connecting(let owner) = slots[connection] else { return nil }
        if let owner {
            slots[connection] = .leased(owner)
            return .execute(owner, on: connection)
        }
        return handBack(connection)
    }

    /// A connection finished an exchange and may serve another.
    mutating func released(_ connection: ConnectionID) -> Handoff? {
        guard case .leased = slots[connection] else { return nil }
        return handBack(connection)
    }

    /// A connection is gone (failed to open, closed by either side, or not reusable). Calling
    /// this again for the same connection does nothing.
    ///
    /// - Parameter retrying: a request that failed on this connection and is sent again on a
    ///   new one in its place, ahead of any waiter.
    /// - Returns: the request the connection was opening for or lent to, and where its
    ///   freed place goes.
    mutating func removed(_ connection: ConnectionID, retrying: RequestID? = nil) -> (owner: RequestID?, next: Handoff?) {
        guard let slot = slots.removeValue(forKey: connection) else { return (nil, nil) }
        let owner: RequestID?
        switch slot {
        case .connecting(let o): owner = o
        case .leased(let r): owner = r
        case .idle:
            owner = nil
            idle.removeAll { $0 == connection }
        }
        if let retrying { return (owner, .connect(open(for: retrying), for: retrying)) }
        guard slots.count < limits.maxConnections, let first = waiting.popFirst() else { return (owner, nil) }
        return (owner, .connect(open(for: first), for: first))
    }

    /// A request gives up.
    mutating func withdraw(_ request: RequestID) -> Withdrawal {
        if let index = waiting.firstIndex(of: request) {
            waiting.remove(at: index)
            return .waiting
        }
        for (connection, slot) in slots {
            switch slot {
            case .connecting(owner: request):
                slots[connection] = .connecting(owner: nil)
                return .connecting(connection)
            case .leased(request):
                return .executing(connection)
            default:
                continue
            }
        }
        return .unknown
    }

    /// Empties the pool (shutdown): every connection to close and every waiting request.
    mutating func drain() -> (connections: [ConnectionID], waiting: [RequestID]) {
        defer {
            slots.removeAll()
            idle.removeAll()
            waiting.removeAll()
        }
        return (Array(slots.keys), Array(waiting))
    }

    private mutating func open(for request: RequestID) -> ConnectionID {
        let connection = nextConnectionID
        nextConnectionID += 1
        slots[connection] = .connecting(owner: request)
        return connection
    }

    private mutating func handBack(_ connection: ConnectionID) -> Handoff {
        if let first = waiting.popFirst() {
            slots[connection] = .leased(first)
            return .execute(first, on: connection)
        }
        slots[connection] = .idle
        idle.append(connection)
        return .idle(connection)
    }
}
