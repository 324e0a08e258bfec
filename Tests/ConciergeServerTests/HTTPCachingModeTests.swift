import ConciergeCore
import ConciergeTestSupport
import Foundation
import NIOHTTP1
import Testing

/// `cache.mode: http` end to end: a daemon in front of an origin whose caching headers each test
/// chooses, time moved by a ``ManualClock``.
@Suite("HTTP caching mode")
struct HTTPCachingModeTests {
    static let endpoints = """
        - name: httpCached
          match: /h/**
          upstream: origin
          envelope: false
          cache: { mode: http }
        - name: httpStaleIfError
          match: /s/**
          upstream: origin
          envelope: false
          cache: { mode: http, stale_if_error: 1h }
        """

    func withRig(_ origin: HTTPTestOrigin, clock: ManualClock, _ body: (ConciergeTestRig) async throws -> Void) async throws {
        try await ConciergeTestRig.with(origin: origin, endpoints: Self.endpoints, clock: clock, body)
    }

    @Test("max-age makes a reply fresh: hits with a growing Age never ask the origin; past it the origin is asked again")
    func maxAge() async throws {
        let clock = ManualClock()
        let origin = try await HTTPTestOrigin.start { _, n in
            .init(headers: [("Cache-Control", "max-age=60"), ("Date", HTTPDate.format(clock.now))], body: "v\(n)")
        }
        try await withRig(origin, clock: clock) { rig in
            let first = try await rig.get("/h/a")
            #expect(first.text == "v0" && first.header("X-Cache") == "MISS")
            #expect(first.header("Cache-Status")?.contains("; stored") == true && first.header("Cache-Status")?.contains("; ttl=") == true)
            clock.advance(by: 30)
            let hit = try await rig.get("/h/a")
            #expect(hit.text == "v0" && hit.header("X-Cache") == "HIT" && hit.header("Age") == "30")
            clock.advance(by: 31)
            let again = try await rig.get("/h/a")
            #expect(again.text == "v1" && again.header("X-Cache") == "MISS")
            #expect(origin.requests(path: "/h/a").count == 2)
        }
    }

    @Test("a stale reply with an ETag is revalidated: If-None-Match goes out, the 304 refreshes stored headers and freshness, the stored body is served")
    func revalidation() async throws {
        let clock = ManualClock()
        let origin = try await HTTPTestOrigin.start { request, n in
            let date = ("Date", HTTPDate.format(clock.now))
            if request.headers.first(name: "if-none-match") == "\"v1\"" {
                return .init(status: 304, headers: [("Cache-Control", "max-age=100"), ("ETag", "\"v1\""), ("X-Version", "2"), date])
            }
            return .init(headers: [("Cache-Control", "max-age=1"), ("ETag", "\"v1\""), ("X-Version", "1"), date], body: "the body")
        }
        try await withRig(origin, clock: clock) { rig in
            #expect(try await rig.get("/h/r").header("X-Version") == "1")
            clock.advance(by: 5)
            let revalidated = try await rig.get("/h/r")
            #expect(revalidated.status == 200 && revalidated.text == "the body")
            #expect(revalidated.header("X-Version") == "2", "the 304's fields replace the stored ones")
            #expect(revalidated.header("Cache-Status")?.contains("fwd-status=304") == true)
            let sent = origin.requests(path: "/h/r")
            #expect(sent.count == 2 && sent[1].headers.first(name: "if-none-match") == "\"v1\"")
            clock.advance(by: 50)
            let hit = try await rig.get("/h/r")
            #expect(hit.header("X-Cache") == "HIT" && hit.header("X-Version") == "2" && hit.text == "the body", "fresh for the 304's 100 s")
            #expect(origin.requests(path: "/h/r").count == 2)
            // The client's own conditional request on a fresh entry: 304 from the cache.
            let conditional = try await rig.get("/h/r", headers: [("If-None-Match", "\"v1\"")])
            #expect(conditional.status == 304 && conditional.body.readableBytes == 0)
            #expect(origin.requests(path: "/h/r").count == 2)
        }
    }

