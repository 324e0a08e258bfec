import ConciergeStorage
import NIOCore
import Testing

@testable import ConciergeServer

/// A hit's encoded head is the proxy's, kept by the storage as an opaque attachment: the
/// proxy makes it at an entry's first hot-tier lookup and attaches it (``CachedReply/withEncodedHead(_:in:)``).
@Suite("Encoded heads kept as hot-tier attachments")
struct EncodedHeadAttachmentTests {
    static func plan(_ fixture: StageFixture) -> RequestPlan {
        fixture.pipeline.plan(IncomingRequest(method: "GET", target: "/items?a=1", headers: ["Host": "127.0.0.1"]), encoded: true)
    }

    @Test("the first encoded hit attaches the head to the tier's entry; the next hits write those bytes")
    func attachedAtFirstHit() async throws {
        let fixture = try StageFixture(encodedHits: true) { FastPathMemoTests.items($0) }
        _ = await fixture.get("/items?a=1")
        guard case .encodedHit(let first, let recipe?) = Self.plan(fixture) else {
            Issue.record("no encoded hit")
            await fixture.finish()
            return
        }
        let kept = fixture.cache.hotLookup(recipe.key, now: fixture.cache.clock.now)?.attachment
        #expect(kept.map { EncodedHead($0).bytes } == first.head, "the tier keeps the head the hit wrote")
        guard case .encodedHit(let second, _) = Self.plan(fixture) else { Issue.record("no second hit"); await fixture.finish(); return }
        #expect(second.head == first.head)
        #expect(fixture.transport.calls(to: "/items") == 1)
        await fixture.finish()
    }

    @Test("a store that keeps no attachments gets none: its hits are ordinary replies")
    func noAttachments() async throws {
        let fixture = try StageFixture(encodedHits: false) { FastPathMemoTests.items($0) }
        _ = await fixture.get("/items?a=1")
        guard case .answer(let answer) = Self.plan(fixture) else {
            Issue.record("not an ordinary answer")
            await fixture.finish()
            return
        }
        #expect(answer.report.cache == .hit)
        #expect(fixture.cache.hot.count == 1)
        await fixture.finish()
    }
}
