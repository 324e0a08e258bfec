import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// Keep-alive HTTP/1.1 connections to upstreams on raw SwiftNIO: per event loop and origin
/// (scheme, host, port, CA file) a bounded set of client channels, each one exchange at a
/// time, replies buffered up to a limit. The buffered path's transport
/// (``PooledUpstreamTransport``).
///
/// - A request uses a pool on the caller's event loop when it runs on one of the group's
///   loops (or names one in ``preferredEventLoop``), so its client channel shares that loop;
///   otherwise the loops take turns.
/// - At most ``Configuration/maxConnectionsPerOrigin`` connections per loop and origin;
///   beyond that requests wait in line (at most ``Configuration/maxWaitingPerOrigin``, then
///   ``UpstreamFailure/unreachable(_:)``).
/// - `request.deadline` bounds the whole exchange (waiting, connecting, sending, reading):
///   past it (within ``Configuration/sweepInterval``) the connection in use is closed and the request fails with
///   ``UpstreamFailure/timeout``. A failed connect is ``UpstreamFailure/unreachable(_:)``;
///   a body over `maxBody` is ``UpstreamFailure/tooLarge`` (the connection is closed).
/// - Connections idle past ``Configuration/idleTimeout`` are closed; one the upstream closes
///   is dropped; a reply with `Connection: close` (or HTTP/1.0 without keep-alive) closes it.
/// - A request that fails on a reused connection before any reply byte (the upstream had
///   closed it) is sent once more on a new connection when its method is idempotent.
public final class UpstreamConnectionPool: Sendable {
    public struct Configuration: Sendable {
        /// Connections per event loop and origin (idle, busy and opening together).
        public var maxConnectionsPerOrigin = 16
        /// Requests waiting for a connection per event loop and origin.
        public var maxWaitingPerOrigin = 4096
        public var idleTimeout: TimeAmount = .seconds(60)
        /// The longest a connect may take, whatever time the request has left.
        public var connectTimeout: TimeAmount = .seconds(5)
        /// How often a loop's pool checks request deadlines and idle connections while it has
        /// any (one timer per loop, not one per request): how late past its deadline a request
        /// may fail, or past the idle timeout a connection may close.
        public var sweepInterval: TimeAmount = .milliseconds(50)

        public init() {}
    }

    /// An event loop whose pool a task's requests should use (its client channels then run on
    /// that loop), when the task itself does not run on one.
    @TaskLocal public static var preferredEventLoop: (any EventLoop)?

    private struct Loop: Sendable {
        let eventLoop: any EventLoop
        let pool: NIOLoopBoundBox<UpstreamLoopPool>
    }

    private let loops: [Loop]
    private let nextLoop = Atomic<Int>(0)
    private let nextRequest = Atomic<Int>(0)
    private let origins = UpstreamOrigin.Memo()

    public init(group: any EventLoopGroup, configuration: Configuration = .init()) {
        let tls = UpstreamTLSContexts()
        loops = group.makeIterator().map { loop in
            Loop(eventLoop: loop, pool: .makeBoxSendingValue(UpstreamLoopPool(eventLoop: loop, configuration: configuration, tls: tls),
                                                              eventLoop: loop))
        }
        precondition(!loops.isEmpty, "an event loop group without loops")
    }

    /// Sends a request with a buffered body (`.none` or `.bytes`) and buffers the reply.
    ///
    /// Runs on the caller's executor (`nonisolated(nonsending)`), so a caller on one of the
    /// group's event loops (an actor whose executor is the loop) is seen there and served by
    /// that loop's pool without a thread hop.
    ///
    /// - Parameter caFile: the PEM file trusted for an https origin instead of the system store.
    nonisolated(nonsending) public func send(_ request: UpstreamRequest, maxBody: Int, caFile: String? = nil) async throws(UpstreamFailure) -> UpstreamResponse {
        let (origin, wire) = try encode(request, caFile: caFile)
        let loop = chooseLoop()
        let promise = loop.eventLoop.makePromise(of: UpstreamResponse.self)
        let exchange = pendingExchange(origin, wire, request, maxBody: maxBody) { promise.completeWith($0.mapError { $0 }) }
        do {
            return try await withTaskCancellationHandler {
                if loop.eventLoop.inEventLoop {
                    loop.pool.value.start(exchange)
                } else {
                    loop.eventLoop.execute { loop.pool.value.start(exchange) }
                }
                return try await promise.futureResult.get()
            } onCancel: {
                exchange.cancellation.set()
                loop.eventLoop.execute { loop.pool.value.giveUp(exchange.id, .unreachable("cancelled")) }
            }
        } catch {
            throw (error as? UpstreamFailure) ?? .unreachable("\(error)")
        }
    }

