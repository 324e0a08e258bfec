import Synchronization

/// The live session a configuration view is bound to (the daemon's session registry gives
/// one per session name): what the request path reads of it before any wait.
public protocol SessionSlot: AnyObject, Sendable {
    /// The tokens held now.
    var currentTokens: SessionTokens? { get }
    /// What user- and session-scoped cache keys of this session carry besides the user:
    /// `nil` for `default` (its keys are those of a daemon with one session), else the
    /// session's name (with the instance, for `per_client`).
    var cacheIdentity: String? { get }
}

/// Gives the live session of a session name under a configuration (``Runtime/bind(_:)``).
public typealias SessionBinder = @Sendable (_ name: String, _ session: ConciergeConfig.Session) -> (any SessionSlot)?

/// One loaded configuration with the pipeline steps built from it. Immutable: a reload
/// builds a new one and swaps it in ``Runtime``.
///
/// With several sessions (`sessions:`) each session has a view of it (``view(forSession:)``):
/// the same steps, with that session's settings as ``ConciergeConfig/session``, its injector
/// and its live session (``sessionSlot``). The configuration itself is the view of `default`.
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
    /// The session this view is of (`default` for the configuration itself).
    public let sessionName: String
    /// The live session of ``sessionName``, when a binder gave one.
    public let sessionSlot: (any SessionSlot)?
    /// Some session has `clients`: requests are checked (``SessionAccess``); otherwise that
    /// check costs one load of this flag.
    public let accessControlled: Bool

    public init(config: ConciergeConfig, binder: SessionBinder? = nil) {
        settings = config
        router = EndpointRouter(endpoints: config.endpoints, passThrough: config.cache.passThrough)
        commonParams = CommonParamsStep(common: config.common)
        injector = TokenInjector(points: config.session.inject)
        envelope = EnvelopeReader(envelope: config.envelope)
        let injectors = config.sessions.values.map { TokenInjector(points: $0.inject) } + [injector]
        tokenParamNames = injectors.reduce(into: Set<String>()) { $0.formUnion($1.paramNames) }
        var listenerHosts: [String] = []
        for spec in config.listen.proxyListeners.map(\.address) + [config.listen.admin] {
            if case .tcp(let host, _) = spec { listenerHosts.append(host) }
        }
        hostPolicy = HostPolicy(listenerHosts: listenerHosts, allowedHosts: config.listen.allowedHosts,
                                upstreamHosts: config.upstreams.map(\.host))
        var masked = injectors.reduce(into: Set<String>()) { $0.formUnion($1.paramNames.union($1.headerNames)) }
        if let signing = config.signing { masked.insert(signing.param) }
        var tokenPaths: [String?] = []
        for session in config.sessions.values + [config.session] {
            if let capture = session.capture { tokenPaths += [capture.accessToken, capture.refreshToken] }
            for endpoint in [session.refresh, session.appToken].compactMap({ $0 }) {
                tokenPaths += [endpoint.accessToken, endpoint.refreshToken]
            }
        }
        for path in tokenPaths.compactMap({ $0 }) {
            if let last = path.split(separator: ".").last { masked.insert(String(last)) }
        }
        redactor = SecretRedactor(extraNames: masked)
        keyExclusions = config.cache.volatileParams.union(tokenParamNames)
        excludedKeyParams = ExcludedParams(keyExclusions)
        accessControlled = config.hasSessionClients
        sessionName = "default"
        sessionSlot = binder?("default", config.session)
        otherViews = OtherViews()
        // The views share this configuration's steps: built once it is whole, before anyone
        // else can see it.
        for (name, session) in config.sessions where name != "default" {
            otherViews.byName[name] = RuntimeConfig(view: self, name: name, session: session, slot: binder?(name, session))
        }
    }

    /// The views of the sessions but `default` (in the configuration itself; empty in a
    /// view), filled by its initializer.
    private let otherViews: OtherViews

    /// `@unchecked Sendable`: `byName` is written only by ``RuntimeConfig/init(config:binder:)``
    /// of the configuration that owns the box, before that configuration is returned to
    /// anyone (so before any other thread can read it), and never after.
    private final class OtherViews: @unchecked Sendable {
        var byName: [String: RuntimeConfig] = [:]
    }

    /// A view of `base` for the session `name`.
    private init(view base: RuntimeConfig, name: String, session: ConciergeConfig.Session, slot: (any SessionSlot)?) {
        var settings = base.settings
        settings.session = session
        self.settings = settings
        (router, commonParams, envelope) = (base.router, base.commonParams, base.envelope)
        injector = TokenInjector(points: session.inject)
        (keyExclusions, excludedKeyParams, tokenParamNames) = (base.keyExclusions, base.excludedKeyParams, base.tokenParamNames)
        (hostPolicy, redactor, accessControlled) = (base.hostPolicy, base.redactor, base.accessControlled)
        (sessionName, sessionSlot) = (name, slot)
        otherViews = OtherViews()
    }

    /// The view of the session `name`, asked of the configuration itself (`default`: itself);
    /// `nil` when no session has that name.
    public func view(forSession name: String) -> RuntimeConfig? {
        if name == sessionName { return self }
        return otherViews.byName[name]
    }

    /// The settings of the session `name` (asked of the configuration itself); a session that
    /// injects and captures nothing when there is none of that name (any more).
    public func sessionSettings(_ name: String) -> ConciergeConfig.Session {
        if name == sessionName { return settings.session }
        return settings.sessions[name] ?? .none
    }

    /// Every session's view: `default`'s (itself) first when it is defined, then the others
    /// in file order.
    public var sessionViews: [RuntimeConfig] {
        settings.sessionNames.compactMap { view(forSession: $0) }
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
    /// Binds each session's view to its live session (the daemon's registry); `nil` until
    /// ``bind(_:)``.
    private let binder = Mutex<SessionBinder?>(nil)
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

    /// Binds every configuration from now on (the current one at once) to the live sessions
    /// `binder` gives.
    public func bind(_ binder: @escaping SessionBinder) {
        self.binder.withLock { $0 = binder }
        replace(with: current.settings)
    }

    /// Swaps in a reloaded config. The environment chosen at run time survives a reload
    /// when the new file still has that upstream.
    public func replace(with config: ConciergeConfig, keepEnvironment: Bool = true) {
        let runtimeConfig = RuntimeConfig(config: config, binder: binder.withLock { $0 })
        state.withLock { s in
            let keep = keepEnvironment && config.upstream(named: s.environment) != nil
            s.config = runtimeConfig
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
