@testable import ConciergeCore
import NIOCore
import NIOHTTP1
import Testing

/// Different requests never share a key: pairs of one name in their order, query and body
/// apart, JSON values typed, any other body by a digest of its bytes. Keys are made by
/// ``PreparedRequest/prepare(_:route:session:)``, as for a request on the proxy.
@Suite("Cache key: different requests, different keys")
struct CacheKeyDistinctTests {
    static let yaml = """
        upstreams:
          api: http://upstream.test
        cache:
          volatile_params: [timestamp]
        endpoints:
          - name: search
            match: GET,POST /search
            cache: { ttl: 60s }
        """

    private let config: RuntimeConfig

    init() throws {
        config = RuntimeConfig(config: try ConfigLoader.parse(yaml: Self.yaml))
    }

    /// The key the proxy makes for a request to `target` with `body` of `contentType`.
    private func key(_ method: String = "POST", _ target: String = "/search", body: [UInt8] = [], contentType: String? = nil) -> String {
        var headers: HTTPHeaders = ["Host": "127.0.0.1"]
        if let contentType { headers.add(name: "Content-Type", value: contentType) }
        let received = PreparedRequest.Received(method: method, target: target, headers: headers,
                                                body: ByteBuffer(bytes: body), clientAddress: nil)
        let route = PreparedRequest.Route(method: method, target: target, config: config, environment: "api")
        guard case .ready(let prepared) = PreparedRequest.prepare(received, route: route, session: nil), let key = prepared.cacheKey else {
            Issue.record("\(method) \(target) has no cache key")
            return ""
        }
        return key
    }

    private func json(_ text: String) -> String { key(body: Array(text.utf8), contentType: "application/json") }
    private func form(_ text: String, _ target: String = "/search") -> String {
        key("POST", target, body: Array(text.utf8), contentType: "application/x-www-form-urlencoded")
    }