    /// ``send(_:maxBody:caFile:)`` without a task or a future, for a caller on `eventLoop`
    /// (one of the group's): the exchange starts on that loop's pool at once, and `reply` is
    /// called once, there, with the reply or an ``UpstreamFailure`` (at once for a request the
    /// pool cannot send). `false`, and `reply` never called, when `eventLoop` is not one of the
    /// group's or the caller is not on it.
    public func start(_ request: UpstreamRequest, maxBody: Int, caFile: String? = nil, on eventLoop: any EventLoop,
                      reply: @escaping @Sendable (Result<UpstreamResponse, UpstreamFailure>) -> Void) -> Bool {
        guard eventLoop.inEventLoop, let loop = loops.first(where: { $0.eventLoop === eventLoop }) else { return false }
        do {
            let (origin, wire) = try encode(request, caFile: caFile)
            loop.pool.value.start(pendingExchange(origin, wire, request, maxBody: maxBody, reply: reply))
        } catch {
            reply(.failure(error))
        }
        return true
    }

    private func pendingExchange(_ origin: UpstreamOrigin, _ wire: UpstreamWireRequest, _ request: UpstreamRequest, maxBody: Int,
                          reply: @escaping @Sendable (Result<UpstreamResponse, UpstreamFailure>) -> Void) -> PendingExchange {
        PendingExchange(id: nextRequest.wrappingAdd(1, ordering: .relaxed).oldValue, origin: origin, request: wire,
                        maxBody: maxBody, deadline: request.deadline, reply: reply, cancellation: CancellationFlag())
    }

    /// Where `request` goes and its bytes, or why it cannot be sent.
    private func encode(_ request: UpstreamRequest, caFile: String?) throws(UpstreamFailure) -> (UpstreamOrigin, UpstreamWireRequest) {
        guard let (origin, target) = origins.parse(base: request.base, target: request.target, caFile: caFile) else {
            throw .unreachable("not an http:// or https:// URL: \(request.url)")
        }
        let body: ByteBuffer?
        switch request.body {
        case .none: body = nil
        case .bytes(let bytes): body = bytes
        case .stream: throw .unreachable("a streamed request body cannot go through the connection pool")
        }
        let wire: UpstreamWireRequest
        do {
            wire = try UpstreamWireRequest.encode(method: request.method, target: target, authority: origin.authority,
                                                  headers: request.headers, body: body)
        } catch {
            throw .unreachable("request not sent: \(error)")
        }
        return (origin, wire)
    }

    /// Open connections (idle, busy or opening) over every loop and origin.
    public func connectionCount() async -> Int {
        var total = 0
        for loop in loops {
            total += (try? await loop.eventLoop.submit { loop.pool.value.connectionCount }.get()) ?? 0
        }
        return total
    }

    /// Fails requests in flight and closes every connection; later requests fail at once.
    public func shutdown() async {
        let closed = loops.map { loop in loop.eventLoop.flatSubmit { loop.pool.value.shutdown() } }
        guard let first = loops.first else { return }
        try? await EventLoopFuture.andAllComplete(closed, on: first.eventLoop).get()
    }

    private func chooseLoop() -> Loop {
        for candidate in [MultiThreadedEventLoopGroup.currentEventLoop, Self.preferredEventLoop] {
            if let candidate, let loop = loops.first(where: { $0.eventLoop === candidate }) { return loop }
        }
        let turn = UInt(bitPattern: nextLoop.wrappingAdd(1, ordering: .relaxed).oldValue)
        return loops[Int(turn % UInt(loops.count))]
    }
}

/// Whether a request's task was cancelled; read on the event loop, set from any thread.
final class CancellationFlag: Sendable {
    private let flag = Atomic<Bool>(false)

    var isSet: Bool { flag.load(ordering: .acquiring) }
    func set() { flag.store(true, ordering: .releasing) }
}