    @Test("Vary: two variants stored side by side, each served to its own requests; Vary: * is never stored")
    func vary() async throws {
        let clock = ManualClock()
        let origin = try await HTTPTestOrigin.start { request, _ in
            if request.path == "/h/star" { return .init(headers: [("Cache-Control", "max-age=60"), ("Vary", "*")], body: "star") }
            let language = request.headers.first(name: "accept-language") ?? "none"
            return .init(headers: [("Cache-Control", "max-age=60"), ("Vary", "Accept-Language")], body: "lang=\(language)")
        }
        try await withRig(origin, clock: clock) { rig in
            #expect(try await rig.get("/h/v", headers: [("Accept-Language", "en")]).text == "lang=en")
            #expect(try await rig.get("/h/v", headers: [("Accept-Language", "fr")]).text == "lang=fr")
            let en = try await rig.get("/h/v", headers: [("Accept-Language", " EN ")])
            #expect(en.text == "lang=en" && en.header("X-Cache") == "HIT", "normalised: case and white space")
            let fr = try await rig.get("/h/v", headers: [("Accept-Language", "fr")])
            #expect(fr.text == "lang=fr" && fr.header("X-Cache") == "HIT")
            #expect(origin.requests(path: "/h/v").count == 2)
            _ = try await rig.get("/h/star")
            _ = try await rig.get("/h/star")
            #expect(origin.requests(path: "/h/star").count == 2)
        }
    }

    @Test("the origin down: must-revalidate gives 504, never the stale reply; an endpoint's stale_if_error serves one that allows it")
    func mustRevalidate() async throws {
        let clock = ManualClock()
        let origin = try await HTTPTestOrigin.start { request, _ in
            request.path.hasPrefix("/h/")
                ? .init(headers: [("Cache-Control", "max-age=1, must-revalidate")], body: "strict")
                : .init(headers: [("Cache-Control", "max-age=1")], body: "lenient")
        }
        try await withRig(origin, clock: clock) { rig in
            #expect(try await rig.get("/h/m").text == "strict")
            #expect(try await rig.get("/s/m").text == "lenient")
            await origin.stop()
            clock.advance(by: 10)
            let strict = try await rig.get("/h/m")
            #expect(strict.status == 504)
            #expect(strict.text != "strict")
            let lenient = try await rig.get("/s/m")
            #expect(lenient.status == 200 && lenient.text == "lenient" && lenient.header("X-Cache") == "STALE")
        }
    }

    @Test("a POST that succeeds invalidates the stored GET of its URL and of its Location; a failed one does not")
    func unsafeMethodInvalidates() async throws {
        let clock = ManualClock()
        let origin = try await HTTPTestOrigin.start { request, n in
            switch (request.method, request.path) {
            case ("POST", "/h/items"): return .init(status: 201, headers: [("Location", "/h/items/7")], body: "created")
            case ("POST", "/h/fail"): return .init(status: 409, body: "no")
            default: return .init(headers: [("Cache-Control", "max-age=600")], body: "\(request.path)#\(n)")
            }
        }
        try await withRig(origin, clock: clock) { rig in
            for path in ["/h/items", "/h/items/7", "/h/items?page=2", "/h/fail"] { _ = try await rig.get(path) }
            _ = try await rig.request(.POST, "/h/items", body: "x")
            _ = try await rig.request(.POST, "/h/fail", body: "x")
            #expect(try await rig.get("/h/items").header("X-Cache") == "MISS", "its target: fetched again")
            #expect(try await rig.get("/h/items/7").header("X-Cache") == "MISS", "its Location: fetched again")
            #expect(try await rig.get("/h/items?page=2").header("X-Cache") == "HIT", "another URL stays")
            #expect(origin.requests(path: "/h/items").count == 4, "GET, GET ?page=2, POST, GET")
            #expect(try await rig.get("/h/fail").header("X-Cache") == "HIT", "an error reply invalidates nothing")
        }
    }

