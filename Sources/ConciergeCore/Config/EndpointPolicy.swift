import Foundation

/// One `endpoints[]` entry: how Concierge treats requests that match it.
public struct EndpointPolicy: Sendable {
    public enum Login: String, Sendable { case required, optional, none }
    public enum Scope: String, Sendable { case user, shared }
    public enum ExpectedType: String, Sendable, CaseIterable {
        case object, array, string, number, bool, null, present
    }

    public struct CachePolicy: Sendable {
        public var ttl: Duration
        public var scope: Scope
        public var staleIfError: Duration
        public var staleWhileRevalidate: Duration
        /// Overrides `cache.version` for this endpoint when set.
        public var version: Int?
    }

    public enum Signing: Sendable {
        case inherit
        case off
        case custom(SigningConfig)
    }

    public var name: String
    public var match: EndpointPattern
    public var login: Login
    public var cache: CachePolicy
    /// `false` for non-JSON endpoints: no envelope logic, bodies streamed.
    public var envelope: Bool
    public var upstream: String?
    public var timeout: Duration?
    public var invalidates: [String]
    public var validate: [(path: String, type: ExpectedType)]
    public var unwrap: String?
    public var sign: Signing
    /// Whether `cache.scope` was written in the file (otherwise chosen from `login`).
    public var scopeIsExplicit: Bool = false

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

    public var isCacheable: Bool { cache.ttl > .zero }
}
