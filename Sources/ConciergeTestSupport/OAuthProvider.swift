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
    private let process: ChildProcess
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
    /// - Parameters:
    ///   - accessTokenSeconds: the access tokens' lifetime.
    ///   - refreshGraceSeconds: django-oauth-toolkit's `REFRESH_TOKEN_GRACE_PERIOD_SECONDS`: how
    ///     long a refresh token just rotated away is still honoured (0, the toolkit's default:
    ///     refused at once with `invalid_grant`).
    public static func start(accessTokenSeconds: Int = 300, refreshGraceSeconds: Int = 0) async throws -> OAuthProvider {
        guard let python else { throw ProviderError("no Python with django-oauth-toolkit: set CONCIERGE_OAUTH_PYTHON or run .ci/run") }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-idp-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let process = try ChildProcess([python, repositoryRoot + "/Tests/Fixtures/oauth-provider/provider.py", "0",
                                        directory + "/provider.sqlite", String(accessTokenSeconds),
                                        String(refreshGraceSeconds)])
        guard let port = await process.readyPort() else { throw ProviderError("the provider did not start: \(process.output.suffix(2000))") }
        return OAuthProvider(port: port, process: process, directory: directory)
    }

    private init(port: Int, process: ChildProcess, directory: String) {
        (self.port, self.process, self.directory) = (port, process, directory)
    }

    /// Stops the provider by its PID (SIGTERM, then SIGKILL past a bounded wait).
    public func stop() async {
        process.signal(SIGTERM)
        await process.wait(limit: .seconds(5))
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Counts from the provider's own token tables: `refresh_grants` (refresh tokens spent by a
    /// refresh grant or revoked), `live_refresh_tokens`, `access_tokens`, `live_access_tokens`;
    /// `revoke_calls`, the revocation requests it received; and of the refresh grants it was
    /// asked for: `refresh_requests`, `refresh_refused` (answered `invalid_grant`); and per user
    /// (`alice`, `bob`), `by_user.NAME.refresh_grants` and `by_user.NAME.live_refresh_tokens`.
    public func stats() async throws -> JSONValue {
        let reply = try await ConciergeTestRig.send(.GET, baseURL + "/test/stats")
        guard let json = reply.json else { throw ProviderError("stats: \(reply.text)") }
        return json
    }

    /// Every access token issued so far expires now: its next use is answered 401.
    public func expireAccessTokens() async throws {
        _ = try await ConciergeTestRig.send(.GET, baseURL + "/test/expire")
    }

    /// How the token endpoint answers refresh grants: `"429"` (with `Retry-After: 7`), `"503"`,
    /// `"invalid_grant"` (400), or `nil` (normally).
    public func setFault(_ mode: String?) async throws {
        _ = try await ConciergeTestRig.send(.GET, baseURL + "/test/fault" + (mode.map { "?mode=\($0)" } ?? ""))
    }

    /// Holds each refresh grant's reply back this long after the provider has rotated the
    /// refresh token (0: answer at once): a client that dies meanwhile loses the new token.
    public func setRefreshHold(_ seconds: Double) async throws {
        _ = try await ConciergeTestRig.send(.GET, baseURL + "/test/slow?seconds=\(seconds)")
    }

    public struct ProviderError: Error, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }
}
