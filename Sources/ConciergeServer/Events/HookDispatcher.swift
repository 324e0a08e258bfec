import ConciergeCore
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import ServiceLifecycle

/// POSTs matching events as JSON to the `hooks:` URLs, off the request path: each delivery is
/// a child task of this service's task group, with a 5 s timeout and up to 3 attempts (0.5 s,
/// 1 s apart). A dead hook never blocks anything.
///
/// The daemon's service group stops it last; deliveries still under way then are cancelled.
final class HookDispatcher: Service, Sendable {
    let runtime: Runtime
    /// Hooks go out through AsyncHTTPClient, apart from the request path's transport.
    let client: UpstreamClient
    let logger: Logger
    private let deliveries = AsyncStream.makeStream(of: (url: String, body: ByteBuffer).self)

    init(runtime: Runtime, client: UpstreamClient, logger: Logger) {
        (self.runtime, self.client, self.logger) = (runtime, client, logger)
    }

    func deliver(_ event: ConciergeEvent) {
        let hooks = runtime.current.settings.hooks.filter { $0.events.contains("*") || $0.events.contains(event.type) }
        guard !hooks.isEmpty else { return }
        var payload: [String: JSONValue] = ["id": .int(Int64(event.id)), "type": .string(event.type), "time": .double(event.time.timeIntervalSince1970)]
        if case .object(let members) = event.data { payload.merge(members) { a, _ in a } }
        let body = ByteBuffer(bytes: JSONValue.object(payload).serializedBytes)
        for hook in hooks { deliveries.continuation.yield((hook.url, body)) }
    }

    func run() async {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                for await (url, body) in self.deliveries.stream {
                    group.addTask { await self.post(body, to: url) }
                }
            }
        }
    }

    private func post(_ body: ByteBuffer, to url: String) async {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        headers.add(name: "User-Agent", value: "concierge-hooks")
        let request = UpstreamRequest(method: "POST", url: url, headers: headers, body: .bytes(body), timeout: .seconds(5))
        for attempt in 1...3 {
            do {
                let response = try await client.send(request, maxBody: 64 << 10)
                if (200..<300).contains(response.status) { return }
                logger.warning("hook answered an error", metadata: ["url": "\(url)", "status": "\(response.status)", "attempt": "\(attempt)"])
            } catch {
                if Task.isCancelled { return }
                logger.warning("hook delivery failed", metadata: ["url": "\(url)", "error": "\(error)", "attempt": "\(attempt)"])
            }
            if attempt < 3 { try? await Task.sleep(for: .milliseconds(500 * attempt)) }
            if Task.isCancelled { return }
        }
    }
}
