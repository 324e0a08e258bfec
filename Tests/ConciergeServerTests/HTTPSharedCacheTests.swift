import ConciergeCore
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// `mode: http` as a shared cache among clients, end to end: what one client's request or
/// reply carries (its `Authorization`, a `Set-Cookie` for it, a forwarding field the upstream
/// reflects) never reaches another client through the cache.
@Suite("HTTP shared cache")
struct HTTPSharedCacheTests {
    static let endpoints = """
        - name: httpCached
          match: /h/**
          upstream: origin
          envelope: false
          cache: { mode: http }
        - name: httpCookies
          match: /c/**
          upstream: origin
          envelope: false
          cache: { mode: http, store_set_cookie: true }
        - name: httpKeyed
          match: /k/**
          upstream: origin
          envelope: false
          cache: { mode: http, key_headers: [X-Forwarded-Host] }
        - name: ttlCached
          match: /t/**
          upstream: origin
          envelope: false
          cache: { ttl: 60s }
        """

    func withRig(_ origin: HTTPTestOrigin, _ body: (ConciergeTestRig) async throws -> Void) async throws {
        try await ConciergeTestRig.with(origin: origin, endpoints: Self.endpoints, clock: ManualClock(), body)
    }

    static func cacheControl(_ path: String) -> String {
        switch path {
        case "/h/public": return "public, max-age=60"
        case "/h/smaxage": return "s-maxage=60"
        case "/h/revalidate": return "max-age=60, must-revalidate"
        default: return "max-age=60"
        }
    }

