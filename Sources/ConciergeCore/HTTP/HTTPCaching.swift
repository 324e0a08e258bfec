import Foundation
import NIOHTTP1
import RawStructuredFieldValues

/// `cache.mode: http`: what RFC 9111 lets a shared cache do with a reply and a request, decided
/// from their header fields alone (pure; the pipeline acts on it).
public enum HTTPCaching {
    /// Statuses a reply may be stored with when it gives no freshness (RFC 9110 §15.1).
    public static let cacheableByDefault: Set<Int> = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501]

    /// How long a stored reply stays fresh, and the stale windows it allows.
    public struct Freshness: Sendable, Equatable {
        /// Seconds from now the reply stays fresh: its freshness lifetime less its age on
        /// arrival (zero or less: stale at once).
        public var ttl: Double
        public var staleWhileRevalidate: Double
        public var staleIfError: Double

        public init(ttl: Double, staleWhileRevalidate: Double, staleIfError: Double) {
            (self.ttl, self.staleWhileRevalidate, self.staleIfError) = (ttl, staleWhileRevalidate, staleIfError)
        }
    }

    /// The directives that govern a reply in a shared cache: `CDN-Cache-Control` (RFC 9213)
    /// when it is a valid structured dictionary with any member, else `Cache-Control`.
    public static func directives(_ reply: HTTPHeaders) -> CacheControl {
        let lines = reply["cdn-cache-control"]
        if !lines.isEmpty, let targeted = targetedDirectives(lines.joined(separator: ", ")), !targeted.directives.isEmpty {
            return targeted
        }
        return CacheControl(reply["cache-control"])
    }

    /// A targeted field (RFC 9213 §2.1) parsed as an RFC 9651 dictionary: `nil` when it is not
    /// one (the field is then ignored). A member of the wrong type (`max-age="60"`) is left
    /// out; `true` stands for a directive without a value.
    static func targetedDirectives(_ text: String) -> CacheControl? {
        var parser = StructuredFieldValueParser(Array(text.utf8))
        guard let dictionary = try? parser.parseDictionaryFieldValue() else { return nil }
        var directives: [(name: String, value: String?)] = []
        for (name, member) in dictionary {
            guard case .item(let item) = member else { continue }
            switch item.rfc9651BareItem {
            case .bool(true): directives.append((name, nil))
            case .integer(let n) where n >= 0: directives.append((name, String(n)))
            default: continue
            }
        }
        return CacheControl(directives: directives)
    }

    /// Whether a reply to `GET` may be stored (RFC 9111 §3), and its freshness (§4.2); `nil`
    /// when it may not be.
    /// - Parameters:
    ///   - defaultTTL: the endpoint's `ttl`, the freshness of a reply that gives none.
    ///   - maxTTL: the endpoint's `max_ttl`, a cap on any freshness.
    ///   - endpointStale: the endpoint's stale windows, used when the reply names none.
    public static func storage(request: HTTPHeaders, status: Int, reply: HTTPHeaders, defaultTTL: Double, maxTTL: Double?,
                               endpointStale: (whileRevalidate: Double, ifError: Double), now: Double) -> Freshness? {
        guard status >= 200, status != 206, status != 304 else { return nil }
        if CacheControl(request["cache-control"]).noStore { return nil }
        let d = directives(reply)
        if d.noStore || d.isPrivate { return nil }
        if request.contains(name: "authorization"), !sharesAuthorized(d) { return nil }
        let date = reply.first(name: "date").flatMap(HTTPDate.parse)
        var lifetime: Double
        if let s = d.sMaxAge {
            lifetime = Double(s)
        } else if let m = d.maxAge {
            lifetime = Double(m)
        } else if reply.contains(name: "expires") {
            // An invalid Expires (`0`, a bad date, two values) means already expired (§5.3).
            let values = reply["expires"]
            let expires = values.count == 1 ? HTTPDate.parse(values[0]) : nil
            lifetime = expires.map { $0 - (date ?? now) } ?? 0
        } else if cacheableByDefault.contains(status) || d.isPublic {
            lifetime = defaultTTL
            if lifetime <= 0, let modified = reply.first(name: "last-modified").flatMap(HTTPDate.parse) {
                // The usual heuristic (RFC 9111 §4.2.2): a tenth of the time since the last change.
                lifetime = min(max(0, ((date ?? now) - modified) / 10), 86_400)
            }
        } else {
            return nil
        }
        if d.noCache { lifetime = 0 }
        if let maxTTL { lifetime = min(lifetime, maxTTL) }
        let windows = staleWindows(reply, endpointStale: endpointStale)
        return Freshness(ttl: lifetime - initialAge(reply, date: date, now: now),
                         staleWhileRevalidate: windows.whileRevalidate, staleIfError: windows.ifError)
    }

    /// Whether a reply to a request with `Authorization` may be stored and served to others
    /// (RFC 9111 §3.5): only when it says `public`, `s-maxage` or `must-revalidate`.
    public static func sharesAuthorizedReplies(_ reply: HTTPHeaders) -> Bool {
        sharesAuthorized(directives(reply))
    }

    private static func sharesAuthorized(_ d: CacheControl) -> Bool {
        d.isPublic || d.sMaxAge != nil || d.mustRevalidate
    }

    /// The fields a reply is stored with, as far as `Set-Cookie` goes: `nil` (not stored) when
    /// it sets a cookie, unless `storeSetCookie` (`cache.store_set_cookie: true`), which stores
    /// it without its `Set-Cookie` fields. One client's cookie is never served to another.
    public static func storedFields(_ reply: HTTPHeaders, storeSetCookie: Bool) -> HTTPHeaders? {
        guard reply.contains(name: "set-cookie") else { return reply }
        guard storeSetCookie else { return nil }
        var kept = reply
        kept.remove(name: "set-cookie")
        return kept
    }

    /// How long past its freshness a reply may be served stale: its own
    /// `stale-while-revalidate` and `stale-if-error` (RFC 5861), else the endpoint's; none
    /// when it must be revalidated.
    public static func staleWindows(_ reply: HTTPHeaders, endpointStale: (whileRevalidate: Double, ifError: Double))
        -> (whileRevalidate: Double, ifError: Double) {
        let d = directives(reply)
        if revalidates(d) { return (0, 0) }
        return (d.staleWhileRevalidate.map(Double.init) ?? endpointStale.whileRevalidate, d.staleIfError.map(Double.init) ?? endpointStale.ifError)
    }

    /// Whether the reply says how long it stays fresh (`max-age`, `s-maxage`, `Expires`).
    public static func hasExplicitFreshness(_ reply: HTTPHeaders) -> Bool {
        let d = directives(reply)
        return d.maxAge != nil || d.sMaxAge != nil || reply.contains(name: "expires")
    }

    /// Whether a stored reply can be revalidated: it has an `ETag` or a `Last-Modified`.
    public static func validators(_ reply: HTTPHeaders) -> (etag: String?, lastModified: String?)? {
        let etag = reply.first(name: "etag"), modified = reply.first(name: "last-modified")
        return etag == nil && modified == nil ? nil : (etag, modified)
    }

    /// A stored reply's fields after a `304` (RFC 9111 §4.3.4): each field the `304` carries
    /// replaces the stored one of that name, but `Content-Length` (the body is the stored one).
    public static func updated(_ stored: HTTPHeaders, with notModified: HTTPHeaders) -> HTTPHeaders {
        var headers = stored
        var replaced = Set<String>()
        for (name, _) in notModified {
            let lower = name.lowercased()
            guard lower != "content-length", replaced.insert(lower).inserted else { continue }
            headers.remove(name: name)
            for value in notModified[name] { headers.add(name: name, value: value) }
        }
        return headers
    }

    /// A reply's age when it arrived (§4.2.3): the larger of its `Age` and the time since its
    /// `Date`.
    public static func initialAge(_ reply: HTTPHeaders, date: Double?, now: Double) -> Double {
        let apparent = date.map { max(0, now - $0) } ?? 0
        return max(apparent, Double(ageValue(reply) ?? 0))
    }

    /// The `Age` field's value: non-negative digits (§5.1); of several values (`7200, 0`, or two
    /// lines) the first; anything else is ignored.
    public static func ageValue(_ headers: HTTPHeaders) -> Int? {
        guard let line = headers["age"].first, let first = line.split(separator: ",", omittingEmptySubsequences: false).first else { return nil }
        let text = first.trimmingCharacters(in: [" ", "\t"])
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return text.count > 10 ? CacheControl.maxDeltaSeconds : min(Int(text) ?? 0, CacheControl.maxDeltaSeconds)
    }

    /// Whether the stored reply forbids being served stale (`must-revalidate`,
    /// `proxy-revalidate`, `s-maxage`, `no-cache`).
    public static func mustRevalidate(_ reply: HTTPHeaders) -> Bool {
        revalidates(directives(reply))
    }

    private static func revalidates(_ d: CacheControl) -> Bool {
        d.mustRevalidate || d.proxyRevalidate || d.sMaxAge != nil || d.noCache
    }
}

