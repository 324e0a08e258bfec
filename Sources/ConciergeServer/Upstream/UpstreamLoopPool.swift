import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// One request on its way through an ``UpstreamLoopPool``.
struct PendingExchange: Sendable {
    let id: UpstreamPoolState.RequestID
    let origin: UpstreamOrigin
    let request: UpstreamWireRequest
    let maxBody: Int
    /// The request's deadline: waiting, connecting, sending and reading together.
    let deadline: NIODeadline
    /// Called once, on the pool's loop, with the reply or why there is none.
    let reply: @Sendable (Result<UpstreamResponse, UpstreamFailure>) -> Void
    /// Set when the caller's task is cancelled (possibly before the exchange reached the loop).
    let cancellation: CancellationFlag
    var retried = false
}

/// The upstream connections of one event loop, per origin: drives an ``UpstreamPoolState``
/// per origin with real channels and promises. Request deadlines and idle connections are
/// checked by one sweep every ``UpstreamConnectionPool/Configuration/sweepInterval`` while
/// there are any: a request costs a timestamp, not a timer.
///
/// - Important: Confined to `eventLoop`; every method runs there. The channels it opens run
///   on the same loop, so handing a reply over needs no thread hop.
final class UpstreamLoopPool {
    typealias ConnectionID = UpstreamPoolState.ConnectionID
    typealias RequestID = UpstreamPoolState.RequestID

    /// One origin's state and the live objects behind its connection numbers.
    final class Origin {
        let key: UpstreamOrigin
        var state: UpstreamPoolState
        var connections: [ConnectionID: UpstreamConnection] = [:]
        /// When each idle connection became idle.
        var idleSince: [ConnectionID: NIODeadline] = [:]

        init(key: UpstreamOrigin, limits: UpstreamPoolState.Limits) {
            self.key = key
            state = UpstreamPoolState(limits: limits)
        }
    }

    let eventLoop: any EventLoop
    let configuration: UpstreamConnectionPool.Configuration
    let tls: UpstreamTLSContexts
    private var origins: [UpstreamOrigin: Origin] = [:]
    private var exchanges: [RequestID: PendingExchange] = [:]
    private var isShutDown = false
    /// The next sweep, while there are requests or idle connections to watch.
    private var sweep: Scheduled<Void>?

    init(eventLoop: any EventLoop, configuration: UpstreamConnectionPool.Configuration, tls: UpstreamTLSContexts) {
        self.eventLoop = eventLoop
        self.configuration = configuration
        self.tls = tls
    }

    /// Open connections (idle, lent or opening) to every origin.
    var connectionCount: Int { origins.values.reduce(0) { $0 + $1.state.connectionCount } }

    // MARK: Requests

    func start(_ exchange: PendingExchange) {
        if isShutDown || exchange.cancellation.isSet {
            exchange.reply(.failure(isShutDown ? .unreachable("upstream connection pool shut down") : .unreachable("cancelled")))
            return
        }
        exchanges[exchange.id] = exchange
        watch()
        lease(exchange.id, origin(exchange.origin))
    }

    /// The request's deadline passed or its task was cancelled: answer it with `failure`
    /// now, wherever it stands; a connection it was using is closed.
    func giveUp(_ id: RequestID, _ failure: UpstreamFailure) {
        guard let exchange = exchanges[id], let origin = origins[exchange.origin] else { return }
        if case .executing(let connection) = origin.state.withdraw(id) {
            let handler = origin.connections[connection]
            remove(connection, from: origin)
            handler?.abandon()
        }
        finish(id, .failure(failure))
    }

    /// The origin of the last request: nearly every request goes where the one before went,
    /// and comparing is cheaper than hashing the key (its host, port, scheme and CA file).
    private var lastOrigin: Origin?

    private func origin(_ key: UpstreamOrigin) -> Origin {
        if let last = lastOrigin, last.key == key { return last }
        let origin = origins[key] ?? Origin(key: key, limits: .init(maxConnections: configuration.maxConnectionsPerOrigin,
                                                                     maxWaiting: configuration.maxWaitingPerOrigin))
        origins[key] = origin
        lastOrigin = origin
        return origin
    }

    private func lease(_ id: RequestID, _ origin: Origin) {
        switch origin.state.lease(id) {
        case .execute(let connection): execute(id, on: connection, in: origin)
        case .connect(let connection): connect(connection, for: id, in: origin)
        case .wait: break
        case .refused:
            finish(id, .failure(.unreachable("\(configuration.maxWaitingPerOrigin) requests already wait for a connection to \(origin.key)")))
        }
    }

    private func perform(_ handoff: UpstreamPoolState.Handoff?, in origin: Origin) {
        switch handoff {
        case .execute(let id, let connection): execute(id, on: connection, in: origin)
        case .connect(let connection, let id): connect(connection, for: id, in: origin)
        case .idle(let connection):
            origin.idleSince[connection] = .now()
            watch()
        case nil: break
        }
    }

    private func finish(_ id: RequestID, _ result: Result<UpstreamResponse, UpstreamFailure>) {
        guard let exchange = exchanges.removeValue(forKey: id) else { return }
        exchange.reply(result)
    }

    // MARK: Connections

