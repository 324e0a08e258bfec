/// What the cache did for a request (`X-Cache`, the request log, the counters).
public enum CacheStatus: String, Sendable, CaseIterable {
    case hit = "HIT"
    case miss = "MISS"
    case stale = "STALE"
    case bypass = "BYPASS"
}

/// What a finished request tells the request log, the counters and a batch's results;
/// the HTTP reply itself travels apart from it.
public struct RequestReport: Sendable {
    /// The endpoint's name (`default` when no endpoint matched).
    public var endpoint: String
    /// `nil` when the cache was not involved.
    public var cache: CacheStatus?
    public var businessCode: BusinessCode?
    /// Replays after a token renewal.
    public var replays: Int
    /// Time spent in upstream exchanges, replays included; `nil` when none was made.
    public var upstreamTime: Duration?
    /// Logical success (a batch's `ok`): a success code, or HTTP 2xx on non-JSON endpoints.
    public var succeeded: Bool

    public init(endpoint: String = "default", cache: CacheStatus? = nil, businessCode: BusinessCode? = nil, replays: Int = 0,
                upstreamTime: Duration? = nil, succeeded: Bool = false) {
        (self.endpoint, self.cache, self.businessCode) = (endpoint, cache, businessCode)
        (self.replays, self.upstreamTime, self.succeeded) = (replays, upstreamTime, succeeded)
    }
}
