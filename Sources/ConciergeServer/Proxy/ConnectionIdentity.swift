import ConciergeCore
import Foundation
import NIOCore

/// Who is at the other end of a proxy connection, decided once when it is accepted, and the
/// session its listener names; it travels with each request into the pipeline
/// (``IncomingRequest/identity``), where ``SessionAccess`` judges it.
public struct ConnectionIdentity: Sendable, Equatable {
    /// The peer's credentials on a Unix socket; `nil` over TCP (a peer there has no identity)
    /// or when the kernel would not say.
    public var peer: PeerCredentials?
    /// `listen.proxy[].session`.
    public var listenerSession: String?

    public init(peer: PeerCredentials? = nil, listenerSession: String? = nil) {
        (self.peer, self.listenerSession) = (peer, listenerSession)
    }

    /// A TCP connection on a listener that names no session.
    public static let anonymous = ConnectionIdentity()
}

/// Reads a Unix-socket peer's credentials: uid, gid and pid from `SO_PEERCRED` (as they were at
/// `connect`), the supplementary groups from `/proc/PID/status` when that process still has
/// the same uid and gid, else from the user database (`getgrouplist`).
enum PeerCredentialReader {
    /// `struct ucred` (Linux): `pid_t pid; uid_t uid; gid_t gid;`, three 4-byte fields.
    struct UCred: Sendable {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
    }

    /// `SO_PEERCRED` (asm-generic/socket.h).
    static let peerCredOption: Int32 = 17

    /// The accepted channel's peer, on its event loop; `nil` when the channel gives no socket
    /// options or the call fails (the connection then has no identity).
    static func read(_ channel: any Channel) -> EventLoopFuture<PeerCredentials?> {
        guard let provider = channel as? any SocketOptionProvider else {
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        let credentials: EventLoopFuture<UCred> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(peerCredOption))
        return credentials.map { cred -> PeerCredentials? in
            PeerCredentials(uid: cred.uid, gid: cred.gid, groups: groups(pid: cred.pid, uid: cred.uid, gid: cred.gid))
        }.recover { _ in nil }
    }

    /// The supplementary groups of the process `pid` if it still runs as `uid`/`gid` (a pid may
    /// be reused once its process ends), else those the user database gives `uid`.
    static func groups(pid: Int32, uid: UInt32, gid: UInt32) -> [UInt32] {
        if pid > 0, let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
           let groups = groups(status: status, uid: uid, gid: gid) {
            return groups
        }
        return userDatabaseGroups(uid: uid, gid: gid)
    }

    /// The `Groups:` line of a `/proc/PID/status` text whose effective uid and gid are the
    /// given ones; `nil` otherwise.
    static func groups(status: String, uid: UInt32, gid: UInt32) -> [UInt32]? {
        var effectiveUID: UInt32?
        var effectiveGID: UInt32?
        var groups: [UInt32]?
        for line in status.split(separator: "\n") {
            let fields = line.split(whereSeparator: { $0 == "\t" || $0 == " " })
            guard let name = fields.first else { continue }
            switch name {
            case "Uid:": effectiveUID = fields.count > 2 ? UInt32(fields[2]) : nil
            case "Gid:": effectiveGID = fields.count > 2 ? UInt32(fields[2]) : nil
            case "Groups:": groups = fields.dropFirst().compactMap { UInt32($0) }
            default: continue
            }
        }
        guard effectiveUID == uid, effectiveGID == gid else { return nil }
        return groups
    }

    /// Whether a `/proc/self/uid_map` text maps every uid as itself (no user namespace, or one
    /// that hides nothing). In a narrower one (systemd's `PrivateUsers=yes`) other users'
    /// peers appear as the overflow uid 65534, and `clients` cannot tell them apart.
    static func mapsEveryID(uidMap: String) -> Bool {
        let fields = uidMap.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" })
        return fields == ["0", "0", "4294967295"]
    }

    /// The groups the user database gives `uid` (none for a uid without an entry).
    static func userDatabaseGroups(uid: UInt32, gid: UInt32) -> [UInt32] {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16384)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.pw_name else { return [] }
        var count: Int32 = 64
        var groups = [gid_t](repeating: 0, count: Int(count))
        if getgrouplist(name, gid, &groups, &count) == -1 {
            groups = [gid_t](repeating: 0, count: Int(count))
            guard getgrouplist(name, gid, &groups, &count) != -1 else { return [] }
        }
        return Array(groups.prefix(Int(count)))
    }
}
