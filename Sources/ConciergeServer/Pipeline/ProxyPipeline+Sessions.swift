import ConciergeCore
import Foundation
import NIOHTTP1

extension ProxyPipeline {
    /// The session a request uses, as step 2 begins.
    struct SessionChoice {
        /// The route, as the view of the chosen session.
        var route: PreparedRequest.Route
        /// The live session (or `per_client` instance); `nil`: the pipeline's own (no registry).
        var slot: (any SessionSlot)?
        var tokens: SessionTokens?
    }

    /// A session chosen, or the request's answer (400, 503) when none can be.
    enum SessionSelection {
        case chosen(SessionChoice)
        case answer(ProxyAnswer)
        /// The `per_client` instance of `id` is not loaded: it is read from SQLite in the
        /// request's task, off the event loop (``RequestPlan/TaskPlan/firstUse(_:session:id:)``),
        /// and the session chosen again.
        case firstUse(session: SessionUnit, id: String)
    }

    /// The header a request names its session with (where `listen.session_header: true`).
    static let sessionNameHeader = "concierge-session-name"

    /// Step 2's first part: which session the request uses. Routing already chose it when the
    /// endpoint or the listener names one (``PreparedRequest/Route``): then this reads the
    /// view's live session and nothing else. Otherwise the `Concierge-Session-Name` header
    /// chooses (400 when it names none, or no session is selected for an endpoint that needs
    /// one); a `per_client` session's instance comes from its header (400 when the id is not
    /// valid; 503 for a login beyond `max` live instances).
    func selectSession(_ incoming: IncomingRequest, route: PreparedRequest.Route) -> SessionSelection {
        var route = route
        if route.endpoint.session == nil, let listener = incoming.identity.listenerSession, listener != route.config.sessionName {
            // The listener's session (`listen.proxy[].session`), unless the endpoint names one.
            if let view = runtime.current.view(forSession: listener) { route = PreparedRequest.Route(route, session: view) }
        } else if route.selectsByHeader {
            let (chosen, refusal) = chooseByHeader(incoming.headers, route)
            guard let chosen else { return .answer(refusal!) }
            route = chosen
        }
        // `clients` of the chosen session (docs/local-access.md): 403 before anything else.
        if route.config.accessControlled, let refused = accessRefusal(incoming, route: route) { return .answer(refused) }
        let config = route.config
        guard let slot = config.sessionSlot else { return .chosen(SessionChoice(route: route, slot: nil, tokens: session.current)) }
        guard let perClient = config.settings.session.perClient else {
            return .chosen(SessionChoice(route: route, slot: slot, tokens: slot.currentTokens))
        }
        return instance(incoming.headers, route: route, slot: slot, header: perClient.header, max: perClient.max)
    }

    /// The view of the session the request's header names, or `default`'s without one.
    private func chooseByHeader(_ headers: HTTPHeaders, _ route: PreparedRequest.Route) -> (PreparedRequest.Route?, ProxyAnswer?) {
        let base = route.config
        guard let name = headers.first(name: Self.sessionNameHeader) else {
            if base.settings.sessions["default"] != nil || base.settings.sessions.isEmpty || !Self.needsSession(route) {
                return (route, nil)
            }
            return (nil, Self.refusal(400, "no session selected", route))
        }
        guard ConfigLoader.isSessionName(name), base.settings.sessions[name] != nil, let view = base.view(forSession: name) else {
            return (nil, Self.refusal(400, ConfigLoader.isSessionName(name) ? "unknown session: \(name)" : "no session selected", route))
        }
        return (PreparedRequest.Route(route, session: view), nil)
    }

    /// The instance of a `per_client` session the request's id names.
    private func instance(_ headers: HTTPHeaders, route: PreparedRequest.Route, slot: any SessionSlot, header: String,
                          max: Int) -> SessionSelection {
        guard let unit = slot as? SessionUnit, unit.instances != nil, let sessions = self.sessions else {
            return .chosen(SessionChoice(route: route, slot: slot, tokens: nil))
        }
        guard let id = headers.first(name: header) else {
            if Self.needsSession(route) { return .answer(Self.refusal(400, "missing \(header)", route)) }
            return .chosen(SessionChoice(route: route, slot: slot, tokens: nil))
        }
        guard SessionUnit.isInstanceID(id) else {
            return .answer(Self.refusal(400, "invalid \(header): 16-128 characters of A-Z a-z 0-9 . _ ~ -", route))
        }
        guard let instance = sessions.loadedInstance(of: unit, id: id) else { return .firstUse(session: unit, id: id) }
        let tokens = instance.currentTokens
        let isLogin = route.config.settings.session.capture?.endpoint == route.endpoint.name
        if isLogin, tokens == nil, let table = unit.instances, table.liveCount >= max {
            instance.lifecycle.logger.warning("per-client login refused: per_client.max live instances reached",
                                              metadata: ["max": "\(max)", "live": "\(table.liveCount)"])
            return .answer(Self.refusal(503, "too many sessions: per_client.max (\(max)) reached", route))
        }
        return .chosen(SessionChoice(route: route, slot: instance, tokens: tokens))
    }

    /// A request whose `per_client` instance was not loaded: reads it from SQLite (on a
    /// storage reader; the task waits without blocking its event loop), then plans the request
    /// again, now without a wait. 503 when it cannot be read.
    nonisolated(nonsending) func firstUse(_ incoming: IncomingRequest, session: SessionUnit, id: String) async -> ProxyAnswer {
        let route = incoming.route ?? runtime.route(method: incoming.method, target: incoming.target)
        do {
            _ = try await sessions?.instance(of: session, id: id)
        } catch {
            session.lifecycle.logger.error("could not read a per-client instance", metadata: ["error": "\(error)"])
            return ProxyAnswer(LocalReplies.unavailable(route.config, status: 503), RequestReport(endpoint: route.endpoint.name))
        }
        let again = plan(incoming, onLoop: false)
        // Forgotten again at once (a logout of every instance meanwhile): not read twice.
        if case .task(.firstUse) = again {
            return ProxyAnswer(LocalReplies.unavailable(route.config, status: 503), RequestReport(endpoint: route.endpoint.name))
        }
        return await answer(again)
    }

    /// Whether the request's endpoint uses a session: it injects the token, or it is a login.
    private static func needsSession(_ route: PreparedRequest.Route) -> Bool {
        route.endpoint.login != .none || route.config.settings.sessions.values.contains { $0.capture?.endpoint == route.endpoint.name }
    }

    private static func refusal(_ status: Int, _ message: String, _ route: PreparedRequest.Route) -> ProxyAnswer {
        ProxyAnswer(.json(status, ["error": .string(message)]), RequestReport(endpoint: route.endpoint.name))
    }
}
