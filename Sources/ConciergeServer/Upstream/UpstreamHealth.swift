import Synchronization

/// Which upstreams are failing right now; a change publishes `upstream.down` or `upstream.up`.
final class UpstreamHealth: Sendable {
    private let down = Mutex<Set<String>>([])
    /// `down.count`, readable without the lock: every upstream reply marks its upstream up,
    /// and while none is down that is one atomic load (no lock the event loops share).
    private let downCount = Atomic<Int>(0)
    private let events: EventBus

    init(events: EventBus) {
        self.events = events
    }

    /// The upstreams failing now, by name.
    var downUpstreams: [String] {
        down.withLock { $0.sorted() }
    }

    func mark(_ upstream: String, down isDown: Bool) {
        if !isDown, downCount.load(ordering: .acquiring) == 0 { return }
        let changed = down.withLock { set -> Bool in
            let changed = isDown ? set.insert(upstream).inserted : (set.remove(upstream) != nil)
            downCount.store(set.count, ordering: .releasing)
            return changed
        }
        if changed { events.publish(isDown ? "upstream.down" : "upstream.up", ["upstream": .string(upstream)]) }
    }
}
