@testable import ConciergeCore
import Testing
import NIOHTTP1

@Suite("CacheKey")
struct CacheKeyTests {
    private let base = "https://api.example.com"
    private let volatile: Set<String> = ["timestamp", "signature", "_"]

    /// The key from the parsed params, checked against the one read from the query's text.
    private func key(_ method: String = "GET", path: String = "/api/items", query: String, excluding: Set<String>? = nil,
                     user: String? = nil, version: Int = 1) -> String {
        let parsed = CacheKey.make(method: method, upstreamBaseURL: base, path: path, params: QueryString.parse(query),
                                   excluding: excluding ?? volatile, userID: user, version: version)
        let raw = CacheKey.make(method: method, upstreamBaseURL: base, path: path, rawQuery: Substring(query),
                                excluding: ExcludedParams(excluding ?? volatile), userID: user, version: version)
        #expect(parsed == raw, "query \(query)")
        return parsed
    }

    @Test("a query's key read from its text equals the parsed params' key: escapes, forms, empty pieces, exclusions, non-ASCII")
    func rawQueryKey() {
        let queries = [
            "", "&", "&&a=1&&", "a", "a=", "=1", "=", "a=1&a=1", "b=2&a=1&a=0", "a=%7e&b=%7E&c=~", "%61=1", "a+b=c+d", "a%20b=1",
            "x=%zz&y=%4", "x=%FF&y=%ff&z=%fe", "q=caf%C3%A9&r=café", "q=\u{4E2D}\u{6587}", "timestamp=1&a=2", "time%73tamp=1&a=2",
            "a b=1&c=2", "a+b=1&a%2Bb=2", "%=1&%25=2", "é=1&%C3%A9=2&e=3", "x&x=&x=1", "a=b=c&a=b", "k=v%26w&k=v&w", "?=1&/=2&:=3",
            // In order already (copied as written), with excluded and empty pieces between.
            "a=1&b=2&c=3", "a=1&timestamp=5&z=2", "a&b=&c=1", "_=1&a=2", "a=1&&b=2&", "a+b=1&c=2", "a=b&a=b=c", "A=1&a=1&b=~",
        ]
        let exclusions: [Set<String>] = [[], volatile, ["a b", "x", "%", "é"], ["a+b", "a"]]
        for query in queries {
            for excluding in exclusions { _ = key(query: query, excluding: excluding) }
        }
        #expect(key(query: "time%73tamp=1&a%20b=2&c=3", excluding: ["timestamp", "a b"]) == "GET https://api.example.com/api/items?c=3 v=1")
        #expect(key(query: "timestamp=1", excluding: ["timestamp"]) == "GET https://api.example.com/api/items v=1")
        #expect(key(query: "a=1&timestamp=5&z&_=0", excluding: volatile) == "GET https://api.example.com/api/items?a=1&z= v=1")
    }

    @Test("a request's query is parsed when a step asks for it; the key of an unchanged one reads its text")
    func queryParsedWhenAsked() {
        var request = ProxyRequest(method: "GET", target: "/p?b=2&a=%31")
        #expect(request.rawQuery == "b=2&a=%31")
        #expect(request.query == [Param("b", "2"), Param("a", "1")])
        #expect(request.target == "/p?b=2&a=%31")
        request.setParam("a", "9", onlyIfAbsent: true)  // present: nothing changes
        #expect(request.rawQuery == "b=2&a=%31" && request.target == "/p?b=2&a=%31")
        request.setParam("c", "3")
        #expect(request.rawQuery == nil)
        #expect(request.query == [Param("b", "2"), Param("a", "1"), Param("c", "3")])
        #expect(request.target == "/p?b=2&a=%31&c=3")
        #expect(ProxyRequest(method: "GET", target: "/p").query.isEmpty)
        #expect(ProxyRequest(method: "GET", path: "/p", query: [Param("x", "y")]).target == "/p?x=y")
    }

