@testable import ConciergeServer
import NIOCore
import Synchronization

/// An upstream made of a synchronous script, with no network, that can start an exchange on an
/// event loop as the daemon's pooled transport does (``UpstreamTransport/start(_:maxBody:on:reply:)``):
/// so the usual miss runs on the loop (``ProxyPipeline/missOnLoop(_:on:answer:)``) over it, and
/// the awaited miss (``ProxyPipeline/run(_:)``) over ``send(_:maxBody:)``, with the same replies.
final class LoopScriptedTransport: UpstreamTransport {
    typealias Script = @Sendable (UpstreamRequest) -> Result<UpstreamResponse, UpstreamFailure>
    private let script: Script
    private let sent = Mutex<[UpstreamRequest]>([])

    init(_ script: @escaping Script) {
        self.script = script
    }

    /// The requests sent so far, in order.
    var requests: [UpstreamRequest] { sent.withLock { $0 } }

    func send(_ request: UpstreamRequest, maxBody: Int) async throws(UpstreamFailure) -> UpstreamResponse {
        sent.withLock { $0.append(request) }
        return try script(request).get()
    }

    func stream(_ request: UpstreamRequest) async throws(UpstreamFailure) -> StreamedUpstreamReply {
        sent.withLock { $0.append(request) }
        throw .unreachable("streaming is not scripted")
    }

    /// The reply comes later on `eventLoop`, as a pooled connection's would.
    func start(_ request: UpstreamRequest, maxBody: Int, on eventLoop: any EventLoop,
               reply: @escaping @Sendable (Result<UpstreamResponse, UpstreamFailure>) -> Void) -> Bool {
        sent.withLock { $0.append(request) }
        let outcome = script(request)
        eventLoop.execute { reply(outcome) }
        return true
    }
}
