import ConciergeSampleAPI
import Foundation

/// A throwaway PostgreSQL cluster for tests: `initdb` into a temporary directory (as the
/// `postgres` user when the tests run as root, which PostgreSQL refuses to run as), started
/// with `pg_ctl` on a free loopback port, stopped and removed by ``stop()`` (or, if the test
/// process was killed first, by the next test process: ``reclaimOrphans(in:)``). Needs
/// Debian's `postgresql` (`.ci/run` installs it).
public final class PostgresCluster: Sendable {
    public let port: Int
    public let directory: String
    let binaries: String
    let runAsPostgres: Bool

    /// The database the fleet tests use, as a `fleet.postgres` URL.
    public var url: String { "postgresql://concierge:fleet-db-secret@127.0.0.1:\(port)/concierge?sslmode=disable" }

    /// The server binaries of the newest installed PostgreSQL, or `nil`.
    public static var installedBinaries: String? {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).compactMap(Int.init).sorted()
        guard let newest = versions.last else { return nil }
        let bin = "\(root)/\(newest)/bin"
        return FileManager.default.isExecutableFile(atPath: bin + "/pg_ctl") ? bin : nil
    }

    /// Whether the fleet tests can run here (in CI they must: `.ci/run` installs PostgreSQL).
    public static var isAvailable: Bool { installedBinaries != nil }

    public static func start() async throws -> PostgresCluster {
        guard let binaries = installedBinaries else { throw Failure("PostgreSQL is not installed (apt-get install postgresql)") }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-pg-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try recordOwner(in: directory)
        let asPostgres = getuid() == 0
        if asPostgres { try await run("/bin/chown", ["postgres:postgres", directory]) }
        let cluster = PostgresCluster(port: 0, directory: directory, binaries: binaries, runAsPostgres: asPostgres)
        // A copy of a template made once (initdb costs a second or two of CPU per cluster).
        let template = try await Template.shared.path(binaries: binaries, asPostgres: asPostgres)
        try await cluster.postgres("/bin/cp", ["-a", template, "\(directory)/data"])
        // A free port: the kernel picks one; a clash with another process is retried.
        for _ in 0..<5 {
            let port = try freePort()
            let started = PostgresCluster(port: port, directory: directory, binaries: binaries, runAsPostgres: asPostgres)
            do {
                try await started.startServer()
                try await started.postgres("psql", ["-h", "127.0.0.1", "-p", "\(port)", "-U", "postgres", "-v", "ON_ERROR_STOP=1", "-q", "-c",
                                              "CREATE ROLE concierge LOGIN PASSWORD 'fleet-db-secret'", "-c",
                                              "CREATE DATABASE concierge OWNER concierge"])
                return started
            } catch {
                _ = try? await started.postgres("pg_ctl", ["-D", "\(directory)/data", "-m", "immediate", "stop"])
            }
        }
        throw Failure("PostgreSQL did not start on a free port")
    }

    init(port: Int, directory: String, binaries: String, runAsPostgres: Bool) {
        (self.port, self.directory, self.binaries, self.runAsPostgres) = (port, directory, binaries, runAsPostgres)
    }

    /// Starts the server (again, after ``kill()``); waits until it accepts connections.
    public func startServer() async throws {
        try await postgres("pg_ctl", ["-D", "\(directory)/data", "-l", "\(directory)/server.log", "-w", "-t", "30", "-o",
                                "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", "start"])
    }

    /// Stops the server at once, as a crash would (`pg_ctl -m immediate`).
    public func kill() async throws {
        try await postgres("pg_ctl", ["-D", "\(directory)/data", "-m", "immediate", "-w", "-t", "30", "stop"])
    }

    /// Freezes the server and its backends (`SIGSTOP`): connections stay open and nothing
    /// answers, as with a hung host. ``thaw()`` resumes them.
    public func freeze() throws { try signalAll(SIGSTOP) }

    public func thaw() throws { try signalAll(SIGCONT) }

    /// The postmaster and its children.
    private func signalAll(_ signal: Int32) throws {
        guard let postmaster = postmasterPID else { throw Failure("no postmaster.pid: the server is not running") }
        var pids = [postmaster]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry), let fields = Self.statFields(of: pid) else { continue }
            if fields.count > 1, Int32(fields[1]) == postmaster { pids.append(pid) }
        }
        for pid in pids { Glibc.kill(pid, signal) }
    }

    /// The postmaster's PID: the first line of `postmaster.pid`, while the server runs.
    var postmasterPID: pid_t? {
        guard let text = FileManager.default.contents(atPath: "\(directory)/data/postmaster.pid") else { return nil }
        return String(decoding: text, as: UTF8.self).split(separator: "\n").first.flatMap { pid_t($0) }
    }

    /// The fields of `/proc/PID/stat` after the command (which may hold spaces: they start after
    /// the last `)`): the state first, then the parent's PID.
    static func statFields(of pid: pid_t) -> [Substring]? {
        guard let stat = FileManager.default.contents(atPath: "/proc/\(pid)/stat") else { return nil }
        return String(decoding: stat, as: UTF8.self).split(separator: ")").last?.split(separator: " ")
    }

    /// Runs SQL as the superuser; returns its output (unaligned, tuples only).
    @discardableResult
    public func sql(_ statement: String) async throws -> String {
        try await postgres("psql", ["-h", "127.0.0.1", "-p", "\(port)", "-U", "postgres", "-d", "concierge", "-v", "ON_ERROR_STOP=1", "-qAt", "-c", statement])
    }

    /// `pg_dump` of the fleet's database (plain SQL, data included), as an operator would take it.
    public func dump() async throws -> String {
        try await postgres("pg_dump", ["-h", "127.0.0.1", "-p", "\(port)", "-U", "postgres", "-d", "concierge"])
    }

    /// Stops the server and removes its files.
    public func stop() async {
        try? await kill()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs one of PostgreSQL's tools (or a program given by its absolute path), as the
    /// `postgres` user when the tests run as root.
    @discardableResult
    func postgres(_ tool: String, _ arguments: [String]) async throws -> String {
        try await Self.runTool(tool.hasPrefix("/") ? tool : "\(binaries)/\(tool)", arguments, asPostgres: runAsPostgres)
    }

    static func runTool(_ program: String, _ arguments: [String], asPostgres: Bool) async throws -> String {
        if asPostgres { return try await run("/usr/sbin/runuser", ["-u", "postgres", "--", program] + arguments) }
        return try await run(program, arguments)
    }

    /// One `initdb` per machine and PostgreSQL version, kept in the temporary directory and
    /// copied for each cluster.
    actor Template {
        static let shared = Template()
        private var ready: String?

        func path(binaries: String, asPostgres: Bool) async throws -> String {
            if let ready { return ready }
            // Once per test process, before its first cluster: those of killed suites go.
            await reclaimOrphans()
            let version = URL(fileURLWithPath: binaries).deletingLastPathComponent().lastPathComponent
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-pg-template-\(version)-\(getuid())").path
            if !FileManager.default.fileExists(atPath: path + "/PG_VERSION") {
                let building = path + ".building-\(UUID().uuidString)"
                if asPostgres {
                    try FileManager.default.createDirectory(atPath: building, withIntermediateDirectories: true)
                    try await run("/bin/chown", ["postgres:postgres", building])
                }
                _ = try await runTool("\(binaries)/initdb", ["-D", building, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
                                  asPostgres: asPostgres)
                try? FileManager.default.removeItem(atPath: path)
                try FileManager.default.moveItem(atPath: building, toPath: path)
            }
            ready = path
            return path
        }
    }

    /// Runs a program to its end (each is bounded by its own timeout: `pg_ctl -t`, psql's
    /// connection to a server that is up; and 60 s here); its output, or a failure with it.
    /// A ``ChildProcess``: the output goes to a file, not a pipe, which the server `pg_ctl`
    /// starts would inherit and keep open, and no descriptor of the test process reaches it.
    @discardableResult
    static func run(_ program: String, _ arguments: [String]) async throws -> String {
        let child = try ChildProcess([program] + arguments)
        guard let status = await child.wait(limit: .seconds(60)) else {
            throw Failure("\((program as NSString).lastPathComponent) did not end within 60 s")
        }
        let text = child.output
        guard status == 0, !child.endedBySignal else {
            throw Failure("\((program as NSString).lastPathComponent) \(arguments.first ?? "") failed (status \(status)): \(text.suffix(600))")
        }
        return text
    }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure("socket() failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw Failure("bind() failed") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}

extension PostgresCluster {
    /// A throwaway cluster and a sample API (`configuration`) for `body`; both are stopped
    /// after it, whether it throws or not.
    public static func withAPI(_ configuration: SampleAPIConfiguration = .init(),
                               _ body: (PostgresCluster, RunningSampleAPI) async throws -> Void) async throws {
        let cluster = try await start()
        let api: RunningSampleAPI
        do {
            api = try await SampleAPI.start(configuration: configuration)
        } catch {
            await cluster.stop()
            throw error
        }
        do {
            try await body(cluster, api)
        } catch {
            await api.shutdown()
            await cluster.stop()
            throw error
        }
        await api.shutdown()
        await cluster.stop()
    }
}
