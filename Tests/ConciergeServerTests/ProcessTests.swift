import ConciergeCore
import ConciergeSampleAPI
import ConciergeTestSupport
import Foundation
import Synchronization
import Testing

/// The `concierge` binary as a real process: sd_notify, signals, exit codes, and the CLI
/// clients against a running daemon. Needs `swift build` to have built the executable.
@Suite("Daemon process and CLI")
struct ProcessTests {
    static let repoRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static var binary: String { repoRoot + "/.build/debug/concierge" }

    @Test("check-config exits 0 on the shipped configs and 78 naming key path and line on a bad one")
    func checkConfig() async throws {
        let ok = try await DaemonProcess.run([Self.binary, "check-config", "--config", Self.repoRoot + "/Config/concierge.yaml"])
        #expect(ok.status == 0)
        let demo = try await DaemonProcess.run([Self.binary, "check-config", "--config", Self.repoRoot + "/Config/demo.yaml"])
        #expect(demo.status == 0)
        let dir = try TempDir()
        let bad = dir.path + "/bad.yaml"
        try "upstreams:\n  a: http://127.0.0.1:1\nendpoints:\n  - name: x\n    match: GET /x\n    cache: { ttl: 5x }\n  - name: y\n    match: GET /y\n    colour: red\n"
            .write(toFile: bad, atomically: true, encoding: .utf8)
        let failed = try await DaemonProcess.run([Self.binary, "check-config", "--config", bad])
        #expect(failed.status == 78)
        #expect(failed.output.contains("endpoints[0].cache.ttl (line 6)"))
        #expect(failed.output.contains("endpoints[1].colour (line 9): unknown key"))
        let serve = try await DaemonProcess.run([Self.binary, "serve", "--config", bad])
        #expect(serve.status == 78)
    }

    @Test("a non-ASCII common header name is exit 78 naming the key and line, for check-config and serve")
    func nonASCIIHeaderConfig() async throws {
        let dir = try TempDir()
        let bad = dir.path + "/bad.yaml"
        try "upstreams:\n  a: http://127.0.0.1:1\ncommon:\n  headers: { \"🚀\": \"1\" }\n".write(toFile: bad, atomically: true, encoding: .utf8)
        let checked = try await DaemonProcess.run([Self.binary, "check-config", "--config", bad])
        #expect(checked.status == 78)
        #expect(checked.output.contains("common.headers.🚀 (line 4): invalid header name"))
        let serve = try await DaemonProcess.run([Self.binary, "serve", "--config", bad])
        #expect(serve.status == 78)
    }

    @Test("an unwritable storage path is a clear start-up error")
    func unwritableStorage() async throws {
        let dir = try TempDir()
        let config = dir.path + "/c.yaml"
        try "upstreams:\n  a: http://127.0.0.1:1\nstorage:\n  path: /proc/concierge-nope/x.sqlite\n".write(toFile: config, atomically: true, encoding: .utf8)
        let result = try await DaemonProcess.run([Self.binary, "serve", "--config", config])
        #expect(result.status != 0)
        #expect(result.output.contains("/proc/concierge-nope"))
    }

    @Test("NOTIFY_SOCKET gets READY=1 after /health answers, WATCHDOG=1 with WATCHDOG_USEC, STOPPING=1 on SIGTERM; exit 0")
    func systemdNotify() async throws {
        let api = try await SampleAPI.start()
        let dir = try TempDir()
        let socket = try NotifySocket(path: dir.path + "/notify.sock")
        let daemon = try DaemonProcess.start(binary: Self.binary, config: DaemonProcess.config(dir: dir.path, apiPort: api.port),
                                             environment: ["NOTIFY_SOCKET": socket.path, "WATCHDOG_USEC": "200000"])
        let ready = try await socket.waitFor("READY=1")
        #expect(ready.contains("STATUS="))
        let ports = try await daemon.ports()
        let health = try await ConciergeTestRig.send(.GET, "http://127.0.0.1:\(ports.admin)/health")
        #expect(health.status == 200)
        _ = try await socket.waitFor("WATCHDOG=1")
        daemon.signal(SIGTERM)
        _ = try await socket.waitFor("STOPPING=1")
        #expect(try await daemon.wait() == 0)
        await api.shutdown()
    }

    @Test("SIGTERM with a slow request in flight: the request completes and the process exits 0")
    func gracefulShutdown() async throws {
        let api = try await SampleAPI.start()
        let dir = try TempDir()
        let daemon = try DaemonProcess.start(binary: Self.binary, config: DaemonProcess.config(dir: dir.path, apiPort: api.port))
        let ports = try await daemon.ports()
        async let slow = ConciergeTestRig.send(.GET, "http://127.0.0.1:\(ports.proxy)/api/slow?ms=1500")
        // In flight once the upstream has it (a fixed sleep could signal before the daemon
        // even accepted the connection on a loaded machine: the closed listener reset it).
        #expect(await eventually { api.state.lastRequest("/api/slow") != nil }, "the request reached the upstream")
        daemon.signal(SIGTERM)
        let reply = try await slow
        #expect(reply.status == 200)
        #expect(reply.json?[path: "data.slept"] == .int(1500))
        #expect(try await daemon.wait() == 0)
        await api.shutdown()
    }

