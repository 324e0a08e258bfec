import ConciergeCore
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// An HTTP/1.1 origin on 127.0.0.1 whose replies a test chooses per request, headers and all:
/// the upstream for `cache.mode: http` tests (freshness, validators, `Vary`). It records every
/// request it receives; ``stop()`` closes it, after which connecting is refused.
public final class HTTPTestOrigin: Sendable {
    /// A request as the origin received it.
    public struct Request: Sendable {
        public var method: String
        public var uri: String
        public var headers: HTTPHeaders
        /// The target without its query.
        public var path: String { uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? uri }
    }

    /// What the origin answers.
    public struct Reply: Sendable {
        public var status: Int
        public var headers: [(String, String)]
        public var body: String

        public init(status: Int = 200, headers: [(String, String)] = [], body: String = "") {
            (self.status, self.headers, self.body) = (status, headers, body)
        }
    }

    public let port: Int
    private let channel: any Channel
    private let log: RequestLog

    private init(port: Int, channel: any Channel, log: RequestLog) {
        (self.port, self.channel, self.log) = (port, channel, log)
    }

    public var url: String { "http://127.0.0.1:\(port)" }

    /// Requests received so far, in order.
    public var requests: [Request] { log.all }

    /// Requests received for one path (the target without its query).
    public func requests(path: String) -> [Request] {
        requests.filter { $0.path == path }
    }

    /// - Parameter answer: the reply to one request, given it and how many requests for the
    ///   same target came before it.
    public static func start(_ answer: @escaping @Sendable (_ request: Request, _ earlier: Int) -> Reply) async throws -> HTTPTestOrigin {
        let log = RequestLog()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                log.opened(channel)
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(Handler(log: log, answer: answer))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return HTTPTestOrigin(port: channel.localAddress?.port ?? 0, channel: channel, log: log)
    }

    /// Closes the listener and every connection it accepted: a keep-alive connection a
    /// proxy holds in its pool is gone too, as when the origin process dies.
    public func stop() async {
        try? await channel.close()
        for child in log.connections { try? await child.close() }
    }

    private final class RequestLog: Sendable {
        private let state = Mutex<[Request]>([])
        private let children = Mutex<[any Channel]>([])
        func opened(_ channel: any Channel) { children.withLock { $0.append(channel) } }
        var connections: [any Channel] { children.withLock { $0 } }
        func append(_ request: Request) -> Int {
            state.withLock { list in
                let earlier = list.filter { $0.uri == request.uri }.count
                list.append(request)
                return earlier
            }
        }
        var all: [Request] { state.withLock { $0 } }
    }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        let log: RequestLog
        let answer: @Sendable (Request, Int) -> Reply
        var head: HTTPRequestHead?

        init(log: RequestLog, answer: @escaping @Sendable (Request, Int) -> Reply) {
            (self.log, self.answer) = (log, answer)
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let h): head = h
            case .body: break
            case .end:
                guard let h = head else { return }
                let request = Request(method: h.method.rawValue, uri: h.uri, headers: h.headers)
                let reply = answer(request, log.append(request))
                var headers = HTTPHeaders(reply.headers)
                let bodyless = h.method == .HEAD || reply.status == 304 || reply.status == 204
                if !bodyless { headers.replaceOrAdd(name: "Content-Length", value: String(reply.body.utf8.count)) }
                let status = HTTPResponseStatus(statusCode: reply.status)
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: h.version, status: status, headers: headers))), promise: nil)
                if !bodyless, !reply.body.isEmpty {
                    context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: reply.body)))), promise: nil)
                }
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }
}

extension ConciergeTestRig {
    /// Runs `body` with a rig whose upstream `origin` is `origin` and whose endpoints are the
    /// default ones followed by `endpoints`; stops both after, also when `body` throws.
    /// - Parameter asEnvironment: `origin` is also the current environment (pass-through requests go there).
    public static func with(origin: HTTPTestOrigin, endpoints: String, extra: String = "", asEnvironment: Bool = false,
                            clock: ManualClock? = nil, _ body: (ConciergeTestRig) async throws -> Void) async throws {
        let url = origin.url
        let setup = RigSetup(endpoints: TestConfig.defaultEndpoints + "\n" + endpoints, extra: extra, configTransform: { yaml in
            let added = yaml.replacingOccurrences(of: "  down: http://127.0.0.1:1\n", with: "  down: http://127.0.0.1:1\n  origin: \(url)\n")
            return asEnvironment ? added.replacingOccurrences(of: "environment: debug\n", with: "environment: origin\n") : added
        }, clock: clock)
        do {
            try await with(setup, body)
        } catch {
            await origin.stop()
            throw error
        }
        await origin.stop()
    }
}
