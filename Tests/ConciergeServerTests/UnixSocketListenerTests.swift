@testable import ConciergeCore
@testable import ConciergeServer
import ConciergeTestSupport
import Foundation
import NIOCore
import NIOPosix
import Testing

/// Proxy listeners on Unix sockets and `session.clients` (docs/local-access.md), for real:
/// the daemon binds the sockets, and clients run as other users through `runuser` and
/// `setpriv` (CI runs as root), each a `curl --unix-socket` process.
@Suite("Unix socket listeners and session clients", .serialized)
struct UnixSocketListenerTests {
    static let curl = "/usr/bin/curl"
    static let runuser = "/usr/sbin/runuser"
    static let setpriv = "/usr/bin/setpriv"

    /// Whether the tests that switch users can run; prints why when they cannot.
    static let canSwitchUsers: Bool = {
        let missing = [curl, runuser, setpriv].filter { !FileManager.default.isExecutableFile(atPath: $0) }
        if !missing.isEmpty {
            print("UnixSocketListenerTests: skipping the tests that run clients as other users: missing \(missing.joined(separator: ", "))")
            return false
        }
        if getuid() != 0 {
            print("UnixSocketListenerTests: skipping the tests that run clients as other users: not running as root")
            return false
        }
        return true
    }()

    /// Who a client process runs as.
    enum Account {
        case current
        case user(String)
        case ids(uid: UInt32, gid: UInt32, groups: [UInt32])

        var prefix: [String] {
            switch self {
            case .current: []
            case .user(let name): [UnixSocketListenerTests.runuser, "-u", name, "--"]
            case .ids(let uid, let gid, let groups):
                [UnixSocketListenerTests.setpriv, "--reuid=\(uid)", "--regid=\(gid)",
                 groups.isEmpty ? "--clear-groups" : "--groups=\(groups.map(String.init).joined(separator: ","))", "--"]
            }
        }
    }

    /// A reply read by curl over a Unix socket; status 0 when curl could not connect.
    struct Reply {
        var status: Int
        var body: String
        var output: String
        var json: JSONValue? { JSONValue.parse(Array(body.utf8)) }
    }

    static func send(_ method: String, _ path: String, socket: String, as account: Account, form: String? = nil) async throws -> Reply {
        var arguments = account.prefix + [curl, "-sS", "--max-time", "10", "--unix-socket", socket, "-o", "-", "-w", "\n%{http_code}",
                                          "-X", method, "http://localhost" + path]
        if let form { arguments += ["-H", "Content-Type: application/x-www-form-urlencoded", "--data", form] }
        let child = try ChildProcess(arguments)
        _ = await child.wait(limit: .seconds(20))
        let output = child.output
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
        let status = Int(lines.last ?? "") ?? 0
        return Reply(status: status, body: lines.dropLast().joined(separator: "\n"), output: output)
    }

    static let refusal: JSONValue = ["error": "session not allowed: default"]

    /// Listeners: TCP, an open socket (0666) and a group socket (0660, group 4242); the session
    /// lists uid 4001 and group 4242 when `clients`.
    static func withRig(clients: Bool, _ body: (ConciergeTestRig, _ open: String, _ grouped: String) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("cc-unix-\(UUID().uuidString.prefix(8))").path
        let (open, grouped) = (directory + "/open.sock", directory + "/group.sock")
        var extra = ""
        if clients { extra = TestConfig.defaultSession + "\n  clients: { uids: [4001], gids: [4242] }\n" }
        try await ConciergeTestRig.with(extra: extra, directory: directory, configTransform: { yaml in
            yaml.replacingOccurrences(of: "  proxy: 127.0.0.1:0\n", with: """
                  proxy:
                    - 127.0.0.1:0
                    - { address: "unix:\(open)", mode: "0666" }
                    - { address: "unix:\(grouped)", group: 4242 }

                """)
        }) { rig in
            try await body(rig, open, grouped)
        }
    }

    @Test("the socket files get their mode and group, and are removed at shutdown")
    func socketFiles() async throws {
        try await Self.withRig(clients: false) { rig, open, grouped in
            var status = stat()
            #expect(lstat(open, &status) == 0)
            #expect(status.st_mode & S_IFMT == S_IFSOCK)
            #expect(status.st_mode & 0o7777 == 0o666)
            #expect(lstat(grouped, &status) == 0)
            #expect(status.st_mode & 0o7777 == 0o660)
            #expect(status.st_gid == 4242)
            #expect(status.st_uid == geteuid())
            // No private directory of the binding is left beside them.
            let names = try FileManager.default.contentsOfDirectory(atPath: rig.directory)
            #expect(!names.contains { $0.hasPrefix(".c") })
            // A reload keeps the listeners and their files (addresses change only on restart).
            let reload = try await rig.admin(.POST, "/reload")
            #expect(reload.status == 200)
            #expect(lstat(open, &status) == 0)
            await rig.stop()
            #expect(lstat(open, &status) != 0 && errno == ENOENT)
            #expect(lstat(grouped, &status) != 0 && errno == ENOENT)
        }
    }

