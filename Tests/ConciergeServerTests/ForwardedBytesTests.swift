import ConciergeTestSupport
import Foundation
import Testing

/// The query and the body reach the upstream as the client sent them: Concierge's own
/// additions (common params, token) are inserted, nothing else is decoded or re-written.
/// Raw sockets on both sides show the exact bytes.
@Suite("Forwarded bytes")
struct ForwardedBytesTests {
    static let reply = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"code\":200}\n"

    /// A rig with a cached endpoint `/gbk` on a ``RecordingUpstream``; the test configuration's
    /// common params are `platform=linux` and `app_version=1.4.0`.
    static func withRig(_ body: (ConciergeTestRig, RecordingUpstream) async throws -> Void) async throws {
        let endpoints = TestConfig.defaultEndpoints + """

            - { name: gbk, match: "GET,POST /gbk", upstream: rec, cache: { ttl: 60s } }
            """
        try await HostileInputTests.withRecordingRig(reply: reply,
                                                    endpointsOverride: endpoints, body)
    }

    static func send(_ rig: ConciergeTestRig, _ head: String, body: String = "") async throws -> String {
        let length = body.isEmpty ? "" : "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n"
        return try await RawSocket.exchange("\(head) HTTP/1.1\r\nHost: 127.0.0.1\r\n\(length)Connection: close\r\n\r\n\(body)", port: rig.proxyPort)
    }

    /// How many requests starting with `requestLine` the upstream received (a body without a
    /// final line break runs into the next request line, so occurrences, not lines).
    static func heads(_ upstream: RecordingUpstream, _ requestLine: String) -> Int {
        upstream.received.components(separatedBy: requestLine).count - 1
    }

    @Test("GBK and %FF query bytes arrive byte for byte, with the common params after them, and keep separate entries")
    func nonUTF8QueryBytesArriveUnchanged() async throws {
        try await Self.withRig { rig, upstream in
            let chinese = try await Self.send(rig, "GET /gbk?q=%D6%D0%CE%C4&x=%ff")
            #expect(chinese.hasPrefix("HTTP/1.1 200 OK"), "\(chinese.prefix(200))")
            #expect(upstream.received.contains("GET /gbk?q=%D6%D0%CE%C4&x=%ff&platform=linux&app_version=1.4.0 HTTP/1.1\r\n"), "\(upstream.received)")
            // Another GBK word (英文), and %FE instead of %FF: their own entries, their own bytes.
            _ = try await Self.send(rig, "GET /gbk?q=%D3%A2%CE%C4&x=%ff")
            _ = try await Self.send(rig, "GET /gbk?q=%D6%D0%CE%C4&x=%FE")
            #expect(upstream.received.contains("GET /gbk?q=%D3%A2%CE%C4&x=%ff&platform=linux&app_version=1.4.0 HTTP/1.1\r\n"))
            #expect(upstream.received.contains("GET /gbk?q=%D6%D0%CE%C4&x=%FE&platform=linux&app_version=1.4.0 HTTP/1.1\r\n"))
            #expect(!upstream.received.contains("%EF%BF%BD"))
            #expect(Self.heads(upstream, "GET /gbk?") == 3)
            // The first again, with the escape's hex in upper case: the same entry, a hit.
            let again = try await Self.send(rig, "GET /gbk?q=%d6%d0%ce%c4&x=%FF")
            #expect(again.contains("X-Cache: HIT"), "\(again.prefix(400))")
            #expect(Self.heads(upstream, "GET /gbk?") == 3)
        }
    }

    @Test("a JSON body with a 20-digit integer, a long decimal, escapes and a duplicate key arrives unchanged but for the added param")
    func jsonLiteralsArriveUnchanged() async throws {
        try await Self.withRig { rig, upstream in
            let body = #"{ "id": 12345678901234567891, "price": 123456789012345678.12, "name": "\u4e2d\u6587", "id": 1 }"#
            let reply = try await Self.send(rig, "POST /gbk", body: body)
            #expect(reply.hasPrefix("HTTP/1.1 200 OK"), "\(reply.prefix(200))")
            let sent = #"{ "id": 12345678901234567891, "price": 123456789012345678.12, "name": "\u4e2d\u6587", "id": 1,"platform":"linux","app_version":"1.4.0" }"#
            #expect(await eventually { upstream.received.hasSuffix("\r\n\r\n" + sent) }, "\(upstream.received)")
            #expect(upstream.received.contains("\r\nContent-Length: \(sent.utf8.count)\r\n") || upstream.received.contains("\r\ncontent-length: \(sent.utf8.count)\r\n"))
            // One digit apart beyond a Double's precision: another entry, not a hit.
            _ = try await Self.send(rig, "POST /gbk", body: body.replacingOccurrences(of: "12345678901234567891", with: "12345678901234567892"))
            #expect(Self.heads(upstream, "POST /gbk ") == 2)
            _ = try await Self.send(rig, "POST /gbk", body: body)
            #expect(Self.heads(upstream, "POST /gbk ") == 2, "the first body again is a hit")
        }
    }

    @Test("a body that says JSON but is not an object is forwarded untouched; the common params go to the query")
    func nonObjectJSONBodyIsUntouched() async throws {
        try await Self.withRig { rig, upstream in
            let body = "\u{FEFF}[1, 2.50]"
            _ = try await Self.send(rig, "POST /gbk?a=%2b", body: body)
            #expect(upstream.received.contains("POST /gbk?a=%2b&platform=linux&app_version=1.4.0 HTTP/1.1\r\n"), "\(upstream.received)")
            #expect(await eventually { upstream.received.hasSuffix("\r\n\r\n" + body) })
        }
    }
}

extension ForwardedBytesTests {
    @Test("raw bytes that are not UTF-8 in a request target are a 400, never forwarded altered")
    func rawNonUTF8TargetIsRefused() async throws {
        try await Self.withRig { rig, upstream in
            let socket = try RawSocket(port: rig.proxyPort)
            socket.send(Array("GET /gbk?q=".utf8) + [0xD6, 0xD0] + Array(" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8))
            let reply = await socket.receive()
            #expect(reply.hasPrefix("HTTP/1.1 400 "), "\(reply.prefix(200))")
            #expect(Self.heads(upstream, "GET /gbk?") == 0)
        }
    }
}
