import ConciergeCore
import Foundation
import NIOCore
import NIOHTTP1

/// Concierge's own routes on the proxy listener, under `/_concierge/` (batch, chain, events):
/// batch, chain and the events stream.
struct ConciergeRoutes: Sendable {
    static let prefix = "/_concierge/"
    let pipeline: ProxyPipeline
    let log: @Sendable (IncomingRequest, ProxyAnswer, ContinuousClock.Instant) -> Void

    func handle(_ incoming: IncomingRequest) async -> ProxyAnswer {
        let path = incoming.target.split(separator: "?", maxSplits: 1).first.map(String.init) ?? incoming.target
        var answer: ProxyAnswer
        switch (incoming.method, path) {
        case ("POST", "/_concierge/batch"):
            answer = await BatchRunner(pipeline: pipeline, log: log).batch(incoming)
        case ("POST", "/_concierge/chain"):
            answer = await BatchRunner(pipeline: pipeline, log: log).chain(incoming)
        case ("GET", "/_concierge/events"):
            answer = ProxyAnswer(eventStream(), RequestReport(succeeded: true))
        case (_, "/_concierge/batch"), (_, "/_concierge/chain"), (_, "/_concierge/events"):
            answer = ProxyAnswer(.error(405, "method \(incoming.method) not allowed on \(path)"), RequestReport())
        default:
            answer = ProxyAnswer(.error(404, "no such Concierge route: \(path)"), RequestReport())
        }
        answer.report.endpoint = String(path.dropFirst(Self.prefix.count - 1))
        return answer
    }

    /// `text/event-stream` of the event bus, with `id:` lines, a `retry:` hint and a
    /// comment heartbeat every 15 s.
    func eventStream() -> ProxyReply {
        let subscription = pipeline.events.subscribe()
        let (stream, continuation) = AsyncStream.makeStream(of: ByteBuffer.self, bufferingPolicy: .bufferingOldest(512))
        continuation.yield(ByteBuffer(string: "retry: 3000\n: connected\n\n"))
        // Unstructured because the stream outlives this call: the connection's writer reads it,
        // and its end (the client gone) cancels this task (`onTermination`).
        let producer = Task {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await event in subscription {
                        var data = event.data
                        if case .object(var members) = data {
                            members["type"] = .string(event.type)
                            members["time"] = .double(event.time.timeIntervalSince1970)
                            data = .object(members)
                        }
                        let text = "id: \(event.id)\nevent: \(event.type)\ndata: \(data.serialized)\n\n"
                        if case .dropped = continuation.yield(ByteBuffer(string: text)) { break }
                    }
                    continuation.finish()
                }
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .seconds(15))
                        if Task.isCancelled { break }
                        if case .terminated = continuation.yield(ByteBuffer(string: ": keep-alive\n\n")) { break }
                    }
                }
                await group.next()
                group.cancelAll()
            }
        }
        continuation.onTermination = { _ in producer.cancel() }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "text/event-stream")
        headers.add(name: "Cache-Control", value: "no-cache")
        headers.add(name: "X-Accel-Buffering", value: "no")
        return ProxyReply(status: 200, headers: headers, body: .events(StreamHandle(stream)))
    }
}