    @Test("a session with clients: unlisted peers (root, nobody) get 403 and nothing reaches the upstream; a listed uid or group gets through",
          .enabled(if: canSwitchUsers))
    func clientsOverUnixSockets() async throws {
        try await Self.withRig(clients: true) { rig, open, grouped in
            let api = rig.api.state
            let before = api.totalCalls
            for account in [Account.current, .user("nobody"), .ids(uid: 4002, gid: 4003, groups: [27])] {
                let login = try await Self.send("POST", "/api/login", socket: open, as: account, form: "username=alice&password=secret")
                #expect(login.status == 403, "\(account): \(login.output)")
                #expect(login.body == #"{"error":"session not allowed: default"}"#)
                let info = try await Self.send("GET", "/api/user/info", socket: open, as: account)
                #expect(info.status == 403)
                #expect(info.json == Self.refusal)
            }
            #expect(api.totalCalls == before, "nothing was forwarded for refused peers")
            // The group socket's mode keeps out who is not in its group: no connection at all.
            let outsider = try await Self.send("GET", "/api/items", socket: grouped, as: .user("nobody"))
            #expect(outsider.status == 0, "\(outsider.output)")
            // A listed uid logs in and uses the session.
            let login = try await Self.send("POST", "/api/login", socket: open, as: .ids(uid: 4001, gid: 4001, groups: []),
                                            form: "username=alice&password=secret")
            #expect(login.status == 200, "\(login.output)")
            let info = try await Self.send("GET", "/api/user/info", socket: open, as: .ids(uid: 4001, gid: 4001, groups: []))
            #expect(info.status == 200)
            #expect(api.calls("/api/user/info") == 1)
            // A listed group admits: as a supplementary group, and as the primary one.
            let supplementary = try await Self.send("GET", "/api/user/info", socket: grouped, as: .ids(uid: 5001, gid: 5001, groups: [4242]))
            #expect(supplementary.status == 200, "\(supplementary.output)")
            let primary = try await Self.send("GET", "/api/user/info", socket: open, as: .ids(uid: 5002, gid: 4242, groups: []))
            #expect(primary.status == 200, "\(primary.output)")
            // The reply now cached is no way around clients: still 403, for every request.
            for _ in 0..<2 {
                let cached = try await Self.send("GET", "/api/user/info", socket: open, as: .user("nobody"))
                #expect(cached.status == 403)
            }
            #expect(api.calls("/api/user/info") == 1)
            // Requests that use no session are not blocked by clients.
            let items = try await Self.send("GET", "/api/items", socket: open, as: .user("nobody"))
            #expect(items.status == 200, "\(items.output)")
        }
    }

    @Test("TCP reaches no session with clients (403, nothing forwarded); requests without a session pass")
    func clientsOverTCP() async throws {
        try await Self.withRig(clients: true) { rig, _, _ in
            let before = rig.api.state.totalCalls
            let login = try await rig.login()
            #expect(login.status == 403)
            #expect(login.json == Self.refusal)
            let info = try await rig.get("/api/user/info")
            #expect(info.status == 403)
            #expect(info.text == #"{"error":"session not allowed: default"}"#)
            #expect(rig.api.state.totalCalls == before)
            let items = try await rig.get("/api/items")
            #expect(items.status == 200)
            #expect(rig.api.state.totalCalls == before + 1)
        }
    }

    @Test("a session without clients works over TCP and over a Unix socket, for any peer", .enabled(if: canSwitchUsers))
    func noClients() async throws {
        try await Self.withRig(clients: false) { rig, open, _ in
            let login = try await Self.send("POST", "/api/login", socket: open, as: .user("nobody"), form: "username=alice&password=secret")
            #expect(login.status == 200, "\(login.output)")
            let overSocket = try await Self.send("GET", "/api/user/info", socket: open, as: .user("nobody"))
            #expect(overSocket.status == 200)
            let overTCP = try await rig.get("/api/user/info")
            #expect(overTCP.status == 200)
            #expect(overTCP.json?[path: "data"] != nil)
        }
    }

    @Test("the peer's credentials from SO_PEERCRED on a real socket pair: uid, gid and groups")
    func peerCredentials() async throws {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer { close(fds[1]) }
        let group = MultiThreadedEventLoopGroup.singleton
        let channel = try await ClientBootstrap(group: group).withConnectedSocket(fds[0]).get()
        let peer = try await channel.eventLoop.flatSubmit { PeerCredentialReader.read(channel) }.get()
        try await channel.close()
        let expected = try #require(PeerCredentialReader.groups(status: String(contentsOfFile: "/proc/self/status", encoding: .utf8),
                                                                uid: geteuid(), gid: getegid()))
        #expect(peer == PeerCredentials(uid: geteuid(), gid: getegid(), groups: expected))
    }

    @Test("groups from /proc/PID/status only when its effective uid and gid match the socket's; a user namespace that hides uids is recognised")
    func statusGroups() {
        let status = "Name:\tcurl\nUid:\t4001\t4001\t4001\t4001\nGid:\t5000\t5000\t5000\t5000\nGroups:\t27 4242 \n"
        #expect(PeerCredentialReader.groups(status: status, uid: 4001, gid: 5000) == [27, 4242])
        #expect(PeerCredentialReader.groups(status: status, uid: 4002, gid: 5000) == nil)
        #expect(PeerCredentialReader.groups(status: status, uid: 4001, gid: 5001) == nil)
        #expect(PeerCredentialReader.groups(status: "Uid:\t1\t1\t1\t1\nGid:\t2\t2\t2\t2\nGroups:\t\n", uid: 1, gid: 2) == [])
        #expect(PeerCredentialReader.userDatabaseGroups(uid: 0, gid: 0).contains(0))
        // The whole range mapped as itself; systemd's PrivateUsers=yes maps 0, the service's uid and nothing else.
        #expect(PeerCredentialReader.mapsEveryID(uidMap: "         0          0 4294967295\n"))
        #expect(!PeerCredentialReader.mapsEveryID(uidMap: "         0          0          1\n     61234      61234          1\n"))
    }
}
