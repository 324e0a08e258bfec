import Synchronization

/// The secrets of sessions and instances as they appear (tokens issued, loaded, read from
/// storage), in order: the log scrubber adds what came since it last looked
/// (``SecretScrubber``) instead of reading every session's tokens again, which costs in
/// proportion to the loaded instances (thousands with `per_client`) at every change.
///
/// Bounded: it keeps at least the last ``capacity`` secrets; a reader that fell further
/// behind reads every session's again.
public final class SecretFeed: Sendable {
    public static let capacity = 1 << 14

    private struct State {
        /// The position of `items[0]`.
        var start = 0
        var items: [String] = []
    }

    private let state = Mutex(State())
    private let endPosition = Atomic<Int>(0)

    public init() {}

    /// The position after the last secret: moves whenever one is appended (read without a lock).
    public var end: Int { endPosition.load(ordering: .acquiring) }

    public func append(_ secrets: [String]) {
        guard !secrets.isEmpty else { return }
        state.withLock { s in
            s.items += secrets
            if s.items.count > 2 * Self.capacity {
                let drop = s.items.count - Self.capacity
                s.items.removeFirst(drop)
                s.start += drop
            }
            endPosition.store(s.start + s.items.count, ordering: .releasing)
        }
    }

    /// The secrets appended from `position` on, and the position after them; `nil` when some
    /// of them are no longer kept.
    public func since(_ position: Int) -> (secrets: [String], end: Int)? {
        state.withLock { s in
            guard position >= s.start else { return nil }
            return (Array(s.items[min(position - s.start, s.items.count)...]), s.start + s.items.count)
        }
    }
}