    @Test("the documented example: GET https://api.example.com/api/items?limit=10&offset=0 v=1")
    func specExample() {
        #expect(key(query: "limit=10&offset=0") == "GET https://api.example.com/api/items?limit=10&offset=0 v=1")
        #expect(key(query: "offset=0&limit=10") == "GET https://api.example.com/api/items?limit=10&offset=0 v=1")
    }

    @Test("'?b=2&a=1' and '?a=1&b=2' give the same key")
    func orderIndependent() {
        let k1 = key(query: "b=2&a=1")
        let k2 = key(query: "a=1&b=2")
        #expect(k1 == k2)
        #expect(k1 == "GET https://api.example.com/api/items?a=1&b=2 v=1")
    }

    @Test("volatile params such as timestamp are left out of the key")
    func volatileExcluded() {
        let plain = key(query: "limit=10")
        #expect(key(query: "limit=10&timestamp=1700000000") == plain)
        #expect(key(query: "timestamp=1&limit=10&signature=abc&_=99") == plain)
        #expect(key(query: "timestamp=1700000000") == "GET https://api.example.com/api/items v=1")
    }

    @Test("excluded names (e.g. the injected token) are dropped wherever they appear")
    func tokenExcluded() {
        let k = key(query: "accessToken=secret-token&limit=10", excluding: volatile.union(["accessToken"]))
        #expect(k == "GET https://api.example.com/api/items?limit=10 v=1")
        #expect(!k.contains("secret-token"))
    }

    @Test("without params there is no '?'")
    func noParams() {
        #expect(key(query: "") == "GET https://api.example.com/api/items v=1")
    }

    @Test("the key has no params when nothing is excluded and none are given")
    func emptyExclusionSet() {
        let k = CacheKey.make(method: "POST", upstreamBaseURL: base, path: "/api/items", params: [Param("a", "1")],
                              excluding: [], userID: nil, version: 3)
        #expect(k == "POST https://api.example.com/api/items?a=1 v=3")
    }

    @Test("the method and the upstream base URL are part of the key")
    func methodAndUpstream() {
        #expect(key("POST", query: "a=1") == "POST https://api.example.com/api/items?a=1 v=1")
        let debug = CacheKey.make(method: "GET", upstreamBaseURL: "http://127.0.0.1:9000", path: "/api/items",
                                  params: [Param("a", "1")], excluding: volatile, userID: nil, version: 1)
        #expect(debug == "GET http://127.0.0.1:9000/api/items?a=1 v=1")
        #expect(debug != key(query: "a=1"))
    }

    @Test("params are percent-encoded per RFC 3986: space %20, é %C3%A9, ~-._ kept")
    func percentEncoding() {
        let params = [Param("q", "hello world"), Param("name", "José"), Param("keep", "a~b-c.d_e")]
        let k = CacheKey.make(method: "GET", upstreamBaseURL: base, path: "/s", params: params, excluding: volatile,
                              userID: nil, version: 1)
        #expect(k == "GET https://api.example.com/s?keep=a~b-c.d_e&name=Jos%C3%A9&q=hello%20world v=1")
    }

    @Test("the key normalises a query only where RFC 3986 calls forms equal: hex case, escaped unreserved characters")
    func equivalentEscapesShareAKey() {
        #expect(key(query: "q=%d6%d0") == key(query: "q=%D6%D0"))
        #expect(key(query: "q=%41%7e") == key(query: "q=A~"))
        #expect(key(query: "q=%41%7e") == "GET https://api.example.com/api/items?q=A~ v=1")
        // Raw UTF-8 in a target is an IRI: it maps to its escapes.
        #expect(key(query: "n=é") == key(query: "n=%C3%A9"))
    }

    @Test("bytes a URI cannot hold raw (a line break, a space, a quote, a lone %) are escaped in the key, never kept raw")
    func rawNonURIBytesAreEscaped() {
        let k = CacheKey.make(method: "POST", upstreamBaseURL: base, path: "/f", params: QueryString.parse("a=x\ny z\"%&b=%zz"),
                              excluding: [], userID: nil, version: 1)
        #expect(k == "POST https://api.example.com/f?a=x%0Ay%20z%22%25&b=%25zz v=1")
    }

