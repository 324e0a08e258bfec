@testable import ConciergeServer
import Synchronization
import Testing

/// ``SecretScrubber`` with a ``SecretFeed``: new secrets are masked from the line after they
/// are announced, without reading every session's secrets again; only a feed that dropped
/// unread secrets, or an index grown far past its last whole reading, makes it read them all.
@Suite("Secret scrubber")
struct SecretScrubberTests {
    final class Secrets: Sendable {
        let held = Mutex<[String]>([])
        let reads = Atomic(0)
        func all() -> [String] {
            reads.add(1, ordering: .relaxed)
            return held.withLock { $0 }
        }
        func issue(_ secret: String, to feed: SecretFeed) {
            held.withLock { $0.append(secret) }
            feed.append([secret])
        }
    }

    @Test("a secret announced by the feed is masked at once; the sessions are read whole only at the start and after the feed dropped unread secrets")
    func feedAddsSecrets() {
        let feed = SecretFeed()
        let secrets = Secrets()
        let scrubber = SecretScrubber()
        scrubber.addSource { ["config-secret-value"] }
        scrubber.addSource(feed: feed) { secrets.all() }
        secrets.issue("token-number-0000", to: feed)
        #expect(scrubber.scrub("a token-number-0000 and config-secret-value") == "a *** and ***")
        #expect(secrets.reads.load(ordering: .relaxed) == 1)
        for n in 1..<20 {
            let token = "token-number-\(1000 + n)"
            secrets.issue(token, to: feed)
            #expect(scrubber.scrub("line \(token) token-number-0000") == "line *** ***")
        }
        #expect(secrets.reads.load(ordering: .relaxed) == 1, "every new token came through the feed")
        // More than the feed keeps, between two lines: the scrubber reads every secret again.
        for n in 0..<(3 * SecretFeed.capacity) { secrets.issue("bulk-token-\(n)", to: feed) }
        #expect(scrubber.scrub("x bulk-token-7 y token-number-1019") == "x *** y ***")
        #expect(secrets.reads.load(ordering: .relaxed) == 2)
    }
}
