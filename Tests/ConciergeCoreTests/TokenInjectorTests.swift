@testable import ConciergeCore
import NIOHTTP1
import Testing

@Suite("TokenInjector")
struct TokenInjectorTests {
    private func jsonBody(_ text: String) -> RequestBody {
        RequestBody.parse(Array(text.utf8), contentType: "application/json")
    }

    @Test("query injection adds the token as the named query param")
    func queryAdds() {
        var request = ProxyRequest(method: "GET", target: "/api/items?limit=10")
        TokenInjector(points: [.query(name: "accessToken")]).inject("session-token", into: &request)
        #expect(request.query == [Param("limit", "10"), Param("accessToken", "session-token")])
        #expect(request.target == "/api/items?limit=10&accessToken=session-token")
    }

    @Test("query injection replaces every token the client sent there")
    func queryReplacesClientToken() {
        var request = ProxyRequest(method: "GET", target: "/api/items?accessToken=client1&limit=10&accessToken=client2")
        TokenInjector(points: [.query(name: "accessToken")]).inject("session-token", into: &request)
        #expect(request.query.filter { $0.name == "accessToken" } == [Param("accessToken", "session-token")])
        #expect(request.query.contains(Param("limit", "10")))
        #expect(!request.target.contains("client"))
    }

    @Test("header injection uses the format 'Bearer {access_token}' and replaces the client's header case-insensitively")
    func headerFormat() {
        var request = ProxyRequest(method: "GET", path: "/api/user/info",
                                   headers: HTTPHeaders([("authorization", "Bearer client"), ("Accept", "application/json")]))
        TokenInjector(points: [.header(name: "Authorization", format: "Bearer {access_token}")]).inject("tok123", into: &request)
        #expect(request.headers.first(name: "Authorization") == "Bearer tok123")
        #expect(request.headers["authorization"].count == 1)
        #expect(request.headers.first(name: "accept") == "application/json")
    }

    @Test("header injection with the bare format puts the token alone")
    func headerBare() {
        var request = ProxyRequest(method: "GET", path: "/x")
        TokenInjector(points: [.header(name: "X-Token", format: "{access_token}")]).inject("abc", into: &request)
        #expect(request.headers.first(name: "x-token") == "abc")
    }

    @Test("body injection sets the field in a form body, replacing the client's value")
    func bodyForm() {
        var request = ProxyRequest(method: "POST", path: "/api/user/update",
                                   body: .form([Param("nick", "ada"), Param("accessToken", "client")], original: []))
        TokenInjector(points: [.body(field: "accessToken")]).inject("tok", into: &request)
        #expect(request.body.value(of: "accessToken") == "tok")
        #expect(request.body.params.filter { $0.name == "accessToken" }.count == 1)
        #expect(request.body.value(of: "nick") == "ada")
        #expect(String(decoding: request.body.bytes, as: UTF8.self) == "nick=ada&accessToken=tok")
        #expect(request.query.isEmpty)
    }

    @Test("body injection sets the field in a JSON body, keeping the other members")
    func bodyJSON() {
        var request = ProxyRequest(method: "POST", path: "/api/user/update",
                                   body: jsonBody(#"{"nick":"ada","accessToken":"client","age":3}"#))
        TokenInjector(points: [.body(field: "accessToken")]).inject("tok", into: &request)
        guard case .json(let object) = request.body, case .object(let members)? = JSONValue.parse(object.bytes) else {
            Issue.record("body should stay JSON")
            return
        }
        #expect(members["accessToken"] == "tok")
        #expect(members["nick"] == "ada")
        #expect(members["age"] == 3)
        // Only the token's value changes.
        #expect(String(decoding: request.body.bytes, as: UTF8.self) == #"{"nick":"ada","accessToken":"tok","age":3}"#)
    }

    @Test("body injection into an empty POST body creates a form body")
    func bodyEmpty() {
        var request = ProxyRequest(method: "POST", path: "/api/x")
        TokenInjector(points: [.body(field: "accessToken")]).inject("tok", into: &request)
        #expect(request.body.contentType == "application/x-www-form-urlencoded")
        #expect(request.body.value(of: "accessToken") == "tok")
    }

    @Test("body injection into an opaque body falls back to the query")
    func bodyOpaqueFallsBack() {
        var request = ProxyRequest(method: "POST", target: "/api/upload?accessToken=client",
                                   body: .opaque([1, 2, 3]))
        TokenInjector(points: [.body(field: "accessToken")]).inject("tok", into: &request)
        #expect(request.query == [Param("accessToken", "tok")])
        #expect(request.body.bytes == [1, 2, 3])
    }

    @Test("several injection points are all filled")
    func severalPoints() {
        var request = ProxyRequest(method: "GET", path: "/x")
        let injector = TokenInjector(points: [.query(name: "t"), .header(name: "Authorization", format: "Bearer {access_token}")])
        injector.inject("tok", into: &request)
        #expect(request.query == [Param("t", "tok")])
        #expect(request.headers.first(name: "authorization") == "Bearer tok")
    }

    @Test("paramNames lists query and body names; headerNames lists headers")
    func names() {
        let injector = TokenInjector(points: [.query(name: "accessToken"), .body(field: "token"),
                                              .header(name: "Authorization", format: "Bearer {access_token}")])
        #expect(injector.paramNames == ["accessToken", "token"])
        #expect(injector.headerNames == ["Authorization"])
    }

    @Test("carriesToken tells whether the client sent something in a token place")
    func carriesToken() {
        let injector = TokenInjector(points: [.query(name: "accessToken"), .header(name: "Authorization", format: "{access_token}"),
                                              .body(field: "token")])
        #expect(!injector.carriesToken(ProxyRequest(method: "GET", target: "/x?a=1")))
        #expect(injector.carriesToken(ProxyRequest(method: "GET", target: "/x?accessToken=1")))
        #expect(injector.carriesToken(ProxyRequest(method: "GET", path: "/x", headers: HTTPHeaders([("AUTHORIZATION", "x")]))))
        #expect(injector.carriesToken(ProxyRequest(method: "POST", path: "/x", body: .form([Param("token", "t")], original: []))))
        #expect(injector.carriesToken(ProxyRequest(method: "POST", path: "/x", body: jsonBody(#"{"token":"t"}"#))))
        #expect(!injector.carriesToken(ProxyRequest(method: "POST", path: "/x", body: jsonBody(#"{"other":"t"}"#))))
    }
}
