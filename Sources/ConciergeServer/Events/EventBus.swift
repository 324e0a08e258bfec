import ConciergeCore
import Foundation
import Synchronization

/// One event of the events stream and hooks (`session.login`, `upstream.down`, …).
public struct ConciergeEvent: Sendable {
    public var id: Int
    public var type: String
    public var data: JSONValue
    public var time: Date
}

/// Fans events out to subscribers without ever blocking the publisher: each subscriber has
/// a bounded buffer, and one that falls behind is dropped (its stream ends).
public final class EventBus: Sendable {
    private struct State {
        var nextID = 1
        var nextSubscriber = 0
        var subscribers: [Int: AsyncStream<ConciergeEvent>.Continuation] = [:]
        /// The last ``recentLimit`` events, oldest first (the status page's history).
        var recent: [ConciergeEvent] = []
    }

    /// How many past events ``recentEvents()`` keeps.
    public static let recentLimit = 50

    private let state = Mutex(State())
    public let bufferSize: Int
    /// Called for every event after fan-out (webhooks); must not block.
    private let observers = Mutex<[@Sendable (ConciergeEvent) -> Void]>([])

    public init(bufferSize: Int = 256) {
        self.bufferSize = bufferSize
    }

    public func publish(_ type: String, _ data: JSONValue) {
        let (event, subscribers) = state.withLock { s -> (ConciergeEvent, [(Int, AsyncStream<ConciergeEvent>.Continuation)]) in
            let e = ConciergeEvent(id: s.nextID, type: type, data: data, time: Date())
            s.nextID += 1
            if s.recent.count == Self.recentLimit { s.recent.removeFirst() }
            s.recent.append(e)
            return (e, Array(s.subscribers))
        }
        for (id, continuation) in subscribers {
            if case .dropped = continuation.yield(event) {
                continuation.finish()
                state.withLock { _ = $0.subscribers.removeValue(forKey: id) }
            }
        }
        for observer in observers.withLock({ $0 }) { observer(event) }
    }

    /// A new subscription; the stream ends when the subscriber is dropped or the bus closes.
    public func subscribe() -> AsyncStream<ConciergeEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: ConciergeEvent.self, bufferingPolicy: .bufferingOldest(bufferSize))
        let id = state.withLock { s -> Int in
            s.nextSubscriber += 1
            s.subscribers[s.nextSubscriber] = continuation
            return s.nextSubscriber
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { _ = $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// The last events published (at most ``recentLimit``), oldest first.
    public func recentEvents() -> [ConciergeEvent] {
        state.withLock { $0.recent }
    }

    public func addObserver(_ observer: @escaping @Sendable (ConciergeEvent) -> Void) {
        observers.withLock { $0.append(observer) }
    }

    public var subscriberCount: Int { state.withLock { $0.subscribers.count } }

    public func closeAll() {
        let all = state.withLock { s -> [AsyncStream<ConciergeEvent>.Continuation] in
            defer { s.subscribers.removeAll() }
            return Array(s.subscribers.values)
        }
        for c in all { c.finish() }
    }
}
