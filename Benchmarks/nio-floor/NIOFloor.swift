// The floor for a cache hit: a bare SwiftNIO HTTP/1.1 server that answers every request with
// the same ready bytes, a 200 with the head and 1 KB JSON body of the benchmark's origin.
// Its pipeline is the part of Concierge's listener that any SwiftNIO server has (NIO's request
// decoder, then one handler); what it leaves out (routing, the cache key, the hot tier, the
// `Age` and `Cache-Status` of a hit, the request log, the counters) is what a hit costs on top.
// `Benchmarks/profile.sh FLOOR=1` measures it under callgrind with the same driver as Concierge
// and nginx.
//
//     nio-floor --port 8099
import NIOCore
import NIOHTTP1
import NIOPosix

final class ReadyReply: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = ByteBuffer

    private let reply: ByteBuffer

    init(reply: ByteBuffer) {
        self.reply = reply
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .end = unwrapInboundIn(data) else { return }
        context.writeAndFlush(wrapOutboundOut(reply), promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

@main
struct NIOFloor {
    static func main() throws {
        var port = 8099
        var arguments = CommandLine.arguments.dropFirst().makeIterator()
        while let argument = arguments.next() {
            switch argument {
            case "--port":
                guard let value = arguments.next(), let number = Int(value) else { fatalError("--port needs a number") }
                port = number
            default:
                fatalError("usage: nio-floor [--port N]")
            }
        }

        let note = String(repeating: "x", count: 900)
        let body = #"{"code":200,"msg":"ok","data":{"items":[{"id":1,"name":"item 1","note":"\#(note)"}]}}"#
        var bytes = ByteBuffer()
        bytes.writeString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n"
            + "Cache-Control: max-age=60\r\nX-Cache: HIT\r\n\r\n")
        bytes.writeString(body)
        let reply = bytes

        let group = MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)
        let server = try ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))
                    try channel.pipeline.syncOperations.addHandler(ReadyReply(reply: reply))
                }
            }
            .bind(host: "127.0.0.1", port: port).wait()
        print("nio-floor listening on 127.0.0.1:\(server.localAddress?.port ?? port)")
        try server.closeFuture.wait()
    }
}
