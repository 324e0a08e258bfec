import ConciergeCore
import Foundation
import NIOHTTP1
import Synchronization

/// A real OAuth2 identity provider for integration tests: django-oauth-toolkit running
/// `Tests/Fixtures/oauth-provider/provider.py` (password and refresh-token grants with
/// rotation, RFC 7009 revocation, a protected resource answering RFC 6750 401s) on a free
/// loopback port, with its own SQLite file; stopped by its PID.
///
/// The Python comes from `CONCIERGE_OAUTH_PYTHON`, else the repository's `.venv-oauth`
/// (`.ci/run` installs django-oauth-toolkit there).
public final class OAuthProvider: Sendable {
    public static let clientID = "concierge-client"
    public static let clientSecret = "concierge-secret"
    public static let username = "alice"
    public static let password = "wonderland-pass"

    public let port: Int
    private let pid: Int32
    private let process: Mutex<Process?>
    private let directory: String

    /// The interpreter with django-oauth-toolkit, if this machine has one.
    public static var python: String? {
        let candidates = [ProcessInfo.processInfo.environment["CONCIERGE_OAUTH_PYTHON"], repositoryRoot + "/.venv-oauth/bin/python"]
        return candidates.compactMap { $0 }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    static var repositoryRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }

    public var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Starts the provider and waits (bounded) until it serves.
    /// - Parameter accessTokenSeconds: the access tokens' lifetime.
    public static func start(accessTokenSeconds: Int = 300) async throws -> OAuthProvider {
        guard let python else { throw ProviderError("no Python with django-oauth-toolkit: set CONCIERGE_OAUTH_PYTHON or run .ci/run") }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-idp-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [repositoryRoot + "/Tests/Fixtures/oauth-provider/provider.py", "0", directory + "/provider.sqlite",
                             String(accessTokenSeconds)]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        let output = Mutex("")
        pipe.fileHandleForReading.readabilityHandler = { handle in
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = read(handle.fileDescriptor, &buffer, buffer.count)
            if n > 0 { output.withLock { $0 += String(decoding: buffer[0..<n], as: UTF8.self) } }
        }
        try process.run()
        let started = await eventually(.seconds(30)) { output.withLock { $0.contains("ready ") } || !process.isRunning }
        let text = output.withLock { $0 }
        guard started, let line = text.split(separator: "\n").first(where: { $0.hasPrefix("ready ") }),
              let port = Int(line.dropFirst(6).trimmingCharacters(in: .whitespaces)) else {
            kill(process.processIdentifier, SIGKILL)
            throw ProviderError("the provider did not start: \(text.suffix(2000))")
        }
        return OAuthProvider(port: port, process: process, directory: directory)
    }

    private init(port: Int, process: Process, directory: String) {
        self.port = port
        pid = process.processIdentifier
        self.process = Mutex(process)
        self.directory = directory
    }

    /// Stops the provider by its PID (SIGTERM, then SIGKILL past a bounded wait).
    public func stop() async {
        kill(pid, SIGTERM)
        let process = self.process.withLock { $0 }
        let exited = await eventually(.seconds(5)) { !(process?.isRunning ?? false) }
        if !exited { kill(pid, SIGKILL) }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Counts from the provider's own token tables: `refresh_grants` (refresh tokens spent by a
    /// refresh grant or revoked), `live_refresh_tokens`, `access_tokens`, `live_access_tokens`.
    public func stats() async throws -> JSONValue {
        let reply = try await ConciergeTestRig.send(.GET, baseURL + "/test/stats")
        guard let json = reply.json else { throw ProviderError("stats: \(reply.text)") }
        return json
    }

    /// Every access token issued so far expires now: its next use is answered 401.
    public func expireAccessTokens() async throws {
        _ = try await ConciergeTestRig.send(.GET, baseURL + "/test/expire")
    }

    /// How the token endpoint answers refresh grants: `"429"` (with `Retry-After: 7`), `"503"`, or `nil` (normally).
    public func setFault(_ mode: String?) async throws {
        _ = try await ConciergeTestRig.send(.GET, baseURL + "/test/fault" + (mode.map { "?mode=\($0)" } ?? ""))
    }

    public struct ProviderError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
