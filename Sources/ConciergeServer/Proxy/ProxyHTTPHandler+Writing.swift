import ConciergeCore
import NIOCore
import NIOHTTP1

/// The replies ``ProxyHTTPHandler`` writes below the response encoder that depend on nothing
/// of the connection's state.
extension ProxyHTTPHandler {
    /// Bodies up to this size are copied behind the head they follow.
    static var inlineBodyBytes: Int { 16 * 1024 }

    /// 408 for a head that never completed: no request to answer through the HTTP layers, so
    /// the bytes go out below the response encoder.
    func writeHeaderTimeout(context: ChannelHandlerContext) {
        let body = #"{"error":"request header timed out"}"#
        let head = WireHead(.status(.http1_1, 408), fields: ["Content-Type": "application/json"], contentLength: body.utf8.count, closes: true)
        var bytes = head.bytes(followedBy: body.utf8.count)
        bytes.writeString(body)
        guard let encoder = try? context.pipeline.syncOperations.context(handlerType: HTTPResponseEncoder.self) else {
            context.close(promise: nil)
            return
        }
        let channel = context.channel
        encoder.writeAndFlush(NIOAny(bytes)).whenComplete { _ in channel.close(promise: nil) }
    }
}

extension HTTPMethod {
    /// The method as it appeared on the wire (NIO spells `M-SEARCH` as `MSEARCH`).
    var wireName: String {
        if case .MSEARCH = self { return "M-SEARCH" }
        return rawValue
    }
}
