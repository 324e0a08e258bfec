import ConciergeCore
import ConciergeTestSupport
import Foundation
import NIOCore
import NIOPosix
import Testing

/// The proxy listener and forwarding (receive, route, common params, forward, envelope): real sample API, real
/// daemon, real sockets on ports chosen at run time.
@Suite("Forwarding")
struct ForwardingTests {
    @Test("a request is forwarded with common headers and params, Via and X-Forwarded-For visible upstream")
    func forwardsWithCommonHeadersAndParams() async throws {
        try await ConciergeTestRig.with { rig in
        let reply = try await rig.get("/api/echo?x=1")
        #expect(reply.status == 200)
        let seen = try #require(rig.api.state.lastRequest("/api/echo"))
        #expect(seen.queryValue("x") == "1")
        #expect(seen.queryValue("platform") == "linux")
        #expect(seen.queryValue("app_version") == "1.4.0")
        #expect(seen.headers["x-requested-with"] == "concierge-test")
        #expect(seen.headers["via"] == "1.1 concierge")
        #expect(seen.headers["x-forwarded-for"] == "127.0.0.1")
        }
    }

    @Test("common params go into a POST form body, and a value the client sent wins")
    func commonParamsInFormBody() async throws {
        try await ConciergeTestRig.with { rig in
        let reply = try await rig.post("/api/echo", form: "a=1&platform=mine")
        #expect(reply.status == 200)
        let body = try #require(rig.api.state.lastRequest("/api/echo")?.body)
        let params = Set(body.split(separator: "&").map(String.init))
        #expect(params == ["a=1", "platform=mine", "app_version=1.4.0"])
        }
    }

    @Test("common params go into a JSON body as top-level fields")
    func commonParamsInJSONBody() async throws {
        try await ConciergeTestRig.with { rig in
        _ = try await rig.postJSON("/api/echo", ["a": 1, "nested": ["x": true]])
        let body = try #require(rig.api.state.lastRequest("/api/echo")?.body)
        let json = try #require(JSONValue.parse(body))
        #expect(json[path: "a"] == .int(1))
        #expect(json[path: "nested.x"] == .bool(true))
        #expect(json[path: "platform"] == .string("linux"))
        }
    }

    @Test("an upstream slower than the endpoint timeout gives 504 with the unavailable body")
    func timeoutIs504() async throws {
        try await ConciergeTestRig.with { rig in
        let started = ContinuousClock.now
        let reply = try await rig.get("/api/slow?ms=5000")
        #expect(reply.status == 504)
        #expect(reply.json?[path: "code"] == .int(-1))
        // The 504 is the proof: an upstream reply (after 5 s) would have been a 200. The bound
        // only keeps a hang from passing.
        #expect(ContinuousClock.now - started < .seconds(30))
        }
    }

    @Test("an unreachable upstream gives 502 with the unavailable body")
    func upstreamDownIs502() async throws {
        try await ConciergeTestRig.with(endpoints: """
            - name: gone
              match: GET /api/items
              upstream: down
            """) { rig in
        let reply = try await rig.get("/api/items")
        #expect(reply.status == 502)
        #expect(reply.json == ["code": -1, "msg": "service temporarily unavailable"])
        }
    }

    @Test("an upstream 5xx on a JSON endpoint gives 502 with the unavailable body; non-JSON gives it too")
    func upstreamErrorsAreUnavailable() async throws {
        try await ConciergeTestRig.with { rig in
        let fail = try await rig.get("/api/fail?status=500")
        #expect(fail.status == 502)
        #expect(fail.code == -1)
        let text = try await rig.get("/api/nonjson")
        #expect(text.status == 502)
        #expect(text.code == -1)
        let empty = try await rig.get("/api/empty")
        #expect(empty.status == 502)
        }
    }

    @Test("a logical failure is passed through as is")
    func logicalFailurePassedThrough() async throws {
        try await ConciergeTestRig.with { rig in
        let reply = try await rig.get("/api/business-error")
        #expect(reply.status == 200)
        #expect(reply.code == 1002)
        }
    }