    @Test("request directives and what is never stored: no-cache, only-if-cached, no-store; no-store, private, Authorization")
    func directivesAndStorability() async throws {
        let clock = ManualClock()
        let origin = try await HTTPTestOrigin.start { request, n in
            switch request.path {
            case "/h/nostore": return .init(headers: [("Cache-Control", "max-age=60, no-store")], body: "\(n)")
            case "/h/private": return .init(headers: [("Cache-Control", "private, max-age=60")], body: "\(n)")
            case "/h/partial": return .init(status: 206, headers: [("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-1/10")], body: "ab")
            default: return .init(headers: [("Cache-Control", "max-age=60")], body: "\(n)")
            }
        }
        try await withRig(origin, clock: clock) { rig in
            let none = try await rig.get("/h/d", headers: [("Cache-Control", "only-if-cached")])
            #expect(none.status == 504)
            _ = try await rig.get("/h/d")
            #expect(try await rig.get("/h/d", headers: [("Cache-Control", "only-if-cached")]).text == "0")
            #expect(try await rig.get("/h/d", headers: [("Cache-Control", "no-cache")]).text == "1", "no-cache: to the origin")
            #expect(try await rig.get("/h/d").text == "1", "and its reply stored")
            clock.advance(by: 10)
            #expect(try await rig.get("/h/d", headers: [("Cache-Control", "max-age=5")]).text == "2", "older than the request's max-age")
            _ = try await rig.get("/h/e", headers: [("Cache-Control", "no-store")])
            #expect(try await rig.get("/h/e").text == "1", "a request's no-store stores nothing")
            for path in ["/h/nostore", "/h/private", "/h/partial"] {
                _ = try await rig.get(path)
                _ = try await rig.get(path)
                #expect(origin.requests(path: path).count == 2, "\(path) is not stored")
            }
            _ = try await rig.get("/h/auth", headers: [("Authorization", "Bearer mine")])
            _ = try await rig.get("/h/auth", headers: [("Authorization", "Bearer mine")])
            #expect(origin.requests(path: "/h/auth").count == 2, "a reply to a request with Authorization is not shared")
        }
    }

    @Test("HEAD is answered from a stored GET, and never fills the entry a GET reads")
    func headFromGet() async throws {
        let clock = ManualClock()
        let origin = try await HTTPTestOrigin.start { request, _ in
            .init(headers: [("Cache-Control", "max-age=60"), ("X-Method", request.method)], body: "payload")
        }
        try await withRig(origin, clock: clock) { rig in
            let head = try await rig.request(.HEAD, "/h/x")
            #expect(head.status == 200 && head.body.readableBytes == 0)
            let get = try await rig.get("/h/x")
            #expect(get.text == "payload" && get.header("X-Method") == "GET", "a HEAD reply is not what a GET gets")
            let second = try await rig.request(.HEAD, "/h/x")
            #expect(second.header("X-Cache") == "HIT" && second.header("X-Method") == "GET" && second.body.readableBytes == 0)
            #expect(origin.requests(path: "/h/x").map(\.method) == ["HEAD", "GET"])
        }
    }

