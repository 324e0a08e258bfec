import ConciergeCore
import NIOHTTP1

/// What one proxy connection read for its last request head: the configuration in force and
/// the route of the method and path, kept while ``ProxyResponder/configGeneration`` stays the
/// same. A kept-alive connection asking for the same path again (with any query) then reads
/// one atomic instead of taking the runtime's lock twice and matching the path against every
/// endpoint. A reload or an environment switch changes the generation, so the next head
/// reads both afresh.
struct ConnectionRouteMemo {
    private struct Last {
        let generation: Int
        let config: RuntimeConfig
        /// The last routed head; `nil` when nothing was routed under this generation yet.
        var routed: Routed?
    }

    /// A head's method and path, and its route.
    private struct Routed {
        let method: HTTPMethod
        let path: String
        let route: PreparedRequest.Route?
    }

    private var last: Last?

    /// The configuration in force.
    mutating func config(_ responder: some ProxyResponder) -> RuntimeConfig {
        let generation = responder.configGeneration
        if let last, last.generation == generation { return last.config }
        // Read after the generation: at least as new as it.
        let config = responder.currentConfig
        last = Last(generation: generation, config: config, routed: nil)
        return config
    }

    /// The route of `target` (see ``ProxyResponder/route(method:target:)``), under the
    /// configuration ``config(_:)`` returned last.
    mutating func route(_ method: HTTPMethod, target: String, _ responder: some ProxyResponder) -> PreparedRequest.Route? {
        let path = target.utf8.firstIndex(of: UInt8(ascii: "?")).map { target[..<$0] } ?? target[...]
        if let routed = last?.routed, routed.method == method, routed.path.utf8.elementsEqual(path.utf8) {
            return routed.route
        }
        let route = responder.route(method: method.wireName, target: target)
        if var current = last {
            current.routed = Routed(method: method, path: String(path), route: route)
            last = current
        }
        return route
    }
}