    @Test("CONCIERGE answers CONNECT with 405, a foreign absolute-form target with 400, big headers with 431, big bodies with 413")
    func requestLimits() async throws {
        try await ConciergeTestRig.with { rig in
        let connect = try await RawHTTP.send("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", port: rig.proxyPort)
        #expect(connect.hasPrefix("HTTP/1.1 405"))
        let foreign = try await RawHTTP.send("GET http://example.com/api/items HTTP/1.1\r\nHost: example.com\r\n\r\n", port: rig.proxyPort)
        #expect(foreign.hasPrefix("HTTP/1.1 400"))
        let own = try await RawHTTP.send("GET http://127.0.0.1:\(rig.api.port)/api/items HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", port: rig.proxyPort)
        #expect(own.hasPrefix("HTTP/1.1 200"))
        let big = String(repeating: "a", count: 17 * 1024)
        let headers = try await rig.get("/api/items", headers: [("X-Big", big)])
        #expect(headers.status == 431)
        let huge = String(repeating: "b", count: 100 * 1024)
        let overflow = try await RawHTTP.send("GET /api/items HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Huge: \(huge)\r\n\r\n", port: rig.proxyPort)
        #expect(overflow.hasPrefix("HTTP/1.1 431"))
        let declared = try await RawHTTP.send("POST /api/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nContent-Length: \(8 * 1024 * 1024 + 1)\r\n\r\n", port: rig.proxyPort)
        #expect(declared.hasPrefix("HTTP/1.1 413"))
        let chunk = String(repeating: "c", count: 1024 * 1024)
        let chunked = "POST /api/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
            + String(repeating: "100000\r\n\(chunk)\r\n", count: 9) + "0\r\n\r\n"
        let streamedTooLarge = try await RawHTTP.send(chunked, port: rig.proxyPort)
        #expect(streamedTooLarge.hasPrefix("HTTP/1.1 413"))
        }
    }

    @Test("a cached endpoint without an envelope never stores a 206: a later request without Range gets the whole body")
    func partialRepliesAreNotStored() async throws {
        let endpoints = "- name: files\n  match: GET /api/download/**\n  envelope: false\n  cache: { ttl: 60s }"
        try await ConciergeTestRig.with(endpoints: endpoints) { rig in
            let part = try await rig.get("/api/download/file.bin?size=1000", headers: [("Range", "bytes=0-4")])
            #expect(part.status == 206 && part.body.readableBytes == 5)
            let whole = try await rig.get("/api/download/file.bin?size=1000")
            #expect(whole.status == 200 && whole.body.readableBytes == 1000)
            #expect(whole.header("X-Cache") == "MISS")
            // The whole reply is stored, and a later one is served from it.
            let again = try await rig.get("/api/download/file.bin?size=1000")
            #expect(again.status == 200 && again.body.readableBytes == 1000 && again.header("X-Cache") == "HIT")
            #expect(rig.api.state.calls("/api/download/file.bin") == 2)
        }
    }

    @Test("a streamed download passes Range through; an upload is streamed and arrives whole")
    func streamedTransfers() async throws {
        try await ConciergeTestRig.with { rig in
        let range = try await rig.get("/api/download/file.bin?size=100000", headers: [("Range", "bytes=10-19")])
        #expect(range.status == 206)
        #expect(Array(range.body.readableBytesView) == (10..<20).map { UInt8($0 % 251) })
        let whole = try await rig.get("/api/download/file.bin?size=3000000")
        #expect(whole.body.readableBytes == 3_000_000)
        let payload = String(repeating: "z", count: 9 * 1024 * 1024)
        let upload = try await rig.request(.POST, "/api/upload", headers: [("Content-Type", "application/octet-stream")], body: payload)
        #expect(upload.status == 200)
        #expect(upload.json?[path: "data.size"] == .int(Int64(payload.utf8.count)))
        }
    }

    @Test("the environment override switches the upstream")
    func environmentFromConfig() async throws {
        try await ConciergeTestRig.with(endpoints: "- name: items\n  match: GET /api/items") { rig in
        #expect(try await rig.get("/api/items").status == 200)
        let switched = try await rig.admin(.PUT, "/environment", json: ["environment": "down"])
        #expect(switched.status == 200)
        #expect(try await rig.get("/api/items").status == 502)
        }
    }
}

/// Sends raw bytes over a fresh TCP connection and returns what came back (up to 64 KB, 5 s).
enum RawHTTP {
    /// Sends raw bytes and returns the first chunk the server answers ("" when it closes or
    /// stays silent for 5 s), through ``RawSocket`` so no concurrency thread blocks.
    static func send(_ text: String, port: Int) async throws -> String {
        let socket = try RawSocket(port: port, timeout: .seconds(5))
        socket.send(text)
        return await socket.receive { !$0.isEmpty }
    }
}

@Suite("Proxy listener limits")
struct ListenerLimitTests {
    @Test("a client that does not finish its request head within header_timeout gets 408 and is disconnected")
    func headerTimeout() async throws {
        try await ConciergeTestRig.with(extra: "limits: { header_timeout: 1s }\n") { rig in
            let started = ContinuousClock.now
            let reply = try await RawHTTP.send("GET /api/items HTTP/1.1\r\nHost: 127.0.0.1\r\n", port: rig.proxyPort)
            #expect(reply.hasPrefix("HTTP/1.1 408"))
            let elapsed = ContinuousClock.now - started
            #expect(elapsed >= .milliseconds(900))
            // The 408 is the proof; the bound only keeps a hang from passing (a starved test
            // process can wait seconds on a 2-core machine running the whole suite).
            #expect(elapsed < .seconds(30))
        }
    }
}
