import ConciergeTestSupport
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

/// A keep-alive HTTP/1.1 upstream on 127.0.0.1 (a port chosen at run time, plain or TLS)
/// whose replies a test chooses per request, and which counts connections: accepted, open
/// now, and the most open at once. ``stop()`` closes the listener and every connection.
final class KeepAliveUpstream: Sendable {
    /// One request as the upstream saw it.
    struct Request: Sendable {
        let head: HTTPRequestHead
        let body: String
        /// Which connection (0 = the first accepted) and which request on it (0 = the first).
        let connection: Int
        let sequence: Int
    }

    /// What the upstream does with one request.
    indirect enum Reply: Sendable {
        /// A whole reply; `close` closes the connection after it (the head says so only if
        /// `headers` does).
        case send(status: HTTPResponseStatus = .ok, headers: [(String, String)] = [], body: String, close: Bool = false)
        /// A head announcing `announced` body bytes, only `sent` of them, then the connection closes.
        case truncated(announced: Int, sent: String)
        /// Closes the connection without a reply byte.
        case closeWithoutReply
        case delayed(TimeAmount, Reply)
        /// Never answers (until stopped).
        case silence
    }

    struct Counts: Sendable {
        var accepted = 0
        var open = 0
        var mostOpen = 0
    }

    let port: Int
    private let listener: any Channel
    private let state: Shared

    final class Shared: Sendable {
        let counts = Mutex(Counts())
        let requests = Mutex<[Request]>([])
        let children = Mutex<[ObjectIdentifier: any Channel]>([:])
        let reply: @Sendable (Request) -> Reply

        init(reply: @escaping @Sendable (Request) -> Reply) {
            self.reply = reply
        }
    }

    static func start(group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, tls: NIOSSLContext? = nil,
                      reply: @escaping @Sendable (Request) -> Reply) async throws -> KeepAliveUpstream {
        let shared = Shared(reply: reply)
        let listener = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 1024)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let id = shared.counts.withLock { c -> Int in
                        c.accepted += 1
                        c.open += 1
                        c.mostOpen = max(c.mostOpen, c.open)
                        return c.accepted - 1
                    }
                    shared.children.withLock { $0[ObjectIdentifier(channel)] = channel }
                    if let tls { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls)) }
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: false)
                    try channel.pipeline.syncOperations.addHandler(Responder(shared: shared, connection: id))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return KeepAliveUpstream(port: listener.localAddress?.port ?? 0, listener: listener, state: shared)
    }

    private init(port: Int, listener: any Channel, state: Shared) {
        self.port = port
        self.listener = listener
        self.state = state
    }

    var counts: Counts { state.counts.withLock { $0 } }
    var requests: [Request] { state.requests.withLock { $0 } }
    var url: String { "http://127.0.0.1:\(port)" }

    /// Stops accepting and closes every connection; returns once they are closed.
    func stop() async {
        try? await listener.close()
        let children = state.children.withLock { Array($0.values) }
        for child in children { try? await child.close() }
    }

    /// Answers requests as `reply` says; closes the connection when a reply says so.
    final class Responder: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        let shared: Shared
        let connection: Int
        var sequence = 0
        var head: HTTPRequestHead?
        var body = ""

        init(shared: Shared, connection: Int) {
            self.shared = shared
            self.connection = connection
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let h):
                head = h
                body = ""
            case .body(let part):
                body += String(buffer: part)
            case .end:
                guard let head else { return }
                let request = Request(head: head, body: body, connection: connection, sequence: sequence)
                sequence += 1
                shared.requests.withLock { $0.append(request) }
                perform(shared.reply(request), context: context)
            }
        }

        func perform(_ reply: Reply, context: ChannelHandlerContext) {
            switch reply {
            case .send(let status, let headers, let text, let close):
                var fields = HTTPHeaders(headers)
                fields.replaceOrAdd(name: "Content-Length", value: String(text.utf8.count))
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: fields))), promise: nil)
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: text)))), promise: nil)
                let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
                if close { done.assumeIsolated().whenComplete { _ in context.close(promise: nil) } }
            case .truncated(let announced, let sent):
                let fields = HTTPHeaders([("Content-Length", String(announced)), ("Content-Type", "application/json")])
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: fields))), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: sent)))))
                    .assumeIsolated().whenComplete { _ in context.close(promise: nil) }
            case .closeWithoutReply:
                context.close(promise: nil)
            case .delayed(let delay, let next):
                context.eventLoop.assumeIsolated().scheduleTask(in: delay) { [self] in
                    if context.channel.isActive { perform(next, context: context) }
                }
            case .silence:
                break
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            shared.counts.withLock { $0.open -= 1 }
            shared.children.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(context.channel)) }
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }
}
