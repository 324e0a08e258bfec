import ConciergeCore
import NIOCore
import NIOHTTP1
import Testing

@testable import ConciergeServer

/// Streamed exchanges (non-JSON, uncached endpoints) in process: the scripted transport
/// streams a reply through ``UpstreamBody`` as the network does.
@Suite("Streamed exchanges over a scripted upstream")
struct StreamedExchangeTests {
    static func collect(_ answer: ProxyAnswer) async throws -> String {
        guard case .upstream(let body) = answer.reply.body else {
            Issue.record("not a streamed reply")
            return ""
        }
        var text = ""
        for try await chunk in body { text += String(buffer: chunk) }
        return text
    }

    static func fixture(_ reply: @escaping ScriptedTransport.StreamScript) throws -> StageFixture {
        try StageFixture(streaming: reply) { _ throws(UpstreamFailure) in throw .unreachable("buffered exchanges are not scripted here") }
    }

    @Test("a streamed reply's chunks reach the client in order, with end-to-end fields only")
    func chunksInOrder() async throws {
        let fixture = try Self.fixture { _ throws(UpstreamFailure) in
            StreamedUpstreamReply(status: 200, headers: ["Content-Type": "application/octet-stream", "Connection": "x-hop", "X-Hop": "1",
                                                         "Server": "origin", "X-Kept": "yes"],
                                  body: .chunks(["part-1;", "part-2;", "part-3"].map { ByteBuffer(string: $0) }))
        }
        let answer = await fixture.get("/download")
        #expect(answer.reply.status == 200)
        #expect(answer.reply.headers.first(name: "X-Kept") == "yes")
        #expect(!answer.reply.headers.contains(name: "X-Hop"))
        #expect(!answer.reply.headers.contains(name: "Connection"))
        #expect(!answer.reply.headers.contains(name: "Server"))
        #expect(try await Self.collect(answer) == "part-1;part-2;part-3")
        #expect(answer.report.succeeded)
        #expect(fixture.transport.calls(to: "/download") == 1)
        await fixture.finish()
    }

    @Test("an upstream that breaks off mid-body makes the body throw, so the listener cuts the client's reply")
    func brokenBody() async throws {
        let fixture = try Self.fixture { _ throws(UpstreamFailure) in
            StreamedUpstreamReply(status: 200, headers: ["Content-Length": "100"],
                                  body: .chunks([ByteBuffer(string: "first")], thenFailing: .unreachable("connection reset")))
        }
        let answer = await fixture.get("/download")
        #expect(answer.reply.status == 200)
        await #expect(throws: UpstreamFailure.self) { try await Self.collect(answer) }
        await fixture.finish()
    }

    @Test("an upstream that times out before its head is 504 with the unavailable body; a refused one 502")
    func failuresBeforeTheHead() async throws {
        for (failure, status) in [(UpstreamFailure.timeout, 504), (.unreachable("refused"), 502)] {
            let fixture = try Self.fixture { _ throws(UpstreamFailure) in throw failure }
            let answer = await fixture.get("/download")
            #expect(answer.reply.status == status)
            #expect(answer.json?[path: "code"] != nil, "the unavailable body")
            #expect(!answer.report.succeeded)
            await fixture.finish()
        }
    }

    @Test("a 204 or 304 streamed reply carries no Content-Length the upstream did not send")
    func noContent() async throws {
        for status in [204, 304] {
            let fixture = try Self.fixture { _ throws(UpstreamFailure) in
                StreamedUpstreamReply(status: status, headers: ["ETag": "\"v1\""], body: .chunks([]))
            }
            let answer = await fixture.get("/download")
            #expect(answer.reply.status == status)
            #expect(!answer.reply.headers.contains(name: "Content-Length"))
            #expect(try await Self.collect(answer) == "")
            await fixture.finish()
        }
    }
}
