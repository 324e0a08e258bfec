import ConciergeCore

extension ProxyPipeline {
    /// The one check of `session.clients` (docs/local-access.md), where the request's session
    /// is known: a request that uses a session its peer may not use is answered 403
    /// `{"error": "session not allowed: NAME"}` and goes no further (no cache, no upstream).
    /// Called only when ``RuntimeConfig/accessControlled``.
    func accessRefusal(_ incoming: IncomingRequest, route: PreparedRequest.Route) -> ProxyAnswer? {
        let identity = incoming.identity
        guard let name = SessionAccess.refusedSession(route.endpoint, config: route.config.settings, peer: identity.peer,
                                                      listenerSession: identity.listenerSession) else { return nil }
        return ProxyAnswer(LocalReplies.sessionNotAllowed(name), RequestReport(endpoint: route.endpoint.name))
    }
}