    @Test("Range from a stored 200: one range as 206 with Content-Range, past the end 416, several ranges the whole 200; a 5xx with its own freshness is stored")
    func rangesAndServerErrors() async throws {
        let clock = ManualClock()
        let origin = try await HTTPTestOrigin.start { request, n in
            switch request.path {
            case "/h/error": return .init(status: 503, headers: [("Cache-Control", "max-age=60")], body: "down #\(n)")
            case "/s/flaky": return n == 0 ? .init(headers: [("Cache-Control", "max-age=1")], body: "good") : .init(status: 500, body: "bad")
            default: return .init(headers: [("Cache-Control", "max-age=60"), ("ETag", "\"e1\"")], body: "0123456789")
            }
        }
        try await withRig(origin, clock: clock) { rig in
            _ = try await rig.get("/h/bytes")
            let part = try await rig.get("/h/bytes", headers: [("Range", "bytes=2-4")])
            #expect(part.status == 206 && part.text == "234" && part.header("Content-Range") == "bytes 2-4/10")
            #expect(try await rig.get("/h/bytes", headers: [("Range", "bytes=-3")]).text == "789")
            #expect(try await rig.get("/h/bytes", headers: [("Range", "bytes=7-")]).text == "789")
            let beyond = try await rig.get("/h/bytes", headers: [("Range", "bytes=20-30")])
            #expect(beyond.status == 416 && beyond.header("Content-Range") == "bytes */10")
            #expect(try await rig.get("/h/bytes", headers: [("Range", "bytes=0-1,4-5")]).status == 200)
            #expect(try await rig.get("/h/bytes", headers: [("Range", "bytes=0-1"), ("If-Range", "\"other\"")]).status == 200)
            #expect(origin.requests(path: "/h/bytes").count == 1, "all from the stored reply")

            #expect(try await rig.get("/h/error").status == 503)
            let again = try await rig.get("/h/error")
            #expect(again.status == 503 && again.text == "down #0" && again.header("X-Cache") == "HIT", "stored: it said max-age=60")

            _ = try await rig.get("/s/flaky")
            clock.advance(by: 5)
            let stale = try await rig.get("/s/flaky")
            #expect(stale.status == 200 && stale.text == "good" && stale.header("X-Cache") == "STALE",
                    "a 500 without freshness is a failure: stale_if_error answers")
        }
    }

    @Test("cache: { mode: http } at the top level caches what no endpoint matches by the same rules")
    func topLevelMode() async throws {
        let origin = try await HTTPTestOrigin.start { request, n in
            .init(headers: [("Cache-Control", request.path == "/free/kept" ? "max-age=60" : "no-store")], body: "\(request.path)#\(n)")
        }
        try await ConciergeTestRig.with(origin: origin, endpoints: "", extra: "cache: { mode: http }\n", asEnvironment: true) { rig in
            _ = try await rig.get("/free/kept")
            let again = try await rig.get("/free/kept")
            #expect(again.header("X-Cache") == "HIT" && again.text.hasSuffix("#0"))
            _ = try await rig.get("/free/not")
            #expect(try await rig.get("/free/not").header("X-Cache") == "MISS")
            #expect(origin.requests(path: "/free/kept").count == 1 && origin.requests(path: "/free/not").count == 2)
        }
    }

    @Test("an envelope endpoint in mode http: a logical success stored with the reply's freshness (not the ttl), a business error never")
    func envelopeRuleStillApplies() async throws {
        let clock = ManualClock()
        let origin = try await HTTPTestOrigin.start { request, n in
            request.path == "/e/error"
                ? .init(headers: [("Cache-Control", "max-age=60")], body: #"{"code":1002,"msg":"no"}"#)
                : .init(headers: [("Cache-Control", "max-age=5")], body: #"{"code":200,"msg":"ok","data":{"n":\#(n)}}"#)
        }
        let endpoints = "- { name: enveloped, match: /e/**, upstream: origin, cache: { mode: http, ttl: 1h } }"
        try await ConciergeTestRig.with(origin: origin, endpoints: endpoints, clock: clock) { rig in
            _ = try await rig.get("/e/ok")
            #expect(try await rig.get("/e/ok").header("X-Cache") == "HIT")
            clock.advance(by: 10)
            #expect(try await rig.get("/e/ok").header("X-Cache") == "MISS", "5 s from max-age, not the endpoint's hour")
            _ = try await rig.get("/e/error")
            _ = try await rig.get("/e/error")
            #expect(origin.requests(path: "/e/error").count == 2, "a business error is never stored, whatever its headers say")
        }
    }
}