    @Test("'%FF' and '%FE', two GBK words, '+' and '%20', ':' and '%3A' keep separate keys")
    func distinctBytesKeepSeparateKeys() {
        #expect(key(query: "q=%FF") != key(query: "q=%FE"))
        #expect(key(query: "q=%D6%D0%CE%C4") != key(query: "q=%D3%A2%CE%C4"))
        #expect(key(query: "q=%D6%D0%CE%C4") == "GET https://api.example.com/api/items?q=%D6%D0%CE%C4 v=1")
        #expect(key(query: "q=a+b") == "GET https://api.example.com/api/items?q=a+b v=1")
        #expect(key(query: "q=a+b") != key(query: "q=a%20b"))
        #expect(key(query: "t=a:b") != key(query: "t=a%3Ab"))
    }

    @Test("pairs of one name keep their order: 'a=2&a=1' and 'a=1&a=2' are two keys (the upstream may read the last)")
    func duplicateNames() {
        #expect(key(query: "a=2&a=1") == "GET https://api.example.com/api/items?a=2&a=1 v=1")
        #expect(key(query: "a=1&a=2") == "GET https://api.example.com/api/items?a=1&a=2 v=1")
        #expect(key(query: "b=1&a=2&a=1") == "GET https://api.example.com/api/items?a=2&a=1&b=1 v=1")
        #expect(key(query: "a=2&b=1&a=1") == key(query: "b=1&a=2&a=1"))
        #expect(key(query: "a=2&b=1&a=1") != key(query: "a=1&b=1&a=2"))
    }

    @Test("sorting is by encoded name: '%20x' sorts before 'A', 'A' before 'a'")
    func sortByEncodedName() {
        let k = CacheKey.make(method: "GET", upstreamBaseURL: base, path: "/p",
                              params: [Param("a", "1"), Param("A", "2"), Param(" x", "3")], excluding: [], userID: nil, version: 1)
        #expect(k == "GET https://api.example.com/p?%20x=3&A=2&a=1 v=1")
    }

    @Test("'user=' comes after the params and before the version")
    func userPlacement() {
        #expect(key(query: "limit=10", user: "42") == "GET https://api.example.com/api/items?limit=10 user=42 v=1")
        #expect(key(query: "", user: "42") == "GET https://api.example.com/api/items user=42 v=1")
    }

    @Test("the user id is percent-encoded so it cannot fake the key's structure")
    func userEncoded() {
        #expect(key(query: "", user: "a b v=9") == "GET https://api.example.com/api/items user=a%20b%20v%3D9 v=1")
    }

    @Test("different users and shared entries get different keys")
    func usersDiffer() {
        #expect(key(query: "a=1", user: "1") != key(query: "a=1", user: "2"))
        #expect(key(query: "a=1", user: "1") != key(query: "a=1"))
    }

    @Test("the version ends the key and a bump changes it")
    func version() {
        #expect(key(query: "a=1", version: 2) == "GET https://api.example.com/api/items?a=1 v=2")
        #expect(key(query: "a=1", version: 1) != key(query: "a=1", version: 2))
        #expect(key(query: "", version: 0).hasSuffix(" v=0"))
    }
}

