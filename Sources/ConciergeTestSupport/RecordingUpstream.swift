import NIOCore
import NIOPosix
import Synchronization

/// A raw TCP upstream for tests that records every byte each connection sends and never
/// answers (unless `reply` is set): it shows exactly what Concierge put on the wire,
/// including whether a chunked body got its terminating `0\r\n\r\n`.
public final class RecordingUpstream: Sendable {
    public let port: Int
    private let channel: any Channel
    private let store: Store

    final class Store: Sendable {
        let state = Mutex(State())
    }

    struct State {
        var connections: [Int: [UInt8]] = [:]
        var open = Set<Int>()
        var nextID = 0
    }

    /// - Parameter reply: bytes answered for every head a connection sends (each blank line
    ///   ends one: bodies in these tests hold none); `nil` never answers.
    public static func start(reply: String? = nil) async throws -> RecordingUpstream {
        let store = Store()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Recorder(store: store, reply: reply))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return RecordingUpstream(port: channel.localAddress?.port ?? 0, channel: channel, store: store)
    }

    private init(port: Int, channel: any Channel, store: Store) {
        self.port = port
        self.channel = channel
        self.store = store
    }

    /// Everything received, all connections in order of their start.
    public var received: String {
        store.state.withLock { s in s.connections.keys.sorted().map { String(decoding: s.connections[$0]!, as: UTF8.self) }.joined() }
    }

    /// Every byte received, all connections in order of their start (for bytes that are not UTF-8).
    public var receivedBytes: [UInt8] {
        store.state.withLock { s in s.connections.keys.sorted().flatMap { s.connections[$0]! } }
    }

    public var connectionCount: Int { store.state.withLock { $0.connections.count } }
    public var openConnections: Int { store.state.withLock { $0.open.count } }

    public func stop() async {
        try? await channel.close()
    }

    final class Recorder: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer
        let store: Store
        let reply: String?
        var id = -1
        var answered = 0

        init(store: Store, reply: String?) {
            self.store = store
            self.reply = reply
        }

        func channelActive(context: ChannelHandlerContext) {
            id = store.state.withLock { s -> Int in
                let n = s.nextID
                s.nextID += 1
                s.connections[n] = []
                s.open.insert(n)
                return n
            }
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            let n = id
            let heads = store.state.withLock { s -> Int in
                s.connections[n, default: []] += Array(buffer.readableBytesView)
                return String(decoding: s.connections[n]!, as: UTF8.self).components(separatedBy: "\r\n\r\n").count - 1
            }
            guard let reply else { return }
            while answered < heads {
                answered += 1
                context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: reply)), promise: nil)
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            let n = id
            _ = store.state.withLock { $0.open.remove(n) }
        }
    }
}
