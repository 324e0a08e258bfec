import Foundation
import Yams

/// `listen.proxy` as one address or a list of listeners, and `session.clients`
/// (docs/local-access.md).
extension ConfigLoader {
    /// A listener's `session`, checked against the configured sessions once they are read.
    struct ListenerSessionReference {
        var path: String
        var node: Node
        var name: String
    }

    /// The longest `unix:` path: `sun_path` holds 107 bytes, and the socket is first bound in a
    /// private directory beside it (8 more bytes, ``UnixSocketFile``).
    public static let maxUnixSocketPathBytes = 98

    /// `listen.proxy`: `host:port`, `unix:/path`, a `{ address, mode, group, session }` map,
    /// or a list of these.
    static func proxyListeners(_ node: Node, _ r: YAMLReader, sessions: inout [ListenerSessionReference]) -> [ConciergeConfig.ProxyListener]? {
        guard case .sequence = node else {
            return proxyListener(node, "listen.proxy", r, sessions: &sessions).map { [$0] }
        }
        guard let items = r.sequence(node, "listen.proxy") else { return nil }
        guard !items.isEmpty else {
            r.fail("listen.proxy", node, "the list names no address")
            return nil
        }
        var listeners: [ConciergeConfig.ProxyListener] = []
        var seen: [SocketAddressSpec: Int] = [:]
        for (i, item) in items.enumerated() {
            let path = "listen.proxy[\(i)]"
            guard let listener = proxyListener(item, path, r, sessions: &sessions) else { continue }
            if let first = seen[listener.address] {
                r.fail(path, item, "'\(listener.address)' is listed twice (also listen.proxy[\(first)])")
                continue
            }
            seen[listener.address] = i
            listeners.append(listener)
        }
        return listeners.isEmpty ? nil : listeners
    }

    /// One listener: an address string or a map.
    static func proxyListener(_ node: Node, _ path: String, _ r: YAMLReader,
                              sessions: inout [ListenerSessionReference]) -> ConciergeConfig.ProxyListener? {
        guard case .mapping = node else {
            guard let text = r.string(node, path), let address = listenerAddress(text, node, path, r) else { return nil }
            return ConciergeConfig.ProxyListener(address: address)
        }
        guard let m = r.mapping(node, path, allowed: ["address", "mode", "group", "session"], schemaPath: "listen.proxy[]") else { return nil }
        guard let addressNode = m["address"] else {
            r.fail("\(path).address", node, "missing: host:port or unix:/path")
            return nil
        }
        guard let text = r.string(addressNode, "\(path).address"),
              let address = listenerAddress(text, addressNode, "\(path).address", r) else { return nil }
        var listener = ConciergeConfig.ProxyListener(address: address)
        let isUnix = if case .unix = address { true } else { false }
        for key in ["mode", "group"] where !isUnix && m[key] != nil {
            r.fail("\(path).\(key)", m[key], "applies to unix: sockets only (the address is \(address))")
        }
        if isUnix, let n = m["mode"], let text = r.string(n, "\(path).mode") {
            if let mode = socketMode(text) { listener.mode = mode } else {
                r.fail("\(path).mode", n, "expected an octal mode such as \"0660\", found '\(text)'")
            }
        }
        if isUnix, let n = m["group"], let text = r.nonEmptyString(n, "\(path).group") {
            if let gid = groupID(text) { listener.group = gid } else { r.fail("\(path).group", n, "unknown group '\(text)'") }
        }
        if let n = m["session"], let name = r.nonEmptyString(n, "\(path).session") {
            listener.session = name
            sessions.append(ListenerSessionReference(path: "\(path).session", node: n, name: name))
        }
        return listener
    }

    /// `host:port` or `unix:/absolute/path` (at most ``maxUnixSocketPathBytes``).
    static func listenerAddress(_ text: String, _ node: Node, _ path: String, _ r: YAMLReader) -> SocketAddressSpec? {
        guard let address = SocketAddressSpec.parse(text) else {
            r.fail(path, node, "expected host:port or unix:/path, found '\(text)'")
            return nil
        }
        if case .unix(let file) = address {
            guard file.hasPrefix("/") else {
                r.fail(path, node, "expected an absolute path after unix:, found '\(file)'")
                return nil
            }
            guard file.utf8.count <= maxUnixSocketPathBytes else {
                r.fail(path, node, "the socket path is \(file.utf8.count) bytes, at most \(maxUnixSocketPathBytes)")
                return nil
            }
        }
        return address
    }

    /// Checks each listener's `session` against the configured sessions.
    static func checkListenerSessions(_ references: [ListenerSessionReference], known: Set<String>, _ r: YAMLReader) {
        for reference in references where !known.contains(reference.name) {
            r.fail(reference.path, reference.node,
                   "unknown session '\(reference.name)' (configured: \(known.sorted().joined(separator: ", ")))")
        }
    }

    /// `"0660"`, `"660"` or `"0600"`: permission bits in octal.
    static func socketMode(_ text: String) -> UInt32? {
        let digits = text.count == 4 && text.hasPrefix("0") ? String(text.dropFirst()) : text
        guard digits.count == 3, let mode = UInt32(digits, radix: 8) else { return nil }
        return mode
    }

    /// `session.clients`: the users and groups that may use the session; names are resolved
    /// now (an unknown one is an error), numbers taken as they are.
    static func sessionClients(_ node: Node, _ path: String, _ r: YAMLReader, schemaPath: String? = nil) -> SessionClients? {
        guard let m = r.mapping(node, path, allowed: ["uids", "gids"], schemaPath: schemaPath) else { return nil }
        var clients = SessionClients()
        if let n = m["uids"] {
            clients.uids = identities(n, "\(path).uids", r, kind: "user", resolve: userID)
        }
        if let n = m["gids"] {
            clients.gids = identities(n, "\(path).gids", r, kind: "group", resolve: groupID)
        }
        if m["uids"] == nil, m["gids"] == nil {
            r.fail(path, node, "lists neither uids nor gids: no one could use the session (leave clients out to let anyone)")
        }
        return clients
    }

    private static func identities(_ node: Node, _ path: String, _ r: YAMLReader, kind: String,
                                   resolve: (String) -> UInt32?) -> [UInt32] {
        guard let items = r.sequence(node, path) else { return [] }
        var ids: [UInt32] = []
        for (i, item) in items.enumerated() {
            guard let text = r.nonEmptyString(item, "\(path)[\(i)]") else { continue }
            if let id = resolve(text) { ids.append(id) } else { r.fail("\(path)[\(i)]", item, "unknown \(kind) '\(text)'") }
        }
        return ids
    }

    /// A user name (the system's user database) or a number.
    static func userID(_ text: String) -> UInt32? {
        if let number = UInt32(text), number != UInt32.max { return number }
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16384)
        guard getpwnam_r(text, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.pw_uid
    }

    /// A group name (the system's group database) or a number.
    static func groupID(_ text: String) -> UInt32? {
        if let number = UInt32(text), number != UInt32.max { return number }
        var entry = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 65536)
        guard getgrnam_r(text, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.gr_gid
    }
}
