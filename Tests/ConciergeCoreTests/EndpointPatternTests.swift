@testable import ConciergeCore
import Testing

@Suite("EndpointPattern")
struct EndpointPatternTests {
    private func pattern(_ text: String) throws -> EndpointPattern {
        try EndpointPattern.parse(text)
    }

    @Test("a method list 'GET,POST /api/items' matches exactly those methods on that path")
    func methodList() throws {
        let p = try pattern("GET,POST /api/items")
        #expect(p.methods == ["GET", "POST"])
        #expect(p.matches(method: "GET", path: "/api/items"))
        #expect(p.matches(method: "POST", path: "/api/items"))
        #expect(!p.matches(method: "PUT", path: "/api/items"))
        #expect(!p.matches(method: "DELETE", path: "/api/items"))
        #expect(!p.matches(method: "GET", path: "/api/items/1"))
        #expect(!p.matches(method: "GET", path: "/api/item"))
    }

    @Test("methods are upper-cased")
    func methodCase() throws {
        let p = try pattern("get,Post /api/items")
        #expect(p.methods == ["GET", "POST"])
        #expect(p.matches(method: "POST", path: "/api/items"))
    }

    @Test("a pattern without a method matches any method")
    func noMethodMeansAny() throws {
        let p = try pattern("/api/items")
        #expect(p.methods == nil)
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"] {
            #expect(p.matches(method: method, path: "/api/items"))
        }
    }

    @Test("'*' and 'ANY' as the method mean any method")
    func starMethod() throws {
        #expect(try pattern("* /api/items").methods == nil)
        #expect(try pattern("ANY /api/items").matches(method: "PATCH", path: "/api/items"))
    }

    @Test("a literal path matches regardless of a trailing or doubled slash, and nothing longer or shorter")
    func literalPath() throws {
        let p = try pattern("GET /api/user/info")
        #expect(p.matches(method: "GET", path: "/api/user/info"))
        #expect(p.matches(method: "GET", path: "/api/user/info/"))
        #expect(!p.matches(method: "GET", path: "/api/user"))
        #expect(!p.matches(method: "GET", path: "/api/user/info/more"))
        #expect(!p.matches(method: "GET", path: "/api/user/infos"))
        #expect(!p.matches(method: "GET", path: "/API/user/info"))
    }

    @Test("'{id}' matches exactly one segment")
    func namedSegment() throws {
        let p = try pattern("GET /api/items/{id}")
        #expect(p.path.segments == [.literal("api"), .literal("items"), .wildcard])
        #expect(p.matches(method: "GET", path: "/api/items/42"))
        #expect(p.matches(method: "GET", path: "/api/items/abc-def"))
        #expect(!p.matches(method: "GET", path: "/api/items"))
        #expect(!p.matches(method: "GET", path: "/api/items/42/comments"))
    }

    @Test("'{id}' in the middle of a path matches one segment there")
    func namedSegmentMiddle() throws {
        let p = try pattern("/api/users/{id}/posts")
        #expect(p.matches(method: "GET", path: "/api/users/7/posts"))
        #expect(!p.matches(method: "GET", path: "/api/users/7/8/posts"))
        #expect(!p.matches(method: "GET", path: "/api/users/posts"))
    }

    @Test("'*' matches exactly one segment")
    func starSegment() throws {
        let p = try pattern("GET /api/download/*")
        #expect(p.matches(method: "GET", path: "/api/download/file.bin"))
        #expect(!p.matches(method: "GET", path: "/api/download"))
        #expect(!p.matches(method: "GET", path: "/api/download/a/b"))
    }

    @Test("'{}' (empty braces) is a literal segment, not a wildcard")
    func emptyBracesAreLiteral() throws {
        let p = try pattern("/api/{}")
        #expect(p.path.segments == [.literal("api"), .literal("{}")])
        #expect(!p.matches(method: "GET", path: "/api/x"))
    }

    @Test("a final '**' matches the rest: zero or more segments")
    func restSegment() throws {
        let p = try pattern("/static/**")
        #expect(p.path.segments == [.literal("static"), .rest])
        #expect(p.matches(method: "GET", path: "/static"))
        #expect(p.matches(method: "GET", path: "/static/"))
        #expect(p.matches(method: "GET", path: "/static/a"))
        #expect(p.matches(method: "GET", path: "/static/a/b/c.js"))
        #expect(!p.matches(method: "GET", path: "/other/a"))
        #expect(!p.matches(method: "GET", path: "/staticx/a"))
    }

    @Test("'/**' alone matches every path")
    func restOnly() throws {
        let p = try pattern("/**")
        #expect(p.matches(method: "GET", path: "/"))
        #expect(p.matches(method: "GET", path: "/anything/at/all"))
    }

    @Test("'**' anywhere but last is a bad path")
    func restNotLast() {
        #expect(throws: EndpointPattern.ParseError.badPath("/a/**/b")) {
            try EndpointPattern.parse("/a/**/b")
        }
    }

    @Test("'~regex' is an unanchored search over the path")
    func regexUnanchored() throws {
        let p = try pattern("GET ~items")
        guard case .regex(let box) = p.path else {
            Issue.record("expected a regex path")
            return
        }
        #expect(box.source == "items")
        #expect(p.matches(method: "GET", path: "/api/items"))
        #expect(p.matches(method: "GET", path: "/api/items/42/comments"))
        #expect(p.matches(method: "GET", path: "/v1/myitems"))
        #expect(!p.matches(method: "POST", path: "/api/items"))
        #expect(!p.matches(method: "GET", path: "/api/users"))
    }

    @Test("'~^/api/v[0-9]+/' anchors at the start and matches versioned paths")
    func regexAnchored() throws {
        let p = try pattern("GET ~^/api/v[0-9]+/")
        #expect(p.matches(method: "GET", path: "/api/v1/items"))
        #expect(p.matches(method: "GET", path: "/api/v22/x/y"))
        #expect(!p.matches(method: "GET", path: "/api/vX/items"))
        #expect(!p.matches(method: "GET", path: "/proxy/api/v1/items"))
        #expect(!p.matches(method: "GET", path: "/api/v1"))
    }

    @Test("a regex with '$' must match the whole tail")
    func regexWholeMatch() throws {
        let p = try pattern("~^/api/items/[0-9]+$")
        #expect(p.methods == nil)
        #expect(p.matches(method: "DELETE", path: "/api/items/12"))
        #expect(!p.matches(method: "DELETE", path: "/api/items/12/x"))
    }

    @Test("an empty or blank pattern is rejected as empty")
    func emptyPattern() {
        #expect(throws: EndpointPattern.ParseError.empty) { try EndpointPattern.parse("") }
        #expect(throws: EndpointPattern.ParseError.empty) { try EndpointPattern.parse("   ") }
    }

    @Test("a method with non-letters is a bad method")
    func badMethod() {
        #expect(throws: EndpointPattern.ParseError.badMethod("G3T")) { try EndpointPattern.parse("G3T /api/items") }
        #expect(throws: EndpointPattern.ParseError.badMethod("GET-X")) { try EndpointPattern.parse("GET-X /api/items") }
    }

    @Test("a path not starting with '/' or '~' is a bad path")
    func badPath() {
        #expect(throws: EndpointPattern.ParseError.badPath("api/items")) { try EndpointPattern.parse("GET api/items") }
        #expect(throws: EndpointPattern.ParseError.badPath("api")) { try EndpointPattern.parse("api") }
    }

    @Test("an invalid regex is a badRegex error")
    func badRegex() {
        do {
            _ = try EndpointPattern.parse("GET ~[unclosed")
            Issue.record("expected a badRegex error")
        } catch {
            guard case .badRegex = error else {
                Issue.record("expected badRegex, got \(error)")
                return
            }
        }
    }
}