    @Test("SIGTERM with a slow cacheable miss in flight (answered on its event loop, not as a task): it completes, is stored, and the process exits 0")
    func gracefulShutdownMissOnLoop() async throws {
        let api = try await SampleAPI.start()
        let dir = try TempDir()
        let config = DaemonProcess.config(dir: dir.path, apiPort: api.port)
            .replacingOccurrences(of: "    match: GET /api/slow\n", with: "    match: GET /api/slow\n    cache: { ttl: 60s }\n")
        #expect(config.contains("/api/slow\n    cache: { ttl: 60s }\nlimits"))
        let daemon = try DaemonProcess.start(binary: Self.binary, config: config)
        let ports = try await daemon.ports()
        async let slow = ConciergeTestRig.send(.GET, "http://127.0.0.1:\(ports.proxy)/api/slow?ms=1500")
        #expect(await eventually { api.state.lastRequest("/api/slow") != nil }, "the miss reached the upstream")
        daemon.signal(SIGTERM)
        let reply = try await slow
        #expect(reply.status == 200)
        #expect(reply.headers["X-Cache"] == ["MISS"])
        #expect(reply.headers["Cache-Status"].first?.hasSuffix("; stored") == true)
        #expect(reply.json?[path: "data.slept"] == .int(1500))
        #expect(try await daemon.wait() == 0)
        await api.shutdown()
    }

    @Test("SIGHUP reloads a valid config and keeps the old one on an invalid file")
    func sighupReload() async throws {
        let api = try await SampleAPI.start()
        let dir = try TempDir()
        let text = DaemonProcess.config(dir: dir.path, apiPort: api.port)
        let daemon = try DaemonProcess.start(binary: Self.binary, config: text)
        let ports = try await daemon.ports()
        try text.replacingOccurrences(of: "app_version: \"1.4.0\"", with: "app_version: \"9.9\"").write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        #expect(await eventually { daemon.output.contains("configuration reloaded") })
        _ = try await ConciergeTestRig.send(.GET, "http://127.0.0.1:\(ports.proxy)/api/echo")
        #expect(api.state.lastRequest("/api/echo")?.queryValue("app_version") == "9.9")
        try (text + "\nnot_a_key: true\n").write(toFile: daemon.configPath, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        #expect(await eventually { daemon.output.contains("reload failed") })
        #expect(daemon.output.contains("not_a_key"))
        _ = try await ConciergeTestRig.send(.GET, "http://127.0.0.1:\(ports.proxy)/api/echo?x=2")
        #expect(api.state.lastRequest("/api/echo")?.queryValue("app_version") == "9.9")
        daemon.signal(SIGTERM)
        #expect(try await daemon.wait() == 0)
        await api.shutdown()
    }

    @Test("each CLI subcommand works against a running daemon; errors have distinct exit codes")
    func cliClients() async throws {
        try await ConciergeTestRig.with { rig in
            let admin = ["--admin", "127.0.0.1:\(rig.adminPort)", "--token", ConciergeTestRig.adminToken]
            func cli(_ args: [String]) async throws -> DaemonProcess.Result {
                try await DaemonProcess.run([Self.binary] + args + admin)
            }
            try await rig.login("nina")
            for i in 0..<3 { _ = try await rig.get("/api/items?limit=\(i)") }
            let stats = try await cli(["stats", "--json"])
            #expect(stats.status == 0)
            #expect(JSONValue.parse(stats.output)?[path: "entries"] == .int(3))
            let entries = try await cli(["entries", "--limit", "2"])
            #expect(entries.output.contains("2 entries"))
            #expect(entries.output.contains("more: --cursor"))
            let soft = try await cli(["invalidate", "--pattern", "limit=0", "--soft"])
            #expect(soft.output.contains("marked 1 entries stale"), "\(soft.output)")
            #expect(try await cli(["invalidate", "--tag", "none:1", "--tag", "none:2"]).output.contains("removed 0 entries"))
            let invalidate = try await cli(["invalidate", "--pattern", "limit=1"])
            #expect(invalidate.output.contains("removed 1 entries"), "\(invalidate.output)")
            let byEndpoint = try await cli(["invalidate", "--endpoint", "itemList"])
            // The marked entry has no stale window (ttl only), so on a slow run the sweeper
            // (every 30 s) may have deleted it before this: then it logged so.
            let swept = rig.logText.contains("sweeper removed stale entries")
            #expect(byEndpoint.output.contains("removed 2 entries") || (swept && byEndpoint.output.contains("removed 1 entries")),
                    "the marked one too: \(byEndpoint.output), swept: \(swept)")
            #expect(try await cli(["invalidate", "--all"]).status == 0)
            let session = try await cli(["session", "show"])
            #expect(session.output.contains("logged in as nina"))
            #expect(try await cli(["session", "clear"]).output.contains("logged out"))
            #expect(try await cli(["session", "set", "--access-token", "tok-123456789", "--user-id", "olga"]).output.contains("olga"))
            #expect(try await cli(["env", "show"]).output.contains("debug"))
            #expect(try await cli(["env", "set", "down"]).output.contains("environment: down"))
            let wrongToken = try await DaemonProcess.run([Self.binary, "stats", "--admin", "127.0.0.1:\(rig.adminPort)", "--token", "nope"])
            #expect(wrongToken.status == 77)
            let down = try await DaemonProcess.run([Self.binary, "stats", "--admin", "127.0.0.1:1", "--token", "x"])
            #expect(down.status == 69)
            #expect(down.output.contains("cannot reach"))
            let usage = try await DaemonProcess.run([Self.binary, "invalidate"] + admin)
            #expect(usage.status == 64)
        }
    }
}

