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
        /// The listener's limits of `config`, as the connection's state machine takes them.
        let limits: ProxyConnectionStateMachine.Limits
        /// The last routed head; `nil` when nothing was routed under this generation yet.
        var routed: Routed?
    }

    /// A head's method and path, and its route.
    private final class Routed {
        let method: HTTPMethod
        let path: [UInt8]
        let route: PreparedRequest.Route?

        init(method: HTTPMethod, path: [UInt8], route: PreparedRequest.Route?) {
            (self.method, self.path, self.route) = (method, path, route)
        }
    }

    private var last: Last?

    /// The configuration in force, and its limits (converted once per configuration, not
    /// per request).
    mutating func config(_ responder: any ProxyResponder) -> (config: RuntimeConfig, limits: ProxyConnectionStateMachine.Limits) {
        let generation = responder.configGeneration
        if let last, last.generation == generation { return (last.config, last.limits) }
        // Read after the generation: at least as new as it.
        let config = responder.currentConfig
        let limits = ProxyConnectionStateMachine.Limits(config.settings.limits)
        last = Last(generation: generation, config: config, limits: limits, routed: nil)
        return (config, limits)
    }

    /// The route of `target` (see ``ProxyResponder/route(method:target:)``), under the
    /// configuration ``config(_:)`` returned last.
    mutating func route(_ method: HTTPMethod, target: String, _ responder: any ProxyResponder) -> PreparedRequest.Route? {
        var target = target
        let routed = last?.routed
        // The path's bytes (up to `?`) compared in place: no copy of the path per head.
        let (same, path) = target.withUTF8 { bytes -> (Bool, [UInt8]?) in
            let end = bytes.firstIndex(of: UInt8(ascii: "?")) ?? bytes.endIndex
            let path = UnsafeBufferPointer(rebasing: bytes[..<end])
            if let routed, routed.method == method, routed.path.withUnsafeBufferPointer({ $0.elementsEqual(path) }) {
                return (true, nil)
            }
            return (false, Array(path))
        }
        if same, let routed { return routed.route }
        let route = responder.route(method: method.wireName, target: target)
        if var current = last, let path {
            current.routed = Routed(method: method, path: path, route: route)
            last = current
        }
        return route
    }
}
