@testable import ConciergeCore
import NIOHTTP1
import Testing

@Suite("ProxyRequest")
struct ProxyRequestTests {
    @Test("a target splits into the raw path and the decoded query, and is forwarded as received")
    func targetSplit() {
        let request = ProxyRequest(method: "GET", target: "/api/a%20b?q=x+y&n=%C3%A9")
        #expect(request.path == "/api/a%20b")
        #expect(request.query == [Param("q", "x y"), Param("n", "é")])
        #expect(request.target == "/api/a%20b?q=x+y&n=%C3%A9")
    }

    @Test("a path changed by a step goes with the received query; a changed query is written from its params")
    func targetAfterChanges() {
        var request = ProxyRequest(method: "GET", target: "/a?z=1&y=%41")
        request.path = "/b"
        #expect(request.target == "/b?z=1&y=%41")
        request.query.append(Param("x", "2"))
        #expect(request.target == "/b?z=1&y=%41&x=2")
        var unchanged = ProxyRequest(method: "GET", target: "/a?z=1")
        unchanged.path = "/a"
        #expect(unchanged.target == "/a?z=1")
    }

    @Test("a target without a query has no params, and re-renders unchanged")
    func targetNoQuery() {
        let request = ProxyRequest(method: "GET", target: "/api/items")
        #expect(request.query.isEmpty)
        #expect(request.target == "/api/items")
        #expect(ProxyRequest(method: "GET", target: "/api/items?").query.isEmpty)
    }

    @Test("params go in the query for GET, HEAD, DELETE, OPTIONS and opaque bodies; in the body otherwise")
    func paramsGoInQuery() {
        for method in ["GET", "HEAD", "DELETE", "OPTIONS"] {
            #expect(ProxyRequest(method: method, path: "/").paramsGoInQuery)
        }
        for method in ["POST", "PUT", "PATCH"] {
            #expect(!ProxyRequest(method: method, path: "/").paramsGoInQuery)
            #expect(!ProxyRequest(method: method, path: "/", body: .form([], original: [])).paramsGoInQuery)
            #expect(ProxyRequest(method: method, path: "/", body: .opaque([0])).paramsGoInQuery)
        }
    }

    @Test("setParam replaces an existing value, or keeps it with onlyIfAbsent")
    func setParam() {
        var request = ProxyRequest(method: "GET", target: "/x?a=1&a=2&b=3")
        request.setParam("a", "9")
        #expect(request.query == [Param("b", "3"), Param("a", "9")])
        request.setParam("b", "7", onlyIfAbsent: true)
        #expect(request.query == [Param("b", "3"), Param("a", "9")])
        request.setParam("c", "1", onlyIfAbsent: true)
        #expect(request.query.last == Param("c", "1"))
    }

    // MARK: RequestBody

    @Test("RequestBody.parse recognises form, JSON objects and +json; everything else is opaque")
    func bodyParse() {
        let form = RequestBody.parse(Array("a=1&b=x+y".utf8), contentType: "application/x-www-form-urlencoded; charset=utf-8")
        #expect(form.params == [Param("a", "1"), Param("b", "x y")])
        let json = RequestBody.parse(Array(#"{"a":1}"#.utf8), contentType: "Application/JSON")
        #expect(json.contentType == "application/json")
        #expect(json.params == [Param("a", "1")])
        let problem = RequestBody.parse(Array(#"{"a":"x"}"#.utf8), contentType: "application/problem+json")
        #expect(problem.params == [Param("a", "x")])
        for (bytes, type) in [("[1,2]", "application/json"), ("{bad", "application/json"), ("hello", "text/plain"), ("a=1", nil)] {
            let body = RequestBody.parse(Array(bytes.utf8), contentType: type)
            if case .opaque(let raw) = body { #expect(raw == Array(bytes.utf8)) } else { Issue.record("\(bytes) should be opaque") }
        }
        if case .empty = RequestBody.parse([], contentType: "application/json") {} else { Issue.record("no bytes should be empty") }
    }

    @Test("JSON body params render non-string values as JSON text")
    func jsonParams() {
        let body = RequestBody.parse(Array(#"{"s":"x","n":2,"b":true,"o":{"k":1},"z":null}"#.utf8), contentType: "application/json")
        let params = Dictionary(uniqueKeysWithValues: body.params.map { ($0.name, $0.value) })
        #expect(params == ["s": "x", "n": "2", "b": "true", "o": #"{"k":1}"#, "z": "null"])
    }

    @Test("an untouched JSON body keeps its original bytes; an added member goes after the last one, nothing else changes")
    func jsonBytes() {
        let original = Array("{ \"b\" : 1 , \"a\" : 2 }".utf8)
        var body = RequestBody.parse(original, contentType: "application/json")
        #expect(body.bytes == original)
        body.set("c", .string("3"))
        #expect(String(decoding: body.bytes, as: UTF8.self) == #"{ "b" : 1 , "a" : 2,"c":"3" }"#)
    }

    @Test("set on an opaque body refuses; value(of:) reads form and JSON")
    func setAndValue() {
        var opaque = RequestBody.opaque([1])
        let opaqueAccepted = opaque.set("a", "1")
        #expect(opaqueAccepted == false)
        #expect(opaque.value(of: "a") == nil)
        var form = RequestBody.form([Param("a", "1")], original: [])
        let keptExisting = form.set("a", "2", onlyIfAbsent: true)
        #expect(keptExisting)
        #expect(form.value(of: "a") == "1")
        let replaced = form.set("a", "2")
        #expect(replaced)
        #expect(form.value(of: "a") == "2")
        #expect(RequestBody.empty.value(of: "a") == nil)
        #expect(RequestBody.empty.bytes.isEmpty)
        #expect(RequestBody.empty.contentType == nil)
    }

    @Test("form bytes are RFC 3986 encoded")
    func formBytes() {
        let body = RequestBody.form([Param("q", "a b&c"), Param("é", "+")], original: [])
        #expect(String(decoding: body.bytes, as: UTF8.self) == "q=a%20b%26c&%C3%A9=%2B")
    }
}
