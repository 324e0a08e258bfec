import ConciergeCore
import NIOHTTP1
import Testing

/// `cache.mode: http` decisions (RFC 9111 as a shared cache), pure: dates, storability,
/// freshness, the request's directives, the fields a `304` refreshes.
@Suite("HTTP caching rules")
struct HTTPCachingTests {
    static let now = 1_800_000_000.0
    static var date: String { HTTPDate.format(now) }

    static func storage(_ reply: [(String, String)], status: Int = 200, request: [(String, String)] = [], ttl: Double = 0,
                        maxTTL: Double? = nil, endpointStale: (Double, Double) = (0, 0)) -> HTTPCaching.Freshness? {
        HTTPCaching.storage(request: HTTPHeaders(request), status: status, reply: HTTPHeaders(reply), defaultTTL: ttl, maxTTL: maxTTL,
                            endpointStale: endpointStale, now: now)
    }

    @Test("HTTP-date: IMF-fixdate, RFC 850 and asctime read alike; anything else is no date")
    func dates() {
        let expected = 784_111_777.0  // Sun, 06 Nov 1994 08:49:37 GMT
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == expected)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == expected)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994") == expected)
        #expect(HTTPDate.format(expected) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(HTTPDate.parse(HTTPDate.format(Self.now)) == Self.now)
        for bad in ["0", "-1", "", "Thu, 18  Aug  2050 02:01:18 GMT", "Thu, 18 Aug 2050 02:01:18 UTC", "Thu, 18 Aug 2050 25:01:18 GMT",
                    "Thu, 18 Foo 2050 02:01:18 GMT", "2050-08-18T02:01:18Z"] {
            #expect(HTTPDate.parse(bad) == nil, "\(bad)")
        }
    }

    @Test("freshness: s-maxage, then max-age, then Expires − Date; CDN-Cache-Control over all; max_ttl caps; Age counts")
    func freshnessOrder() {
        #expect(Self.storage([("Cache-Control", "max-age=60, s-maxage=120")])?.ttl == 120)
        #expect(Self.storage([("Cache-Control", "max-age=60")])?.ttl == 60)
        #expect(Self.storage([("Date", Self.date), ("Expires", HTTPDate.format(Self.now + 300))])?.ttl == 300)
        #expect(Self.storage([("Expires", "0")])?.ttl == 0, "an invalid Expires is already expired")
        #expect(Self.storage([("CDN-Cache-Control", "max-age=600"), ("Cache-Control", "no-store")])?.ttl == 600)
        #expect(Self.storage([("CDN-Cache-Control", "max-age=10000, &&&&&"), ("Cache-Control", "no-store")]) == nil,
                "not a structured dictionary: ignored")
        #expect(Self.storage([("Cache-Control", "max-age=3600")], maxTTL: 60)?.ttl == 60)
        #expect(Self.storage([("Cache-Control", "max-age=3600"), ("Age", "600")])?.ttl == 3000)
        #expect(Self.storage([("Cache-Control", "max-age=3600"), ("Age", "7200, 0")])?.ttl == -3600, "the first Age value")
        #expect(Self.storage([("Cache-Control", "max-age=3600"), ("Date", HTTPDate.format(Self.now - 100))])?.ttl == 3500,
                "the time since Date is age too")
    }

    @Test("storability: statuses, no-store, private, Authorization, the endpoint ttl as the default")
    func storability() {
        #expect(Self.storage([]) != nil && Self.storage([])?.ttl == 0, "cacheable by default but nothing makes it fresh")
        #expect(Self.storage([], ttl: 30)?.ttl == 30)
        #expect(Self.storage([], status: 201, ttl: 30) == nil, "201 needs explicit freshness")
        #expect(Self.storage([("Cache-Control", "max-age=5")], status: 201)?.ttl == 5)
        #expect(Self.storage([("Cache-Control", "max-age=5")], status: 206) == nil)
        #expect(Self.storage([("Cache-Control", "max-age=5")], status: 304) == nil)
        #expect(Self.storage([], status: 404, ttl: 30)?.ttl == 30)
        #expect(Self.storage([("Cache-Control", "max-age=5, no-store")]) == nil)
        #expect(Self.storage([("Cache-Control", "private, max-age=5")]) == nil)
        #expect(Self.storage([("Cache-Control", "max-age=5")], request: [("Cache-Control", "no-store")]) == nil)
        #expect(Self.storage([("Cache-Control", "max-age=5")], request: [("Authorization", "Bearer x")]) == nil)
        #expect(Self.storage([("Cache-Control", "public, max-age=5")], request: [("Authorization", "Bearer x")])?.ttl == 5)
        #expect(Self.storage([("Cache-Control", "s-maxage=5")], request: [("Authorization", "Bearer x")])?.ttl == 5)
        #expect(Self.storage([("Cache-Control", "max-age=5, no-cache")])?.ttl == 0, "no-cache: revalidate every time")
    }

    @Test("stale windows: the reply's RFC 5861 directives, else the endpoint's; none when it must revalidate")
    func staleWindows() {
        let own = Self.storage([("Cache-Control", "max-age=5, stale-while-revalidate=30, stale-if-error=60")], endpointStale: (1, 2))
        #expect(own?.staleWhileRevalidate == 30 && own?.staleIfError == 60)
        let endpoint = Self.storage([("Cache-Control", "max-age=5")], endpointStale: (1, 2))
        #expect(endpoint?.staleWhileRevalidate == 1 && endpoint?.staleIfError == 2)
        let strict = Self.storage([("Cache-Control", "max-age=5, must-revalidate, stale-if-error=60")], endpointStale: (1, 2))
        #expect(strict?.staleWhileRevalidate == 0 && strict?.staleIfError == 0)
        #expect(HTTPCaching.mustRevalidate(HTTPHeaders([("Cache-Control", "s-maxage=1")])))
        #expect(!HTTPCaching.mustRevalidate(HTTPHeaders([("Cache-Control", "max-age=1")])))
    }

    @Test("request directives: max-age, min-fresh, max-stale (with and without a value), no-cache and Pragma, only-if-cached")
    func requestDirectives() {
        func use(_ cc: [(String, String)], age: Double, left: Double, strict: Bool = false) -> RequestCacheDirectives.Use {
            RequestCacheDirectives(HTTPHeaders(cc)).use(age: age, freshLeft: left, mustRevalidate: strict)
        }
        #expect(use([], age: 10, left: 5) == .fresh)
        #expect(use([], age: 10, left: -1) == .no)
        #expect(use([("Cache-Control", "max-age=5")], age: 10, left: 50) == .no)
        #expect(use([("Cache-Control", "max-age=20")], age: 10, left: 50) == .fresh)
        #expect(use([("Cache-Control", "min-fresh=60")], age: 10, left: 50) == .no)
        #expect(use([("Cache-Control", "max-stale=10")], age: 10, left: -5) == .staleAccepted)
        #expect(use([("Cache-Control", "max-stale=10")], age: 10, left: -15) == .no)
        #expect(use([("Cache-Control", "max-stale")], age: 10, left: -10_000) == .staleAccepted)
        #expect(use([("Cache-Control", "max-stale")], age: 10, left: -1, strict: true) == .no, "must-revalidate wins")
        #expect(use([("Cache-Control", "no-cache")], age: 0, left: 50) == .no)
        #expect(use([("Pragma", "no-cache")], age: 0, left: 50) == .no)
        #expect(use([("Pragma", "no-cache"), ("Cache-Control", "max-age=100")], age: 0, left: 50) == .fresh,
                "Pragma counts only without Cache-Control")
        #expect(RequestCacheDirectives(HTTPHeaders([("Cache-Control", "only-if-cached")])).onlyIfCached)
        #expect(RequestCacheDirectives(HTTPHeaders([("Cache-Control", "no-store")])).noStore)
        #expect(RequestCacheDirectives(HTTPHeaders()).isEmpty)
    }

    @Test("a 304 replaces the stored fields it carries, never Content-Length; validators are ETag or Last-Modified")
    func notModifiedUpdate() {
        let stored = HTTPHeaders([("ETag", "\"a\""), ("X-Test", "1"), ("X-Test", "1b"), ("Content-Type", "text/plain"),
                                  ("Content-Length", "36")])
        let updated = HTTPCaching.updated(stored, with: HTTPHeaders([("X-Test", "2"), ("Content-Length", "10"), ("Cache-Control", "max-age=9")]))
        #expect(updated["x-test"] == ["2"])
        #expect(updated["content-length"] == ["36"])
        #expect(updated["cache-control"] == ["max-age=9"])
        #expect(updated["etag"] == ["\"a\""] && updated["content-type"] == ["text/plain"])
        #expect(HTTPCaching.validators(HTTPHeaders([("Last-Modified", "x")]))?.lastModified == "x")
        #expect(HTTPCaching.validators(HTTPHeaders([("Cache-Control", "max-age=1")])) == nil)
    }
}

