import Foundation
import Synchronization

/// Wall-clock time as Concierge records it: Unix seconds, the unit of a cache entry's
/// `stored_at` and a session's expiry.
///
/// The pipeline, the cache and the token refresher read time only through one of these, so a
/// test moves time forward with a ``ManualClock`` instead of sleeping past a TTL.
public struct WallClock: Sendable {
    private let read: @Sendable () -> Double

    public init(_ read: @escaping @Sendable () -> Double) {
        self.read = read
    }

    /// The system's clock.
    public static let system = WallClock { Date().timeIntervalSince1970 }

    /// Unix seconds now.
    public var now: Double { read() }

    public var date: Date { Date(timeIntervalSince1970: read()) }
}

/// A clock that moves only when told to: for tests of TTLs, stale windows and expiries.
public final class ManualClock: Sendable {
    private let seconds: Mutex<Double>

    /// Starts at `start` (Unix seconds), the system's time by default.
    public init(start: Double = Date().timeIntervalSince1970) {
        seconds = Mutex(start)
    }

    public var now: Double { seconds.withLock { $0 } }

    public func advance(by interval: Double) {
        seconds.withLock { $0 += interval }
    }

    /// The clock to hand to what is tested.
    public var wallClock: WallClock { WallClock { [self] in self.now } }
}