/// A request's own caching directives (RFC 9111 §5.2.1), with `Pragma: no-cache` standing in
/// for `Cache-Control: no-cache` when there is no `Cache-Control` (§5.4).
public struct RequestCacheDirectives: Sendable, Equatable {
    public var noStore = false
    public var noCache = false
    public var maxAge: Int?
    public var minFresh: Int?
    /// `max-stale` without a value accepts any staleness.
    public var maxStale: Int?
    public var onlyIfCached = false

    public init(_ headers: HTTPHeaders) {
        let lines = headers["cache-control"]
        if lines.isEmpty {
            noCache = headers["pragma"].contains { FieldList.elements($0).contains("no-cache") }
            return
        }
        let cc = CacheControl(lines)
        (noStore, noCache, onlyIfCached) = (cc.noStore, cc.noCache, cc.onlyIfCached)
        maxAge = cc.has("max-age") ? cc.maxAge : nil
        minFresh = cc.has("min-fresh") ? cc.minFresh : nil
        if cc.has("max-stale") { maxStale = cc.value("max-stale") == nil ? Int.max : cc.seconds("max-stale") }
    }

    /// Whether any directive asks something of the cache.
    public var isEmpty: Bool { self == RequestCacheDirectives(HTTPHeaders()) }

    /// How a stored reply of this age and freshness left may answer this request.
    public enum Use: Sendable, Equatable {
        /// Fresh enough for the request.
        case fresh
        /// Stale, and the request's `max-stale` accepts it.
        case staleAccepted
        /// Not without going to the upstream.
        case no
    }

    public func use(age: Double, freshLeft: Double, mustRevalidate: Bool) -> Use {
        if noCache { return .no }
        if let maxAge, age > Double(maxAge) { return .no }
        if let minFresh, freshLeft < Double(minFresh) { return .no }
        if freshLeft > 0 { return .fresh }
        if let maxStale, !mustRevalidate, maxStale == Int.max || -freshLeft <= Double(maxStale) { return .staleAccepted }
        return .no
    }
}
