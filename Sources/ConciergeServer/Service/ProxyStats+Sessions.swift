import Prometheus
import Synchronization

/// Counters by session (`session` label: the session's name, never an instance id): token
/// requests, the ones that gave no token, logins and logouts.
final class SessionCounters: Sendable {
    enum Kind: String, CaseIterable, Sendable {
        case tokenRequests = "concierge_session_token_requests_total"
        case tokenRequestFailures = "concierge_session_token_request_failures_total"
        case logins = "concierge_session_logins_total"
        case logouts = "concierge_session_logouts_total"

        var help: String {
            switch self {
            case .tokenRequests: return "Calls to a session's token endpoint (refresh or app token), by session."
            case .tokenRequestFailures: return "Token requests that gave no token, by session."
            case .logins: return "Sessions (or per-client instances) logged in, by session."
            case .logouts: return "Sessions (or per-client instances) logged out, by session."
            }
        }
    }

    private struct Key: Hashable {
        let kind: Kind
        let session: String
    }

    private let registry: PrometheusCollectorRegistry
    private let counters = Mutex<[Key: Prometheus.Counter]>([:])

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
    }

    func increment(_ kind: Kind, session: String) {
        let key = Key(kind: kind, session: session)
        let counter = counters.withLock { map -> Prometheus.Counter in
            if let c = map[key] { return c }
            let c = registry.makeCounter(descriptor: .named(kind.rawValue, kind.help), labels: [("session", session)])
            map[key] = c
            return c
        }
        counter.increment()
    }
}
