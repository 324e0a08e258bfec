import ConciergeCore
import Testing

/// The pacing of token requests after failed ones, as pure arithmetic on a clock's seconds.
@Suite("Token request pacing")
struct TokenRequestPacingTests {
    let start = 1_700_000_000.0

    @Test("refused credentials back off 1, 2, 4, 8 … seconds, capped by max_backoff")
    func credentialsBackOffDoubling() {
        var pacing = TokenRequestPacing()
        var now = start
        var pauses: [Int] = []
        for _ in 0..<8 {
            #expect(pacing.retryAfter(at: now) == nil, "a token request may be made once the pause has passed")
            pacing.failed(.credentialsRefused, at: now, maxBackoff: .seconds(60))
            let pause = pacing.retryAfter(at: now) ?? 0
            pauses.append(pause)
            now += Double(pause)
        }
        #expect(pauses == [1, 2, 4, 8, 16, 32, 60, 60])
    }

    @Test("a wrong secret under steady demand costs at most 7 token requests in its first minute")
    func wrongSecretFirstMinute() {
        var pacing = TokenRequestPacing()
        var requests = 0
        // 100 requests a second, each asking for a token request when pacing allows one.
        for tick in 0..<6_000 {
            let now = start + Double(tick) / 100
            guard pacing.retryAfter(at: now) == nil else { continue }
            requests += 1
            pacing.failed(.credentialsRefused, at: now, maxBackoff: .seconds(60))
        }
        #expect(requests <= 7)
        #expect(requests == 6, "at 0, 1, 3, 7, 15 and 31 s")
    }

    @Test("Retry-After is honoured up to max_backoff; other transient failures pause one second")
    func retryAfterAndTransient() {
        var pacing = TokenRequestPacing()
        pacing.failed(.retryAfter(seconds: 7), at: start, maxBackoff: .seconds(60))
        #expect(pacing.retryAfter(at: start) == 7)
        #expect(pacing.retryAfter(at: start + 6.5) == 1)
        #expect(pacing.retryAfter(at: start + 7) == nil)
        pacing.failed(.retryAfter(seconds: 3_600), at: start + 7, maxBackoff: .seconds(60))
        #expect(pacing.retryAfter(at: start + 7) == 60, "capped by max_backoff")
        var transient = TokenRequestPacing()
        transient.failed(.transient, at: start, maxBackoff: .seconds(60))
        #expect(transient.retryAfter(at: start) == 1)
        #expect(transient.retryAfter(at: start + 0.999) == 1)
        #expect(transient.retryAfter(at: start + 1) == nil, "a provider that comes back is used within a second")
        #expect(transient.refusals == 0, "only refused credentials grow the back-off")
    }

    @Test("a success resets the back-off")
    func successResets() {
        var pacing = TokenRequestPacing()
        for i in 0..<4 { pacing.failed(.credentialsRefused, at: start + Double(i) * 100, maxBackoff: .seconds(60)) }
        #expect(pacing.refusals == 4)
        pacing.succeeded()
        #expect(pacing == TokenRequestPacing())
        pacing.failed(.credentialsRefused, at: start + 500, maxBackoff: .seconds(60))
        #expect(pacing.retryAfter(at: start + 500) == 1)
    }
}
