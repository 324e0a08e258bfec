import Foundation

/// How soon the next token request (a refresh or an app-token fetch) may be made after failed
/// ones, so that a wrong secret or a provider in trouble does not cost one token request per
/// waiting request:
///
/// - Concierge's own credentials refused (`invalid_client`, `unauthorized_client`, an app-token
///   fetch answered with a failure code): a back-off that doubles from 1 s up to `max_backoff`.
/// - The provider's `Retry-After` (`429`, `503`): not before that time (at most `max_backoff`).
/// - Any other transient failure (`5xx`, unreachable, a timeout): at most one a second, so a
///   provider that comes back is used within a second.
///
/// A success resets it. Times are Unix seconds of the daemon's wall clock (``WallClock``), so a
/// test moves past a pause with a ``ManualClock`` instead of sleeping; a fleet shares one value
/// through its session row.
public struct TokenRequestPacing: Sendable, Equatable {
    /// Why a token request failed, as far as pacing cares.
    public enum Failure: Sendable, Equatable {
        case credentialsRefused
        case retryAfter(seconds: Int)
        case transient
    }

    /// No token request before this (Unix seconds); `0` when nothing holds one back.
    public var notBefore: Double
    /// Consecutive refusals of Concierge's own credentials: the back-off's exponent.
    public var refusals: Int

    public init(notBefore: Double = 0, refusals: Int = 0) {
        (self.notBefore, self.refusals) = (notBefore, refusals)
    }

    /// Seconds until a token request may be made, rounded up (at least 1: a `Retry-After`);
    /// `nil` when one may be made now.
    public func retryAfter(at now: Double) -> Int? {
        guard notBefore > now else { return nil }
        return max(1, Int((notBefore - now).rounded(.up)))
    }

    /// Records a failed token request made at `now`.
    public mutating func failed(_ failure: Failure, at now: Double, maxBackoff: Duration) {
        let cap = max(1, Double(maxBackoff.components.seconds) + Double(maxBackoff.components.attoseconds) / 1e18)
        let pause: Double
        switch failure {
        case .credentialsRefused:
            refusals += 1
            pause = min(cap, pow(2, Double(min(refusals - 1, 30))))
        case .retryAfter(let seconds):
            pause = min(cap, Double(max(1, seconds)))
        case .transient:
            pause = 1
        }
        notBefore = max(notBefore, now + pause)
    }

    /// A token request succeeded: nothing holds the next one back.
    public mutating func succeeded() {
        self = TokenRequestPacing()
    }
}