extension EndpointPattern.PathPattern {
    /// The segment list, or nil for a regex.
    var segments: [EndpointPattern.Segment]? {
        if case .segments(let s) = self { return s }
        return nil
    }
}

@Suite("EndpointRouter")
struct EndpointRouterTests {
    private func policy(_ name: String, _ match: String) throws -> EndpointPolicy {
        var p = EndpointPolicy.passThrough
        p.name = name
        p.match = try EndpointPattern.parse(match)
        return p
    }

    @Test("the first endpoint whose match fits wins, even if a later one also fits")
    func firstMatchWins() throws {
        let router = EndpointRouter(endpoints: [
            try policy("item", "GET /api/items/{id}"),
            try policy("anyItem", "/api/items/**"),
            try policy("list", "GET,POST /api/items"),
        ])
        #expect(router.route(method: "GET", path: "/api/items/5").name == "item")
        #expect(router.route(method: "DELETE", path: "/api/items/5").name == "anyItem")
        // `/api/items/**` also matches `/api/items` (zero segments) and comes before `list`.
        #expect(router.route(method: "GET", path: "/api/items").name == "anyItem")
    }

    @Test("order decides: a specific endpoint listed first shadows a general one")
    func orderMatters() throws {
        let specific = try policy("specific", "GET /api/items")
        let general = try policy("general", "~^/api/")
        #expect(EndpointRouter(endpoints: [specific, general]).route(method: "GET", path: "/api/items").name == "specific")
        #expect(EndpointRouter(endpoints: [general, specific]).route(method: "GET", path: "/api/items").name == "general")
    }

    @Test("an unmatched request gets the pass-through policy named 'default': no login, no cache")
    func unmatchedIsPassThrough() throws {
        let router = EndpointRouter(endpoints: [try policy("login", "POST /api/login")])
        let routed = router.route(method: "GET", path: "/api/login")
        #expect(routed.name == "default")
        #expect(routed.login == .none)
        #expect(!routed.isCacheable)
        #expect(routed.cache.ttl == .zero)
        #expect(routed.envelope == false)
        #expect(routed.upstream == nil)
        #expect(EndpointPolicy.passThrough.name == "default")
    }

    @Test("a router with no endpoints passes everything through")
    func emptyRouter() {
        #expect(EndpointRouter(endpoints: []).route(method: "POST", path: "/x/y").name == "default")
    }
}
