@testable import ConciergeStorage
import Logging
import Testing

@Suite("StorageHealth")
struct StorageHealthTests {
    @Test("unsaved sessions are counted: storage stays degraded until the last one is saved or gone")
    func unsavedSessionsCounted() {
        let health = StorageHealth(logger: Logger(label: "test"))
        #expect(!health.hasUnsavedSession)
        health.sessionSaveFailed(true)
        health.sessionSaveFailed(true)
        #expect(health.hasUnsavedSession)
        health.sessionSaveFailed(false)
        #expect(health.hasUnsavedSession, "one of the two is still unsaved")
        health.sessionSaveFailed(false)
        #expect(!health.hasUnsavedSession)
    }
}