/// A temporary directory removed when the value is released.
final class TempDir: Sendable {
    let path: String
    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-proc-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A `concierge` child process with its output captured; killed if the test forgets it.
final class DaemonProcess: Sendable {
    struct Result: Sendable {
        var status: Int32
        var output: String
    }

    let child: ChildProcess
    let configPath: String

    static func config(dir: String, apiPort: Int) -> String {
        """
        listen: { proxy: 127.0.0.1:0, admin: 127.0.0.1:0 }
        admin: { token: proc-token }
        storage: { path: \(dir)/state.sqlite }
        upstreams: { debug: http://127.0.0.1:\(apiPort) }
        common: { params: { app_version: "1.4.0" } }
        endpoints:
          - name: items
            match: GET /api/items
            cache: { ttl: 60s }
          - name: echo
            match: /api/echo
          - name: slow
            match: GET /api/slow
        limits: { shutdown_grace: 5s }

        """
    }

    static func start(binary: String, config: String, environment: [String: String] = [:]) throws -> DaemonProcess {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-proc-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let configPath = dir + "/concierge.yaml"
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
        return try DaemonProcess(arguments: [binary, "serve", "--config", configPath], configPath: configPath, environment: environment)
    }

    init(arguments: [String], configPath: String, environment: [String: String]) throws {
        guard FileManager.default.isExecutableFile(atPath: arguments[0]) else {
            throw DaemonError("missing \(arguments[0]): run `swift build` before the tests")
        }
        var env = ProcessInfo.processInfo.environment
        for key in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM", "CONCIERGE_ENVIRONMENT", "CONCIERGE_ADMIN_TOKEN"] { env[key] = nil }
        env.merge(environment) { $1 }
        self.configPath = configPath
        child = try ChildProcess(arguments, environment: env)
    }

    var output: String { child.output }
    var pid: pid_t { child.pid }
    var endedBySignal: Bool { child.endedBySignal }

    func signal(_ signal: Int32) { child.signal(signal) }

    /// Proxy and admin ports from the "ready" log line.
    func ports() async throws -> (proxy: Int, admin: Int) {
        let found = await eventually(.seconds(15)) { self.output.contains("ready admin_port=") }
        guard found, let line = output.split(separator: "\n").first(where: { $0.contains("ready admin_port=") }) else {
            throw DaemonError("daemon did not become ready: \(output)")
        }
        func value(_ key: String) -> Int? {
            guard let r = line.range(of: key + "=") else { return nil }
            return Int(line[r.upperBound...].prefix { $0.isNumber })
        }
        guard let proxy = value("proxy_port"), let admin = value("admin_port") else { throw DaemonError("no ports in \(line)") }
        return (proxy, admin)
    }

    /// Waits (bounded) for the exit status; kills the process past the limit.
    func wait(limit: Duration = .seconds(20)) async throws -> Int32 {
        guard let status = await child.wait(limit: limit) else { throw DaemonError("process did not exit in time") }
        return status
    }

    deinit {
        try? FileManager.default.removeItem(atPath: (configPath as NSString).deletingLastPathComponent)
    }

    /// Runs a command to completion (at most 60 s) and returns its status and output.
    static func run(_ arguments: [String]) async throws -> Result {
        let child = try DaemonProcess(arguments: arguments, configPath: "/nonexistent/x", environment: [:])
        let status = try await child.wait(limit: .seconds(60))
        return Result(status: status, output: child.output)
    }
}

struct DaemonError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A unix datagram socket standing in for systemd's notify socket.
final class NotifySocket: Sendable {
    let path: String
    let fd: Int32
    private let received = Mutex<[String]>([])

    init(path: String) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8) + [0]) }
        let ok = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard ok == 0 else { throw DaemonError("cannot bind \(path)") }
        var tv = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    /// The first message containing `text` (bounded: 15 s).
    func waitFor(_ text: String) async throws -> String {
        let deadline = ContinuousClock.now + .seconds(15)
        while ContinuousClock.now < deadline {
            if let hit = received.withLock({ $0.first { $0.contains(text) } }) { return hit }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = recv(fd, &buffer, buffer.count, 0)
            if n > 0 { received.withLock { $0.append(String(decoding: buffer[0..<n], as: UTF8.self)) } } else { try await Task.sleep(for: .milliseconds(10)) }
        }
        throw DaemonError("no \(text) on the notify socket; got \(received.withLock { $0 })")
    }
}