/// `cache.tags` templates, pure.
@Suite("Cache tag templates")
struct CacheTagsTests {
    @Test("path params by the match's names, query params, JSON paths (an array: one tag each), missing values leave the tag out")
    func evaluate() throws {
        let tags = try CacheTags.parse(["item:{id}", "items", "owner:{data.result.ownerId}", "shop:{query.shop}", "{id}-{data.kind}"],
                                       header: "Surrogate-Key", matchPath: "/api/items/{id}").get()
        let json = JSONValue.parse(#"{"data":{"result":{"ownerId":[7,"x",true,null]},"kind":"book"}}"#)
        let all = tags.evaluate(path: "/api/items/42", params: [Param("shop", "9")], json: json, headerValues: ["a b", "c,a"])
        #expect(all == ["item:42", "items", "owner:7", "owner:x", "owner:true", "shop:9", "42-book", "a", "b", "c"])
        let bare = tags.evaluate(path: "/api/items/42", params: [], json: nil)
        #expect(bare == ["item:42", "items"], "no JSON, no query param: those tags are left out")
        let plain = try CacheTags.parse(["x:{id}"], header: nil, matchPath: "/a/{id}").get()
        #expect(tags.readsJSON && !plain.readsJSON)
    }

    @Test("bad templates are refused with their index")
    func refused() {
        for (texts, index) in [(["ok", "x:{id"], 1), (["{}"], 0), (["{query.}"], 0), ([""], 0)] {
            guard case .failure(let problem) = CacheTags.parse(texts, header: nil, matchPath: "/a/{id}") else {
                Issue.record("\(texts) accepted")
                continue
            }
            #expect(problem.index == index)
        }
    }
}
