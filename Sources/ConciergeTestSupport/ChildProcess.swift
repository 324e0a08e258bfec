import Foundation
import Synchronization

/// A child process for tests (a daemon, a CLI call, the OAuth2 provider), started with
/// `posix_spawn` rather than Foundation's `Process`: on this toolchain (Swift 6.3.1)
/// `Process.run()` reads past a buffer while it lists `/proc/self/fd` and crashes the test
/// process now and then (swift-corelibs-foundation PR #5472, fixed after 6.3.1; seen here in a
/// full suite). Output (stdout and stderr) goes to a file read on demand; the child is reaped
/// by polling `waitpid`; every descriptor of the test process but 0–2 is closed before `exec`
/// (through bash, which `exec`s the program under the same PID).
public final class ChildProcess: Sendable {
    public let pid: pid_t
    private let outputPath: String
    /// The raw `waitpid` status once reaped.
    private let reaped = Mutex<Int32?>(nil)

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// - Parameters:
    ///   - arguments: the program's path, then its arguments.
    ///   - environment: the child's whole environment (`nil`: this process's).
    public init(_ arguments: [String], environment: [String: String]? = nil) throws {
        guard let program = arguments.first, FileManager.default.isExecutableFile(atPath: program) else {
            throw Failure(description: "not an executable: \(arguments.first ?? "")")
        }
        outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-child-\(UUID().uuidString).out").path
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv: [UnsafeMutablePointer<CChar>?] = (["/bin/bash", "-c", Self.closeInheritedThenExec, "bash"] + arguments).map { strdup($0) } + [nil]
        defer { for arg in argv { free(arg) } }
        let env = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let envp: [UnsafeMutablePointer<CChar>?] = env.map { strdup($0) } + [nil]
        defer { for item in envp { free(item) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, "/bin/bash", &actions, nil, argv, envp)
        guard spawned == 0 else { throw Failure(description: "cannot start \(program): error \(spawned)") }
        self.pid = pid
    }

    /// A bash script that closes every descriptor but 0–2, then `exec`s its arguments. No
    /// redirection on the loop: bash would keep the loop's saved stderr on a descriptor the loop
    /// closes, and the program would start without one.
    public static let closeInheritedThenExec = #"for fd in /proc/$$/fd/*; do n=${fd##*/}; if [ "$n" -gt 2 ]; then exec {n}>&-; fi; done; exec "$@""#

    /// Everything the child wrote so far (stdout and stderr).
    public var output: String {
        String(decoding: FileManager.default.contents(atPath: outputPath) ?? Data(), as: UTF8.self)
    }

    /// Whether the child has not exited yet (reaps it when it has).
    public var isRunning: Bool {
        reaped.withLock { status in
            guard status == nil else { return false }
            var raw: Int32 = 0
            let result = waitpid(pid, &raw, WNOHANG)
            if result == pid || (result == -1 && errno == ECHILD) {
                status = result == pid ? raw : 0
                return false
            }
            return true
        }
    }

    /// The exit code, or the signal number when a signal ended it (as Foundation's `Process`
    /// reports it); `nil` while it runs.
    public var terminationStatus: Int32? {
        guard !isRunning, let raw = reaped.withLock({ $0 }) else { return nil }
        return raw & 0x7F == 0 ? (raw >> 8) & 0xFF : raw & 0x7F
    }

    /// Whether a signal ended it.
    public var endedBySignal: Bool {
        guard !isRunning, let raw = reaped.withLock({ $0 }) else { return false }
        return raw & 0x7F != 0
    }

    public func signal(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }

    /// Waits (bounded, polling) for the exit; SIGKILL past the limit. Returns the status.
    @discardableResult
    public func wait(limit: Duration) async -> Int32? {
        let deadline = ContinuousClock.now + limit
        while isRunning, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        if isRunning {
            kill(pid, SIGKILL)
            while isRunning { try? await Task.sleep(for: .milliseconds(5)) }
            return nil
        }
        return terminationStatus
    }

    /// Runs to the end, blocking the calling thread (for short commands such as `mount`).
    public func waitBlocking() -> Int32? {
        while isRunning { usleep(5_000) }
        return terminationStatus
    }

    deinit {
        if isRunning {
            kill(pid, SIGKILL)
            var raw: Int32 = 0
            _ = waitpid(pid, &raw, 0)
        }
        try? FileManager.default.removeItem(atPath: outputPath)
    }
}

extension ChildProcess {
    /// The port a test server prints as `ready PORT` once it serves, waited for (bounded);
    /// `nil`, and the process killed, when it exits or says nothing in time.
    public func readyPort(limit: Duration = .seconds(30)) async -> Int? {
        let started = await eventually(limit) { self.output.contains("ready ") || !self.isRunning }
        guard started, let line = output.split(separator: "\n").first(where: { $0.hasPrefix("ready ") }),
              let port = Int(line.dropFirst(6).trimmingCharacters(in: .whitespaces)) else {
            signal(SIGKILL)
            return nil
        }
        return port
    }
}
