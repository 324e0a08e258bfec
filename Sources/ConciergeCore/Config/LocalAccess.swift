/// Who may use a session (docs/local-access.md): proxy listeners on Unix sockets, the peer's
/// identity read from such a socket, and a session's `clients`.

/// The identity of the process at the other end of a Unix-socket connection, as the kernel
/// gave it at connect time (`SO_PEERCRED`), with its supplementary groups.
public struct PeerCredentials: Sendable, Equatable {
    public var uid: UInt32
    public var gid: UInt32
    /// Supplementary groups (the primary `gid` may or may not be among them).
    public var groups: [UInt32]

    public init(uid: UInt32, gid: UInt32, groups: [UInt32] = []) {
        (self.uid, self.gid, self.groups) = (uid, gid, groups)
    }
}

/// `session.clients`: the local users and groups that may use a session.
public struct SessionClients: Sendable, Equatable {
    public var uids: [UInt32]
    public var gids: [UInt32]

    public init(uids: [UInt32] = [], gids: [UInt32] = []) {
        (self.uids, self.gids) = (uids, gids)
    }

    /// Whether a peer may use the session: its uid is listed, or its primary or one of its
    /// supplementary groups is. A peer without an identity (`nil`: a TCP connection) never
    /// is, and neither is uid 0 unless listed.
    public func admits(_ peer: PeerCredentials?) -> Bool {
        guard let peer else { return false }
        if uids.contains(peer.uid) || gids.contains(peer.gid) { return true }
        return peer.groups.contains { gids.contains($0) }
    }
}

extension ConciergeConfig {
    /// One entry of `listen.proxy`: where it binds and, for a Unix socket, the file's mode and
    /// group; the session requests on it use unless their endpoint names one.
    public struct ProxyListener: Sendable, Hashable {
        public var address: SocketAddressSpec
        /// Permission bits of the socket file (`unix:` only).
        public var mode: UInt32
        /// Group of the socket file (`unix:` only); `nil`: the daemon's group.
        public var group: UInt32?
        /// `session`: the session requests on this listener use.
        public var session: String?

        public init(address: SocketAddressSpec, mode: UInt32 = 0o660, group: UInt32? = nil, session: String? = nil) {
            (self.address, self.mode, self.group, self.session) = (address, mode, group, session)
        }

        public var description: String {
            guard case .unix = address else { return address.description + (session.map { " (session \($0))" } ?? "") }
            let group = self.group.map { " group \($0)" } ?? ""
            return "\(address) mode 0\(String(mode, radix: 8))\(group)" + (session.map { " (session \($0))" } ?? "")
        }
    }

    /// The names of the configured sessions: what `listen.proxy[].session` may name.
    public var sessionNames: Set<String> { ["default"] }

    /// A session's `clients`, `nil` when anyone may use it (or there is no such session).
    public func sessionClients(named name: String) -> SessionClients? {
        name == "default" ? session.clients : nil
    }

    /// Some session has `clients`: requests on the proxy listener are checked
    /// (``SessionAccess``); without any, the check costs nothing.
    public var hasSessionClients: Bool { sessionNames.contains { sessionClients(named: $0) != nil } }
}

/// The check of `clients`: one function for every request that uses a session.
public enum SessionAccess {
    /// Whether requests to the endpoint use a session: it takes the session's token or needs
    /// a login (`login` other than `none`), or it is the login endpoint whose reply the
    /// session captures. Others (pass-through, `login: none`) are never refused.
    public static func usesSession(_ endpoint: EndpointPolicy, _ config: ConciergeConfig) -> Bool {
        endpoint.login != .none || config.session.capture?.endpoint == endpoint.name
    }

    /// The session a request on a listener uses: the listener's, else `default`.
    public static func sessionName(listenerSession: String?) -> String {
        listenerSession ?? "default"
    }

    /// The session the request may not use, or `nil` when it may go on: refused when the
    /// endpoint uses a session with `clients` that do not admit the peer (`nil` peer: TCP).
    public static func refusedSession(_ endpoint: EndpointPolicy, config: ConciergeConfig, peer: PeerCredentials?,
                                      listenerSession: String?) -> String? {
        guard usesSession(endpoint, config) else { return nil }
        let name = sessionName(listenerSession: listenerSession)
        guard let clients = config.sessionClients(named: name), !clients.admits(peer) else { return nil }
        return name
    }
}
