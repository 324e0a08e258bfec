import Foundation

/// One `endpoints[]` entry: how Concierge treats requests that match it.
public struct EndpointPolicy: Sendable {
    public enum Login: String, Sendable { case required, optional, none }
    public enum Scope: String, Sendable { case user, shared, session }
    public enum ExpectedType: String, Sendable, CaseIterable {
        case object, array, string, number, bool, null, present
    }

    public struct CachePolicy: Sendable {
        /// `ttl`: the endpoint's `ttl` decides freshness; `http`: the upstream's caching
        /// headers do, as RFC 9111 asks of a shared cache (``HTTPCaching``).
        public enum Mode: String, Sendable { case ttl, http }

        public var ttl: Duration
        public var scope: Scope
        public var staleIfError: Duration
        public var staleWhileRevalidate: Duration
        /// Overrides `cache.version` for this endpoint when set.
        public var version: Int?
        public var mode: Mode = .ttl
        /// With `mode: http`, a cap on the freshness an upstream gives.
        public var maxTTL: Duration? = nil
        /// `tags` and `tags_header`: what a stored entry is tagged with.
        public var tags: CacheTags = .none
        /// `store_set_cookie`: with `mode: http`, a reply with `Set-Cookie` is stored (without
        /// it) instead of not at all.
        public var storeSetCookie = false
        /// `key_headers` (lowercase): request fields whose values are part of the key, and
        /// which are forwarded even when they are ``UnkeyedRequestFields``.
        public var keyHeaders: [String] = []
    }

    public enum Signing: Sendable {
        case inherit
        case off
        case custom(SigningConfig)
    }

    /// The fields behind one reference. Every request copies its endpoint's policy (into its
    /// route, its preparation, a remembered hit); with the fields inline a copy retained each
    /// string, array and set the policy holds, and those belong to the configuration every
    /// event loop shares, so each retain was an atomic write to memory the other loops write
    /// too. Now a copy is one retain. Setters (the config loader's) copy the fields: value
    /// semantics stay.
    private final class Storage: Sendable {
        let fields: Fields

        init(_ fields: Fields) {
            self.fields = fields
        }
    }

    private struct Fields: Sendable {
        var name: String
        var match: EndpointPattern
        var login: Login
        var cache: CachePolicy
        var envelope: Bool
        var upstream: String?
        var timeout: Duration?
        var invalidates: [String]
        var validate: [(path: String, type: ExpectedType)]
        var unwrap: String?
        var sign: Signing
        var scopeIsExplicit: Bool = false
        var session: String? = nil
    }

    private var storage: Storage

    private mutating func update(_ change: (inout Fields) -> Void) {
        var fields = storage.fields
        change(&fields)
        storage = Storage(fields)
    }

    public var name: String {
        get { storage.fields.name }
        set { update { $0.name = newValue } }
    }

    public var match: EndpointPattern {
        get { storage.fields.match }
        set { update { $0.match = newValue } }
    }

    public var login: Login {
        get { storage.fields.login }
        set { update { $0.login = newValue } }
    }

    public var cache: CachePolicy {
        get { storage.fields.cache }
        set { update { $0.cache = newValue } }
    }

    /// `false` for non-JSON endpoints: no envelope logic, bodies streamed.
    public var envelope: Bool {
        get { storage.fields.envelope }
        set { update { $0.envelope = newValue } }
    }

    public var upstream: String? {
        get { storage.fields.upstream }
        set { update { $0.upstream = newValue } }
    }

    public var timeout: Duration? {
        get { storage.fields.timeout }
        set { update { $0.timeout = newValue } }
    }

    public var invalidates: [String] {
        get { storage.fields.invalidates }
        set { update { $0.invalidates = newValue } }
    }

    public var validate: [(path: String, type: ExpectedType)] {
        get { storage.fields.validate }
        set { update { $0.validate = newValue } }
    }

    public var unwrap: String? {
        get { storage.fields.unwrap }
        set { update { $0.unwrap = newValue } }
    }

    public var sign: Signing {
        get { storage.fields.sign }
        set { update { $0.sign = newValue } }
    }

    /// The session this endpoint always uses (`endpoints[].session`); `nil`: chosen per
    /// request (the listener's, the `Concierge-Session-Name` header, or `default`).
    public var session: String? {
        get { storage.fields.session }
        set { update { $0.session = newValue } }
    }

    /// Whether `cache.scope` was written in the file (otherwise chosen from `login`).
    public var scopeIsExplicit: Bool {
        get { storage.fields.scopeIsExplicit }
        set { update { $0.scopeIsExplicit = newValue } }
    }

    public init(name: String,
                match: EndpointPattern,
                login: Login,
                cache: CachePolicy,
                envelope: Bool,
                upstream: String?,
                timeout: Duration?,
                invalidates: [String],
                validate: [(path: String, type: ExpectedType)],
                unwrap: String?,
                sign: Signing,
                scopeIsExplicit: Bool = false) {
        storage = Storage(Fields(name: name, match: match, login: login, cache: cache, envelope: envelope, upstream: upstream, timeout: timeout, invalidates: invalidates, validate: validate, unwrap: unwrap, sign: sign, scopeIsExplicit: scopeIsExplicit))
    }

    /// The policy for requests no endpoint matches: pass-through, no login, no cache.
    public static let passThrough = EndpointPolicy(
        name: "default",
        match: EndpointPattern(methods: nil, path: .segments([.rest])),
        login: .none,
        cache: CachePolicy(ttl: .zero, scope: .shared, staleIfError: .zero, staleWhileRevalidate: .zero, version: nil),
        envelope: false,
        upstream: nil,
        timeout: nil,
        invalidates: [],
        validate: [],
        unwrap: nil,
        sign: .inherit
    )

    /// A `ttl` endpoint with a ttl, or any `mode: http` endpoint (the upstream's headers may
    /// make its replies fresh).
    public var isCacheable: Bool { cache.ttl > .zero || cache.mode == .http }

    /// Whether replies are judged by HTTP caching rules (``HTTPCaching``).
    public var httpCaching: Bool { cache.mode == .http }
}
