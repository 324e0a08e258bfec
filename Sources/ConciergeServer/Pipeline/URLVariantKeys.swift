import ConciergeCore
import Synchronization

/// The keys stored since start that extend a URL's key (a `Vary` variant's ` vary=…`, the
/// ` headers=…` of `cache.key_headers`), by that URL's key
/// (``UnkeyedRequestFields/urlKey(of:)``), for `mode: http`.
///
/// An unsafe request's invalidation finds a URL's rows in SQLite through the key index
/// (``CacheStore/invalidate(urlKeys:hotKeys:)``); these are the keys it removes from the hot
/// tier besides, which matter only for entries the hot tier holds alone (stored while storage
/// refused writes). Bounded: past ``limit`` keys it starts over, as ``VaryIndex`` does.
final class URLVariantKeys: Sendable {
    private struct State {
        var byURL: [String: Set<String>] = [:]
        var count = 0
    }

    private let state = Mutex(State())
    static let limit = 200_000

    /// Remembers a stored key when it extends its URL's key.
    func stored(_ key: String) {
        let url = UnkeyedRequestFields.urlKey(of: key)
        guard url.endIndex != key.endIndex else { return }
        state.withLock { s in
            if s.count >= Self.limit { s = State() }
            if s.byURL[String(url), default: []].insert(key).inserted { s.count += 1 }
        }
    }

    /// The keys remembered under these URL keys, forgotten now (their entries are invalidated).
    func take(_ urlKeys: [String]) -> [String] {
        state.withLock { s in
            var keys: [String] = []
            for url in urlKeys {
                guard let set = s.byURL.removeValue(forKey: url) else { continue }
                s.count -= set.count
                keys += set
            }
            return keys
        }
    }
}