@Suite("QueryString")
struct QueryStringTests {
    @Test("URI bytes are the unreserved and reserved characters of RFC 3986, nothing else")
    func uriBytes() {
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:/?#[]@!$&'()*+,;=".utf8)
        for b in UInt8.min...UInt8.max { #expect(QueryString.isURIByte(b) == allowed.contains(b), "byte \(b)") }
    }

    @Test("parse splits pairs and percent-decodes both sides")
    func parse() {
        #expect(QueryString.parse("a=1&b=x%20y") == [Param("a", "1"), Param("b", "x y")])
        #expect(QueryString.parse("n%C3%A4me=J%C3%BCrgen") == [Param("näme", "Jürgen")])
    }

    @Test("parse treats '+' as a space")
    func parsePlus() {
        #expect(QueryString.parse("q=a+b+c") == [Param("q", "a b c")])
    }

    @Test("parse keeps a name without '=' with an empty value and skips empty pieces")
    func parseEdgeCases() {
        #expect(QueryString.parse("flag&a=1") == [Param("flag", ""), Param("a", "1")])
        #expect(QueryString.parse("a=1&&b=") == [Param("a", "1"), Param("b", "")])
        #expect(QueryString.parse("") == [])
        #expect(QueryString.parse("a=b=c") == [Param("a", "b=c")])
    }

    @Test("parse keeps order and duplicate names")
    func parseDuplicates() {
        #expect(QueryString.parse("a=2&a=1") == [Param("a", "2"), Param("a", "1")])
    }

    @Test("decode keeps malformed escapes literally")
    func decodeMalformed() {
        #expect(QueryString.decode("100%") == "100%")
        #expect(QueryString.decode("%zz") == "%zz")
        #expect(QueryString.decode("%4") == "%4")
        #expect(QueryString.decode("%41") == "A")
        #expect(QueryString.decode("%c3%a9") == "é")
    }

    @Test("percentEncode keeps exactly the RFC 3986 unreserved set")
    func unreservedKept() {
        let unreserved = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
        #expect(QueryString.percentEncode(unreserved) == unreserved)
    }

    @Test("percentEncode escapes reserved and other bytes with upper-case hex")
    func reservedEscaped() {
        #expect(QueryString.percentEncode(" ") == "%20")
        #expect(QueryString.percentEncode("é") == "%C3%A9")
        #expect(QueryString.percentEncode("+") == "%2B")
        #expect(QueryString.percentEncode("a&b=c") == "a%26b%3Dc")
        #expect(QueryString.percentEncode("/?#[]@!$'()*,;:") == "%2F%3F%23%5B%5D%40%21%24%27%28%29%2A%2C%3B%3A")
        #expect(QueryString.percentEncode("%") == "%25")
        #expect(QueryString.percentEncode("日本") == "%E6%97%A5%E6%9C%AC")
        #expect(QueryString.percentEncode("😀") == "%F0%9F%98%80")
        #expect(QueryString.percentEncode("\n") == "%0A")
        #expect(QueryString.percentEncode("") == "")
    }

    @Test("encode joins pairs in the given order, both sides encoded")
    func encode() {
        #expect(QueryString.encode([Param("b", "x y"), Param("a", "é")]) == "b=x%20y&a=%C3%A9")
        #expect(QueryString.encode([]) == "")
    }

    @Test("encode then parse round-trips arbitrary text")
    func roundTrip() {
        let params = [Param("k k", "v+v&=%"), Param("ü", "日本 語"), Param("empty", "")]
        #expect(QueryString.parse(QueryString.encode(params)) == params)
    }

    @Test("canonical sorts by encoded name, then encoded value")
    func canonical() {
        #expect(QueryString.canonical([Param("b", "2"), Param("a", "1")]) == "a=1&b=2")
        #expect(QueryString.canonical([Param("a", "2"), Param("a", "1")]) == "a=1&a=2")
        #expect(QueryString.canonical([Param("a", "b"), Param("a", "B"), Param("a", "10"), Param("a", "9")]) == "a=10&a=9&a=B&a=b")
        #expect(QueryString.canonical([Param("é", "1"), Param("z", "1")]) == "%C3%A9=1&z=1")
        #expect(QueryString.canonical([Param("x", "~"), Param("x", "%")]) == "x=%25&x=~")
        #expect(QueryString.canonical([Param]()) == "")
    }
}

@Suite("Cache bypass by request headers")
struct CacheBypassTests {
    @Test("Cache-Control with no-cache among its directives, or X-Concierge-Cache: bypass, in any case")
    func bypasses() {
        #expect(PreparedRequest.bypasses(["Cache-Control": "no-cache"]))
        #expect(PreparedRequest.bypasses(["cache-control": "max-age=0, No-Cache"]))
        #expect(PreparedRequest.bypasses(["X-Concierge-Cache": "BYPASS"]))
        #expect(PreparedRequest.bypasses(["Accept": "*/*", "x-concierge-cache": "bypass"]))
    }