    @Test("the pairs a red-team pass found sharing an entry now have two keys")
    func reportedPairsDiffer() {
        let pairs: [(String, String, String)] = [
            ("?a=1&a=2 / ?a=2&a=1", key("GET", "/search?a=1&a=2"), key("GET", "/search?a=2&a=1")),
            ("XML", key(body: Array("<a>1</a>".utf8), contentType: "application/xml"), key(body: Array("<a>2</a>".utf8), contentType: "application/xml")),
            ("GraphQL", key(body: Array("{ item(id: 1) { name } }".utf8), contentType: "application/graphql"),
             key(body: Array("{ item(id: 2) { name } }".utf8), contentType: "application/graphql")),
            ("JSON array", json("[1]"), json("[2]")),
            ("JSON scalar", json("1"), json("2")),
            ("JSON string scalar", json("\"a\""), json("\"b\"")),
            ("binary", key(body: [0, 1, 2, 0xFF], contentType: "application/octet-stream"), key(body: [0, 1, 2, 0xFE], contentType: "application/octet-stream")),
            ("BOM+JSON", key(body: [0xEF, 0xBB, 0xBF] + Array("{\"x\":1}".utf8), contentType: "application/json"),
             key(body: [0xEF, 0xBB, 0xBF] + Array("{\"x\":2}".utf8), contentType: "application/json")),
            ("non-UTF-8 form", key(body: [UInt8(ascii: "a"), UInt8(ascii: "="), 0xFF], contentType: "application/x-www-form-urlencoded"),
             key(body: [UInt8(ascii: "a"), UInt8(ascii: "="), 0xFE], contentType: "application/x-www-form-urlencoded")),
            ("1 / \"1\"", json(#"{"x":1}"#), json(#"{"x":"1"}"#)),
            ("true / \"true\"", json(#"{"x":true}"#), json(#"{"x":"true"}"#)),
            ("null / \"null\"", json(#"{"x":null}"#), json(#"{"x":"null"}"#)),
            ("query x=1 / body x=1", key("POST", "/search?x=1"), form("x=1")),
            ("query x=1 / JSON x=1", key("POST", "/search?x=1"), json(#"{"x":"1"}"#)),
            ("form / JSON", form("x=1"), json(#"{"x":"1"}"#)),
            ("JSON duplicates in order", json(#"{"a":1,"a":2}"#), json(#"{"a":2,"a":1}"#)),
            ("form duplicates in order", form("a=1&a=2"), form("a=2&a=1")),
            ("JSON {} / no body", json("{}"), key()),
        ]
        for (name, first, second) in pairs {
            #expect(first != second, "\(name): both \(first)")
        }
    }

    @Test("equivalent requests still share: other order of other names, JSON white space and escapes, RFC 3986 escapes")
    func equivalentRequestsShare() {
        #expect(key("GET", "/search?b=2&a=1") == key("GET", "/search?a=1&b=2"))
        #expect(key("GET", "/search?a=1&b=2&a=2") == key("GET", "/search?b=2&a=1&a=2"))
        #expect(key("GET", "/search?q=%7e") == key("GET", "/search?q=~"))
        #expect(json(#"{"a":1, "b":"x"}"#) == json(#"{ "b" : "x","a":1}"#))
        #expect(json(#"{"b":"\u0041"}"#) == json(#"{"b":"A"}"#))
        #expect(form("b=2&a=1") == form("a=1&b=2"))
        #expect(json(#"{"x":1,"timestamp":5}"#) == json(#"{"x":1,"timestamp":6}"#), "volatile params stay out of the body's part too")
    }

    @Test("the key stays readable: 'form:' pairs, 'json:' members typed with ':=', 'body=' and 32 hex characters of SHA-256")
    func readableFormat() {
        #expect(key("GET", "/search?b=2&a=1&a=0") == "GET http://upstream.test/search?a=1&a=0&b=2 v=1")
        #expect(form("q=shoes&size=10", "/search?page=2") == "POST http://upstream.test/search?page=2 form:q=shoes&size=10 v=1")
        #expect(json(#"{"q":"red shoes","size":10,"new":true,"tags":["a"],"none":null}"#)
                == "POST http://upstream.test/search json:new:=true&none:=null&q=red%20shoes&size:=10&tags:=%5B%22a%22%5D v=1")
        // SHA-256("<a>1</a>") = 3838997c59d257450a1508a52a1c3bcdfbabb24ec65a21b4d644e0cea99fc29b; its first 32 hex characters.
        #expect(key(body: Array("<a>1</a>".utf8), contentType: "application/xml")
                == "POST http://upstream.test/search body=3838997c59d257450a1508a52a1c3bcd v=1")
        #expect(json(#"{"a:":1}"#) == "POST http://upstream.test/search json:a%3A:=1 v=1", "a ':' in a name is escaped")
    }

    /// A request of the grid, and what tells it from another: the query's pairs ordered
    /// stably by name, the body's kind and content (pairs ordered the same way; a JSON
    /// member's literal; other bytes as they are).
    private struct GridRequest {
        var method: String
        var query: [(String, String)]
        var body: Body

        enum Body: Equatable {
            case none
            case form([String])
            case json([String])
            case bytes([UInt8], contentType: String)
        }

        var target: String { "/search" + (query.isEmpty ? "" : "?" + query.map { "\($0.0)=\($0.1)" }.joined(separator: "&")) }

        var identity: String {
            func stable(_ pairs: [(String, String)]) -> String {
                pairs.enumerated().sorted { $0.element.0 != $1.element.0 ? $0.element.0 < $1.element.0 : $0.offset < $1.offset }
                    .map { "\($0.element.0)\u{1}\($0.element.1)" }.joined(separator: "\u{2}")
            }
            func split(_ member: String) -> (String, String) {
                let parts = member.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
            }
            let bodyIdentity: String
            switch body {
            // An empty form is no body: the upstream gets no bytes either way.
            case .none, .form([]): bodyIdentity = "none"
            case .form(let pairs): bodyIdentity = "form " + stable(pairs.map(split))
            case .json(let members): bodyIdentity = "json " + stable(members.map(split))
            case .bytes(let bytes, _): bodyIdentity = "bytes \(bytes)"
            }
            return "\(method) \(stable(query)) \(bodyIdentity)"
        }
    }

    @Test("a grid of 6,000 requests: two requests share a key exactly when the upstream sees the same request")
    func gridOfPairs() {
        let names = ["a", "b"], values = ["1", "2"]
        let queryPairs = names.flatMap { n in values.map { (n, $0) } }
        var queries: [[(String, String)]] = [[]]
        for length in 1...3 {
            var next: [[(String, String)]] = [[]]
            for _ in 0..<length { next = next.flatMap { prefix in queryPairs.map { prefix + [$0] } } }
            queries += next
        }
        // JSON members written `name=literal` (split at the first `=` by the identity).
        let literals = ["1", "\"1\"", "true", "\"true\"", "null", "\"null\"", "1.0", "[1]", "{\"a\":1}"]
        var bodies: [GridRequest.Body] = [.none, .form([]), .json([])]
        bodies += queryPairs.map { .form(["\($0.0)=\($0.1)"]) }
        bodies += [.form(["a=1", "a=2"]), .form(["a=2", "a=1"]), .form(["a=1", "b=1"]), .form(["b=1", "a=1"])]
        bodies += names.flatMap { n in literals.map { .json(["\(n)=\($0)"]) } }
        bodies += [.json(["a=1", "a=2"]), .json(["a=2", "a=1"]), .json(["a=1", "b=\"1\""]), .json(["b=\"1\"", "a=1"])]
        bodies += [.bytes(Array("<a>1</a>".utf8), contentType: "application/xml"), .bytes(Array("<a>2</a>".utf8), contentType: "application/xml"),
                   .bytes(Array("[1]".utf8), contentType: "application/json"), .bytes(Array("1".utf8), contentType: "application/json"),
                   .bytes([0xEF, 0xBB, 0xBF] + Array("{}".utf8), contentType: "application/json"),
                   .bytes([UInt8(ascii: "a"), UInt8(ascii: "="), 0xFF], contentType: "application/x-www-form-urlencoded")]
        var identityOfKey: [String: String] = [:]
        var keyOfIdentity: [String: String] = [:]
        var checked = 0
        for method in ["GET", "POST"] {
            for query in queries {
                for body in bodies {
                    let request = GridRequest(method: method, query: query, body: body)
                    let made: String
                    switch body {
                    case .none: made = key(method, request.target)
                    case .form(let pairs): made = key(method, request.target, body: Array(pairs.joined(separator: "&").utf8),
                                                     contentType: "application/x-www-form-urlencoded")
                    case .json(let members):
                        let text = "{" + members.map { member -> String in
                            let (name, literal) = (member.prefix { $0 != "=" }, member.drop(while: { $0 != "=" }).dropFirst())
                            return "\"\(name)\":\(literal)"
                        }.joined(separator: ",") + "}"
                        made = key(method, request.target, body: Array(text.utf8), contentType: "application/json")
                    case .bytes(let bytes, let contentType): made = key(method, request.target, body: bytes, contentType: contentType)
                    }
                    let identity = request.identity
                    if let other = identityOfKey[made] { #expect(other == identity, "\(other) and \(identity) share \(made)") }
                    if let other = keyOfIdentity[identity] { #expect(other == made, "\(identity) has two keys") }
                    identityOfKey[made] = identity
                    keyOfIdentity[identity] = made
                    checked += 1
                }
            }
        }
        #expect(checked == 2 * queries.count * bodies.count)
        #expect(checked > 6_000)
        #expect(identityOfKey.count == keyOfIdentity.count)
    }
}
