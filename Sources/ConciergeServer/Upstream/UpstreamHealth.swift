import Synchronization

/// Which upstreams are failing right now; a change publishes `upstream.down` or `upstream.up`.
final class UpstreamHealth: Sendable {
    private let down = Mutex<Set<String>>([])
    private let events: EventBus

    init(events: EventBus) {
        self.events = events
    }

    func mark(_ upstream: String, down isDown: Bool) {
        let changed = down.withLock { set -> Bool in
            isDown ? set.insert(upstream).inserted : (set.remove(upstream) != nil)
        }
        if changed { events.publish(isDown ? "upstream.down" : "upstream.up", ["upstream": .string(upstream)]) }
    }
}