    @Test("Authorization: public, s-maxage and must-revalidate replies are stored and shared; without them neither stored nor served")
    func authorizationSharesOnlyWhatTheReplyAllows() async throws {
        let origin = try await HTTPTestOrigin.start { request, n in
            .init(headers: [("Cache-Control", Self.cacheControl(request.path))],
                  body: "\(request.headers.first(name: "authorization") ?? "anonymous")#\(n)")
        }
        try await withRig(origin) { rig in
            for path in ["/h/public", "/h/smaxage", "/h/revalidate"] {
                let alice = try await rig.get(path, headers: [("Authorization", "Bearer alice")])
                #expect(alice.header("Cache-Status")?.contains("stored") == true, "\(path)")
                let bob = try await rig.get(path, headers: [("Authorization", "Bearer bob")])
                #expect(bob.header("X-Cache") == "HIT" && bob.text == alice.text, "\(path): shared as the reply allows")
                #expect(try await rig.get(path).header("X-Cache") == "HIT", "\(path): and served without Authorization")
                #expect(origin.requests(path: path).count == 1)
            }
            let alice = try await rig.get("/h/plain", headers: [("Authorization", "Bearer alice")])
            #expect(alice.header("Cache-Status")?.contains("stored") == false)
            let bob = try await rig.get("/h/plain", headers: [("Authorization", "Bearer bob")])
            #expect(bob.header("X-Cache") == "MISS" && bob.text.hasPrefix("Bearer bob"), "alice's reply is not stored")
            let anonymous = try await rig.get("/h/plain")
            #expect(anonymous.header("X-Cache") == "MISS" && anonymous.text.hasPrefix("anonymous"))
            #expect(try await rig.get("/h/plain").header("X-Cache") == "HIT", "the anonymous reply is stored")
            let carol = try await rig.get("/h/plain", headers: [("Authorization", "Bearer carol")])
            #expect(carol.header("X-Cache") == "MISS" && carol.text.hasPrefix("Bearer carol"),
                    "a stored reply without those directives is not served to a request with Authorization")
            #expect(origin.requests(path: "/h/plain").count == 4)
            // ttl mode keeps its rule: a client's own credentials never share without `scope: shared`.
            for _ in 0..<2 { _ = try await rig.get("/t/own", headers: [("Authorization", "Bearer alice")]) }
            #expect(origin.requests(path: "/t/own").count == 2)
        }
    }

    @Test("Set-Cookie: a reply that sets one is not served to another client (heuristic freshness too); store_set_cookie stores it without")
    func setCookieIsNotServedToAnotherClient() async throws {
        let origin = try await HTTPTestOrigin.start { request, n in
            let fresh = request.path.hasSuffix("heuristic")
                ? ("Last-Modified", HTTPDate.format(1_000_000_000)) : ("Cache-Control", "max-age=60")
            return .init(headers: [fresh, ("Set-Cookie", "sid=client\(n); HttpOnly")], body: "page#\(n)")
        }
        try await withRig(origin) { rig in
            for path in ["/h/page", "/h/heuristic"] {
                let first = try await rig.get(path)
                #expect(first.header("Set-Cookie")?.hasPrefix("sid=client") == true, "the client gets its own cookie")
                let second = try await rig.get(path)
                #expect(second.header("X-Cache") == "MISS", "\(path): not stored")
                #expect(second.header("Set-Cookie") != first.header("Set-Cookie"), "\(path): never the first client's cookie")
            }
            let first = try await rig.get("/c/page")
            #expect(first.header("Set-Cookie") != nil && first.header("Cache-Status")?.contains("stored") == true)
            let second = try await rig.get("/c/page")
            #expect(second.header("X-Cache") == "HIT" && second.text == first.text)
            #expect(second.header("Set-Cookie") == nil, "stored without the cookie")
        }
    }

    @Test("forwarding fields: a reflected X-Forwarded-Host never reaches the upstream or the cache; one in key_headers is keyed")
    func reflectedForwardingFieldsNeverPoison() async throws {
        let origin = try await HTTPTestOrigin.start { request, n in
            .init(headers: [("Cache-Control", "max-age=60")],
                  body: "https://\(request.headers.first(name: "x-forwarded-host") ?? "api.example.com")/next#\(n)")
        }
        let forwarding = [("X-Forwarded-Host", "evil.example"), ("X-Forwarded-Proto", "http"), ("X-Original-URL", "/admin"),
                          ("X-Rewrite-URL", "/admin"), ("X-HTTP-Method-Override", "DELETE"), ("Forwarded", "host=evil.example")]
        try await withRig(origin) { rig in
            let poisoned = try await rig.get("/h/page", headers: forwarding)
            #expect(poisoned.text.hasPrefix("https://api.example.com/"))
            let sent = try #require(origin.requests(path: "/h/page").first)
            for (name, _) in forwarding { #expect(!sent.headers.contains(name: name), "\(name) is not forwarded") }
            let next = try await rig.get("/h/page")
            #expect(next.header("X-Cache") == "HIT" && !next.text.contains("evil"))
            _ = try await rig.get("/t/page", headers: forwarding)
            #expect(origin.requests(path: "/t/page").first?.headers.contains(name: "x-forwarded-host") == false, "ttl mode too")

            let a = try await rig.get("/k/page", headers: [("X-Forwarded-Host", "a.example")])
            let b = try await rig.get("/k/page", headers: [("X-Forwarded-Host", "b.example")])
            #expect(a.text.hasPrefix("https://a.example/") && b.text.hasPrefix("https://b.example/"), "listed: forwarded")
            #expect(b.header("X-Cache") == "MISS", "two values, two entries")
            let againA = try await rig.get("/k/page", headers: [("X-Forwarded-Host", "a.example")])
            #expect(againA.header("X-Cache") == "HIT" && againA.text == a.text)
            let none = try await rig.get("/k/page")
            #expect(none.header("X-Cache") == "MISS" && none.text.hasPrefix("https://api.example.com/"))
            #expect(origin.requests(path: "/k/page").count == 3)
            let listed = try await rig.admin(.GET, "/cache/entries?pattern=headers%3Dx-forwarded-host")
            #expect(listed.json?[path: "entries"]?.arrayValue?.count == 2, "\(listed.text)")
        }
    }
}