    @Test("other fields, other values and look-alikes do not bypass")
    func keeps() {
        #expect(!PreparedRequest.bypasses([:]))
        #expect(!PreparedRequest.bypasses(["Cache-Control": "max-age=0"]))
        #expect(!PreparedRequest.bypasses(["Cache-Control": "no-cach"]))
        #expect(!PreparedRequest.bypasses(["Cache-Control": "no\rcache"]))
        #expect(!PreparedRequest.bypasses(["X-Concierge-Cache": "bypass-not"]))
        #expect(!PreparedRequest.bypasses(["X-Cache-Control": "no-cache", "Pragma": "no-cache"]))
    }
}

@Suite("Cache key params, written over bytes")
struct KeyCanonicalBytesTests {
    /// One side of a written pair normalised into a string of its own.
    private func normalized(_ text: Substring) -> String {
        var out: [UInt8] = []
        Array(text.utf8).withUnsafeBufferPointer { QueryString.appendNormalized($0, to: &out) }
        return String(decoding: out, as: UTF8.self)
    }

    /// The key's param string as it was built before it was written over bytes: a normalised
    /// string per name and value, the excluded ones filtered out, sorted as strings.
    private func reference(_ params: [Param], excluding: Set<String>) -> String {
        var pairs: [(name: String, value: String)] = []
        for param in params where !excluding.contains(param.name) {
            if let wire = param.wire {
                if let eq = wire.firstIndex(of: "=") {
                    pairs.append((normalized(wire[..<eq]), normalized(wire[wire.index(after: eq)...])))
                } else {
                    pairs.append((normalized(wire[...]), ""))
                }
            } else {
                pairs.append((QueryString.percentEncode(param.name), QueryString.percentEncode(param.value)))
            }
        }
        // By name only, stably: pairs of one name keep their order.
        pairs = pairs.enumerated().sorted { a, b in a.element.name != b.element.name ? a.element.name < b.element.name : a.offset < b.offset }
            .map(\.element)
        return pairs.map { "\($0.name)=\($0.value)" }.joined(separator: "&")
    }

    private func written(_ params: [Param], excluding: Set<String>) -> String {
        var out = TextBuilder(capacity: 0)
        QueryString.writeKeyCanonical(params, excluding: excluding, into: &out)
        return out.text
    }

    @Test("the same text as the string-by-string build over a grid of names, values, escapes, duplicates and exclusions")
    func agreesWithStrings() {
        let pieces = ["a", "A", "b", "ab", "a%20b", "%7e", "%7E", "%e4%bd%a0", "%FF", "%fe", "x+y", "%", "%4", "é", "_", "timestamp",
                      "", "zz=1", "a b", "\"q\""]
        var checked = 0
        for first in pieces {
            for second in pieces {
                for third in ["", "c=3", "a=0", "b", "timestamp=9", "%61=1"] {
                    let query = [first.isEmpty ? "" : "\(first)=\(second)", "\(second)=\(first)", third].filter { !$0.isEmpty }.joined(separator: "&")
                    let parsed = QueryString.parse(query)
                    // Params changed by a step (common params) have no written form.
                    let built = parsed + [Param(first, second)]
                    for excluding: Set<String> in [[], ["timestamp"], ["a", "b"], [first]] {
                        #expect(written(parsed, excluding: excluding) == reference(parsed, excluding: excluding), "\(query)")
                        #expect(written(built, excluding: excluding) == reference(built, excluding: excluding), "\(query)")
                        checked += 2
                    }
                }
            }
        }
        #expect(checked == 20 * 20 * 6 * 4 * 2)
    }

    @Test("every param excluded leaves no '?' in the key; some excluded keep it")
    func allExcluded() {
        let key = { (query: String) in
            CacheKey.make(method: "GET", upstreamBaseURL: "http://h", path: "/p", params: QueryString.parse(query),
                          excluding: ["t", "sig"], userID: nil, version: 1)
        }
        #expect(key("t=1&sig=2") == "GET http://h/p v=1")
        #expect(key("t=1&b=2&sig=3") == "GET http://h/p?b=2 v=1")
        #expect(key("") == "GET http://h/p v=1")
    }
}
