import Glibc
import Logging
import NIOCore
import NIOEmbedded
import Synchronization
import Testing

@testable import ConciergeServer

/// The proxy listener at the descriptor limit: accept backs off instead of spinning, and the
/// failure is logged once a minute, not per attempt.
@Suite("Accept failures")
struct AcceptFailureLogTests {
    @Test("EMFILE on accept holds reads for a second, then accepting goes on")
    func backsOff() throws {
        let channel = EmbeddedChannel()
        let reads = EmbeddedProxyConnection.ReadCounter()
        try channel.pipeline.syncOperations.addHandler(reads)
        try channel.pipeline.syncOperations.addHandler(AcceptFailureLog(logger: Logger(label: "test")).backoffHandler())
        channel.pipeline.fireErrorCaught(IOError(errnoCode: EMFILE, reason: "accept"))
        channel.read()
        #expect(reads.passed == 0, "no accept while out of descriptors")
        // NIO's handler schedules by the real clock's deadlines; the embedded loop is moved to them.
        channel.embeddedEventLoop.advanceTime(to: .now() + .milliseconds(500))
        #expect(reads.passed == 0)
        channel.embeddedEventLoop.advanceTime(to: .now() + .seconds(1))
        #expect(reads.passed == 1)
        _ = try? channel.finish()
    }

    @Test("the failure is logged at most once a minute")
    func loggedOncePerMinute() {
        let clock = Mutex(ContinuousClock.now)
        let log = AcceptFailureLog(logger: Logger(label: "test")) { clock.withLock { $0 } }
        let error = IOError(errnoCode: EMFILE, reason: "accept")
        #expect(log.record(error))
        #expect(!log.record(error))
        clock.withLock { $0 += .seconds(59) }
        #expect(!log.record(error))
        clock.withLock { $0 += .seconds(1) }
        #expect(log.record(error))
    }
}
