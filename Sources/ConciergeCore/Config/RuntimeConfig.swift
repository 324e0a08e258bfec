import Synchronization

/// One loaded configuration with the pipeline steps built from it. Immutable: a reload
/// builds a new one and swaps it in ``Runtime``.
public final class RuntimeConfig: Sendable {
    /// The configuration as loaded from the file.
    public let settings: ConciergeConfig
    public let router: EndpointRouter
    public let commonParams: CommonParamsStep
    public let loginGuard = LoginGuard()
    public let injector: TokenInjector
    public let envelope: EnvelopeReader
    /// Volatile names plus the injected-token names: never in a cache key.
    public let keyExclusions: Set<String>
    /// ``keyExclusions`` as a key built from a query's text asks them.
    public let excludedKeyParams: ExcludedParams
    public let tokenParamNames: Set<String>
    /// Which `Host` names the proxy and admin listeners answer.
    public let hostPolicy: HostPolicy
    /// Masks credentials in log lines.
    public let redactor: SecretRedactor
    /// Some session has `clients`: requests are checked (``SessionAccess``); otherwise that
    /// check costs one load of this flag.
    public let accessControlled: Bool

    public init(config: ConciergeConfig) {
        settings = config
        router = EndpointRouter(endpoints: config.endpoints, passThrough: config.cache.passThrough)
        commonParams = CommonParamsStep(common: config.common)
        injector = TokenInjector(points: config.session.inject)
        envelope = EnvelopeReader(envelope: config.envelope)
        tokenParamNames = injector.paramNames
        var listenerHosts: [String] = []
        for spec in config.listen.proxyListeners.map(\.address) + [config.listen.admin] {
            if case .tcp(let host, _) = spec { listenerHosts.append(host) }
        }
        hostPolicy = HostPolicy(listenerHosts: listenerHosts, allowedHosts: config.listen.allowedHosts,
                                upstreamHosts: config.upstreams.map(\.host))
        var masked = injector.paramNames.union(injector.headerNames)
        if let signing = config.signing { masked.insert(signing.param) }
        var tokenPaths: [String?] = []
        if let capture = config.session.capture { tokenPaths += [capture.accessToken, capture.refreshToken] }
        for endpoint in [config.session.refresh, config.session.appToken].compactMap({ $0 }) {
            tokenPaths += [endpoint.accessToken, endpoint.refreshToken]
        }
        for path in tokenPaths.compactMap({ $0 }) {
            if let last = path.split(separator: ".").last { masked.insert(String(last)) }
        }
        redactor = SecretRedactor(extraNames: masked)
        keyExclusions = config.cache.volatileParams.union(injector.paramNames)
        excludedKeyParams = ExcludedParams(keyExclusions)
        accessControlled = config.hasSessionClients
    }

    /// The signing settings that apply to an endpoint.
    public func signer(for endpoint: EndpointPolicy) -> RequestSigner? {
        switch endpoint.sign {
        case .off: return nil
        case .custom(let s): return RequestSigner(config: s)
        case .inherit: return settings.signing.map(RequestSigner.init)
        }
    }

    /// Current cache version of each cacheable endpoint (for the sweeper), and of the
    /// pass-through when top-level `cache.mode: http` stores its replies: an endpoint missing
    /// here is gone from the config and its entries are swept whatever their freshness.
    public var cacheVersions: [String: Int] {
        var out: [String: Int] = [:]
        if settings.cache.mode == .http { out[settings.cache.passThrough.name] = settings.cache.version }
        for e in settings.endpoints { out[e.name] = e.cache.version ?? settings.cache.version }
        return out
    }
}

/// The daemon's mutable run-time settings: the current configuration and environment.
public final class Runtime: Sendable {
    private struct State {
        var config: RuntimeConfig
        var environment: String
    }

    private let state: Mutex<State>
    /// Bumped after every change of `state`: a reader that saw a generation and then read
    /// the state has a state at least that new.
    private let changes = Atomic<Int>(0)

    public init(config: ConciergeConfig) {
        state = Mutex(State(config: RuntimeConfig(config: config), environment: config.environment))
    }

    /// Changes with every reload and environment switch. Reading it is one atomic load, no
    /// lock: a connection keeps what it read (configuration, routes) while it stays the same.
    public var generation: Int { changes.load(ordering: .acquiring) }

    public var current: RuntimeConfig { state.withLock { $0.config } }
    public var environment: String { state.withLock { $0.environment } }

    /// Both at once, consistent with each other.
    public var snapshot: (config: RuntimeConfig, environment: String) {
        state.withLock { ($0.config, $0.environment) }
    }

    /// Swaps in a reloaded config. The environment chosen at run time survives a reload
    /// when the new file still has that upstream.
    public func replace(with config: ConciergeConfig, keepEnvironment: Bool = true) {
        state.withLock { s in
            let keep = keepEnvironment && config.upstream(named: s.environment) != nil
            s.config = RuntimeConfig(config: config)
            if !keep { s.environment = config.environment }
        }
        changes.add(1, ordering: .releasing)
    }

    /// A request's endpoint under the current configuration and environment.
    public func route(method: String, target: String) -> PreparedRequest.Route {
        let (config, environment) = snapshot
        return PreparedRequest.Route(method: method, target: target, config: config, environment: environment)
    }

    /// Switches the default upstream; `false` when no upstream has that name.
    public func setEnvironment(_ name: String) -> Bool {
        let switched = state.withLock { s in
            guard s.config.settings.upstream(named: name) != nil else { return false }
            s.environment = name
            return true
        }
        if switched { changes.add(1, ordering: .releasing) }
        return switched
    }
}
