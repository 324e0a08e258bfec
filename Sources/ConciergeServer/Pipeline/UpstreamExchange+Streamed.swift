import ConciergeCore
import Logging
import NIOHTTP1

extension UpstreamExchange {
    /// A non-JSON, uncached request (downloads, uploads, anything opaque): forwarded with its
    /// bodies streamed both ways, nothing read or stored.
    func forwardStreamed(_ p: PreparedRequest, body: IncomingRequest.Body?) async -> ProxyAnswer {
        var attempt = Attempt(token: p.token)
        if p.injects {
            let (refresher, state) = (p.sessionUnit?.refresher ?? self.refresher, p.sessionUnit?.state ?? self.lifecycle.session)
            switch await TokenBeforeSending.decide(p, refresher: refresher, session: state.current) {
            case .send(let token): attempt.token = token
            case .answer(let reply, let code): return attempt.answer(reply, p, code: code)
            }
        }
        var request = UpstreamRequestBuilder.build(p, token: attempt.token, logger: logger)
        if case .stream(let stream, let length)? = body { request.body = .stream(stream, length: length) }
        p.trace?.beginAttempt(&request, replays: 0)
        let started = ContinuousClock.now
        do {
            let response = try await transport.stream(request)
            health.mark(p.upstream.name, down: false)
            p.trace?.endAttempt(status: response.status)
            var headers = HopByHopFields.endToEnd(response.headers, dropping: ["server"])
            if headers["content-length"].isEmpty, response.status == 204 || response.status == 304 {
                headers.remove(name: "content-length")
            }
            attempt.upstreamTime = ContinuousClock.now - started
            var answer = attempt.answer(ProxyReply(status: response.status, headers: headers, body: .upstream(response.body)), p)
            answer.report.succeeded = (200..<400).contains(answer.reply.status)
            return answer
        } catch {
            attempt.upstreamTime = ContinuousClock.now - started
            p.trace?.endAttempt(status: nil, failure: { if case .timeout = error { return "timeout" } else { return "unreachable" } }())
            if case .clientBody = error {
                // Aborted because the client's body broke: the listener answers 400/408.
                return attempt.answer(.error(400, "\(error)"), p)
            }
            stats.increment(.upstreamErrors)
            health.mark(p.upstream.name, down: true)
            logger.warning("upstream request failed", metadata: p.logMetadata(["endpoint": "\(p.endpoint.name)", "error": "\(error)"]))
            let status = { if case .timeout = error { return 504 } else { return 502 } }()
            return attempt.answer(LocalReplies.unavailable(p.config, status: status), p)
        }
    }
}
