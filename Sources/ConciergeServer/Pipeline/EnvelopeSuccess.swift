import ConciergeCore
import ConciergeStorage
import Logging
import NIOCore

/// Step 7 of the request path (docs/architecture.md), for a reply whose envelope says
/// success: validate, capture the session (login endpoint), invalidate what a write endpoint
/// names, and `unwrap`.
struct EnvelopeSuccess: Sendable {
    let lifecycle: SessionLifecycle
    let stats: ProxyStats
    let logger: Logger

    /// A success whose capture or `invalidates` is still to run.
    struct Pending: Sendable {
        var answer: ProxyAnswer
        let response: UpstreamResponse
        /// The parsed reply; `nil` when no step reads it (there is a capture only with it).
        let json: JSONValue?
        let captured: TokenReply?
        let capture: ConciergeConfig.Capture?
        let p: PreparedRequest
    }

    /// A success as far as it goes without waiting.
    enum Settled: Sendable {
        case done(UpstreamExchange.Result)
        case waits(Pending)
    }

    /// Validates; then the result, unless a capture or `invalidates` is still to run (``finish(_:)``).
    ///
    /// - Parameter json: the parsed reply, when a step reads it (`validate`, capture, `unwrap`);
    ///   `nil` when the envelope read the code alone. A success code was read from the body,
    ///   so it is JSON either way.
    func settle(_ upstreamAnswer: consuming ProxyAnswer, response: UpstreamResponse, json: JSONValue?, captured: TokenReply?,
                capture: ConciergeConfig.Capture?, _ p: PreparedRequest, _ attempt: UpstreamExchange.Attempt) -> Settled {
        if !p.endpoint.validate.isEmpty, let json, let problem = ResponseValidator(rules: p.endpoint.validate).problem(in: json) {
            logger.warning("reply failed validation", metadata: p.logMetadata(["endpoint": "\(p.endpoint.name)", "problem": "\(problem)"]))
            return .done(.failure(attempt.answer(LocalReplies.invalid(p.config, problem: problem), p)))
        }
        var answer = consume upstreamAnswer
        answer.report.succeeded = true
        if capture != nil || !p.endpoint.invalidates.isEmpty {
            return .waits(Pending(answer: answer, response: response, json: json, captured: captured, capture: capture, p: p))
        }
        return .done(Self.completed(consume answer, storedBody: response.body, response: response, p))
    }

    /// Capture the session (login endpoint), run `invalidates`, then the result.
    nonisolated(nonsending) func finish(_ pending: Pending) async -> UpstreamExchange.Result {
        var answer = pending.answer
        var storedBody = pending.response.body
        let p = pending.p
        if let capture = pending.capture, let json = pending.json {
            await (p.sessionUnit?.lifecycle ?? lifecycle).login(pending.captured, from: json, capture: capture,
                                                                limit: p.config.settings.session.maxRefreshes)
            if capture.redact {
                // The client never holds the captured tokens (token-handler pattern).
                var redacted = json.removing(path: capture.accessToken)
                if let refreshPath = capture.refreshToken { redacted = redacted.removing(path: refreshPath) }
                storedBody = ByteBuffer(bytes: redacted.serializedBytes)
                answer.reply.body = .buffer(storedBody)
            }
        }
        if !p.endpoint.invalidates.isEmpty { await invalidate(for: p.endpoint, session: p.sessionUnit?.lifecycle ?? lifecycle) }
        return Self.completed(answer, storedBody: storedBody, response: pending.response, p)
    }

    /// What may be stored, then `unwrap`.
    private static func completed(_ answer: consuming ProxyAnswer, storedBody: ByteBuffer, response: UpstreamResponse, _ p: PreparedRequest) -> UpstreamExchange.Result {
        let storable = UpstreamExchange.noStore(response.headers) ? nil
            : Storable(status: response.status, headers: UpstreamExchange.storedHeaders(answer.reply.headers), body: storedBody)
        if let unwrap = p.endpoint.unwrap, !LocalReplies.unwrap(&answer.reply, path: unwrap, config: p.config) {
            answer.report.succeeded = false
        }
        return .success(answer, storable: storable)
    }

    /// A write endpoint's `invalidates`: shared entries and the current user's.
    nonisolated(nonsending) private func invalidate(for endpoint: EndpointPolicy, session: SessionLifecycle) async {
        let user = session.session.current.map(session.cacheUser)
        let scope: InvalidationCriteria.EndpointScope = user.map { .sharedAnd($0) } ?? .sharedOnly
        let criteria = InvalidationCriteria.endpoints(endpoint.invalidates, scope: scope)
        let removed = (try? await lifecycle.cache.invalidate(criteria)) ?? 0
        _ = await lifecycle.fleetInvalidations?.publish(criteria)
        stats.increment(.invalidations)
        logger.info("write invalidated entries", metadata: ["endpoint": "\(endpoint.name)",
                                                           "targets": "\(endpoint.invalidates.joined(separator: ","))", "removed": "\(removed)"])
        lifecycle.events.publish("cache.invalidated", ["by": .string("endpoint:\(endpoint.name)"), "removed": .int(Int64(removed))])
    }
}
