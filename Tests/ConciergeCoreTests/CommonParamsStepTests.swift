@testable import ConciergeCore
import NIOHTTP1
import Testing

@Suite("CommonParamsStep")
struct CommonParamsStepTests {
    private let step = CommonParamsStep(common: ConciergeConfig.Common(
        headers: ["X-Requested-With": "1", "X-Client": "concierge"],
        params: [(name: "platform", value: "linux"), (name: "app_version", value: "1.4.0")]))

    @Test("GET: common params go to the query, after the client's")
    func getQuery() {
        var request = ProxyRequest(method: "GET", target: "/api/items?limit=10")
        step.apply(to: &request)
        #expect(request.query == [Param("limit", "10"), Param("platform", "linux"), Param("app_version", "1.4.0")])
        if case .empty = request.body {} else { Issue.record("a GET body must stay empty") }
    }

    @Test("HEAD and DELETE also take the params in the query")
    func headDeleteQuery() {
        for method in ["HEAD", "DELETE"] {
            var request = ProxyRequest(method: method, path: "/api/items/1")
            step.apply(to: &request)
            #expect(request.query.map(\.name) == ["platform", "app_version"])
        }
    }

    @Test("GET: a value the client sent wins")
    func clientWinsInQuery() {
        var request = ProxyRequest(method: "GET", target: "/api/items?platform=mac")
        step.apply(to: &request)
        #expect(request.query.filter { $0.name == "platform" } == [Param("platform", "mac")])
        #expect(request.query.contains(Param("app_version", "1.4.0")))
    }

    @Test("POST form: common params go to the body, not the query; client values win")
    func postForm() {
        var request = ProxyRequest(method: "POST", target: "/api/items?q=1",
                                   body: .form([Param("name", "x"), Param("app_version", "9.9")], original: []))
        step.apply(to: &request)
        #expect(request.query == [Param("q", "1")])
        #expect(request.body.params == [Param("name", "x"), Param("app_version", "9.9"), Param("platform", "linux")])
        #expect(String(decoding: request.body.bytes, as: UTF8.self) == "name=x&app_version=9.9&platform=linux")
    }

    @Test("POST JSON: common params become top-level string members; client values win")
    func postJSON() {
        var request = ProxyRequest(method: "POST", path: "/api/items",
                                   body: RequestBody.parse(Array(#"{"platform":"ios","page":2}"#.utf8), contentType: "application/json"))
        step.apply(to: &request)
        guard case .json(let object) = request.body, case .object(let members)? = JSONValue.parse(object.bytes) else {
            Issue.record("body should stay JSON")
            return
        }
        #expect(members == ["platform": "ios", "page": 2, "app_version": "1.4.0"])
        #expect(request.query.isEmpty)
        // Added after the client's members, everything else as sent.
        #expect(String(decoding: request.body.bytes, as: UTF8.self) == #"{"platform":"ios","page":2,"app_version":"1.4.0"}"#)
    }

    @Test("POST without a body gets a form body with the params")
    func postEmpty() {
        var request = ProxyRequest(method: "POST", path: "/api/items")
        step.apply(to: &request)
        #expect(request.body.contentType == "application/x-www-form-urlencoded")
        #expect(request.body.params == [Param("platform", "linux"), Param("app_version", "1.4.0")])
        #expect(request.query.isEmpty)
    }

    @Test("POST with an opaque body takes the params in the query")
    func postOpaque() {
        var request = ProxyRequest(method: "POST", path: "/api/upload", body: .opaque(Array("binary".utf8)))
        step.apply(to: &request)
        #expect(request.query.map(\.name) == ["platform", "app_version"])
        #expect(request.body.bytes == Array("binary".utf8))
    }

    @Test("common headers are added unless the client sent them (any case)")
    func headers() {
        var request = ProxyRequest(method: "GET", path: "/x", headers: HTTPHeaders([("x-requested-with", "app")]))
        step.apply(to: &request)
        #expect(request.headers.first(name: "X-Requested-With") == "app")
        #expect(request.headers["x-requested-with"].count == 1)
        #expect(request.headers.first(name: "x-client") == "concierge")
    }

    @Test("applying twice adds nothing more")
    func idempotent() {
        var request = ProxyRequest(method: "GET", path: "/x")
        step.apply(to: &request)
        step.apply(to: &request)
        #expect(request.query.count == 2)
        #expect(request.headers.count == 2)
    }
}