    private func connect(_ connection: ConnectionID, for id: RequestID, in origin: Origin) {
        let key = origin.key
        let tls: (context: NIOSSLContext, serverName: String?)?
        do {
            tls = key.isTLS ? (try self.tls.context(caFile: key.caFile), key.serverName) : nil
        } catch {
            connectFailed(connection, in: origin, reason: "TLS configuration\(key.caFile.map { " (ca_file \($0))" } ?? ""): \(error)")
            return
        }
        let remaining = exchanges[id].map { $0.deadline - .now() } ?? configuration.connectTimeout
        ClientBootstrap(group: eventLoop)
            .connectTimeout(max(.milliseconds(1), min(remaining, configuration.connectTimeout)))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try UpstreamConnection.configure(channel, tls: tls) }
            }
            .connect(host: key.host, port: key.port)
            .assumeIsolated()
            .whenComplete { [self] result in
                switch result {
                case .success(let channel): connected(connection, channel: channel, in: origin)
                case .failure(let error): connectFailed(connection, in: origin, reason: "\(error)")
                }
            }
    }

    private func connected(_ connection: ConnectionID, channel: any Channel, in origin: Origin) {
        guard !isShutDown, let handler = try? channel.pipeline.syncOperations.handler(type: UpstreamConnection.self) else {
            channel.close(promise: nil)
            if !isShutDown { connectFailed(connection, in: origin, reason: "connection set-up failed") }
            return
        }
        origin.connections[connection] = handler
        handler.onClose = { [self] in remove(connection, from: origin) }
        guard let handoff = origin.state.connected(connection) else {
            handler.close()
            return
        }
        perform(handoff, in: origin)
    }

    private func connectFailed(_ connection: ConnectionID, in origin: Origin, reason: String) {
        let (owner, next) = origin.state.removed(connection)
        if let owner {
            // A connect cut short by the request's own deadline (its wait for a connection
            // took the rest) is the request timing out: 504, not an unreachable upstream.
            let timedOut = exchanges[owner].map { $0.deadline <= .now() } ?? false
            finish(owner, .failure(timedOut ? .timeout : .unreachable("cannot connect to \(origin.key): \(reason)")))
        }
        perform(next, in: origin)
    }

    private func execute(_ id: RequestID, on connection: ConnectionID, in origin: Origin) {
        origin.idleSince[connection] = nil
        // Neither is expected (a request that gives up is withdrawn first; a connection's
        // handler leaves with its place), but neither may strand the other.
        guard let exchange = exchanges[id] else {
            perform(origin.state.released(connection), in: origin)
            return
        }
        guard let handler = origin.connections[connection] else {
            remove(connection, from: origin)
            lease(id, origin)
            return
        }
        let reused = handler.completedExchanges > 0
        handler.execute(exchange.request, maxBody: exchange.maxBody) { [self] outcome in
            ended(id, on: connection, in: origin, reused: reused, outcome)
        }
    }

    private func ended(_ id: RequestID, on connection: ConnectionID, in origin: Origin, reused: Bool, _ outcome: UpstreamConnection.Outcome) {
        switch outcome {
        case .response(let response, let keepAlive):
            if keepAlive {
                perform(origin.state.released(connection), in: origin)
            } else {
                let handler = origin.connections[connection]
                remove(connection, from: origin)
                handler?.close()
            }
            finish(id, .success(response))
        case .failed(let failure, let beforeReply):
            // The upstream closed a pooled connection just as it was reused: send once more
            // on a new connection, in the same place, if sending twice is harmless.
            let retry = beforeReply && reused && exchanges[id].map { !$0.retried && $0.request.isIdempotent } == true
            if retry { exchanges[id]?.retried = true }
            let handler = origin.connections[connection]
            remove(connection, from: origin, retrying: retry ? id : nil)
            handler?.close()
            if !retry { finish(id, .failure(failure)) }
        }
    }

    /// Forgets a connection (closed, failed, not reusable) and gives its place to the next
    /// request. Safe to call more than once.
    private func remove(_ connection: ConnectionID, from origin: Origin, retrying: RequestID? = nil) {
        origin.idleSince[connection] = nil
        origin.connections[connection] = nil
        perform(origin.state.removed(connection, retrying: retrying).next, in: origin)
    }

    // MARK: Sweep

    /// Schedules the next sweep unless one is scheduled.
    private func watch() {
        guard sweep == nil, !isShutDown else { return }
        sweep = eventLoop.assumeIsolated().scheduleTask(in: configuration.sweepInterval) { [self] in
            sweep = nil
            sweepNow()
        }
    }

    /// Fails the requests past their deadline, closes the connections idle past the idle
    /// timeout; watches on while anything is left.
    private func sweepNow() {
        let now = NIODeadline.now()
        let late = exchanges.values.filter { $0.deadline <= now }.map(\.id)
        for id in late { giveUp(id, .timeout) }
        for origin in origins.values {
            let expired = origin.idleSince.filter { now - $0.value >= configuration.idleTimeout }.map(\.key)
            for connection in expired {
                origin.idleSince[connection] = nil
                guard origin.state.isIdle(connection) else { continue }
                let handler = origin.connections[connection]
                remove(connection, from: origin)
                handler?.close()
            }
        }
        if !exchanges.isEmpty || origins.values.contains(where: { !$0.idleSince.isEmpty }) { watch() }
    }

    // MARK: Shutdown

    /// Fails every request in flight or waiting and closes every connection; the future
    /// completes once the open ones are closed.
    func shutdown() -> EventLoopFuture<Void> {
        isShutDown = true
        sweep?.cancel()
        sweep = nil
        var closing: [EventLoopFuture<Void>] = []
        for origin in origins.values {
            _ = origin.state.drain()
            origin.idleSince.removeAll()
            for handler in origin.connections.values {
                if let closed = handler.closeFuture { closing.append(closed) }
                handler.abandon()
            }
            origin.connections.removeAll()
        }
        for id in Array(exchanges.keys) { finish(id, .failure(.unreachable("upstream connection pool shut down"))) }
        return EventLoopFuture.andAllComplete(closing, on: eventLoop)
    }
}
