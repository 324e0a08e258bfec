import ConciergeCore
import Foundation
import Logging
import NIOCore
import ServiceLifecycle

/// RFC 7009 revocation of the tokens a logout dropped (`session.revoke`), in the background:
/// each revocation is a child task of this service's task group, bounded by the revoke
/// request's `timeout`, logged when it fails, and never holds a logout up or keeps a session.
///
/// The service group stops it after the proxy listener: revocations already asked for are sent
/// (each within its timeout) before the daemon exits; none starts after that.
final class TokenRevocation: Service, Sendable {
    private let transport: any UpstreamTransport
    private let runtime: Runtime
    private let logger: Logger
    /// Tokens to revoke, with the revocation request of their session when they were dropped.
    typealias Revocation = (tokens: SessionTokens, endpoint: ConciergeConfig.TokenEndpoint)
    private let queue: AsyncStream<Revocation>
    private let input: AsyncStream<Revocation>.Continuation

    init(transport: any UpstreamTransport, runtime: Runtime, logger: Logger) {
        (self.transport, self.runtime, self.logger) = (transport, runtime, logger)
        (queue, input) = AsyncStream.makeStream(of: Revocation.self)
    }

    /// Revokes `tokens` at the provider, when the session `name` has `revoke` (read now: a
    /// session a reload removes is revoked as it was configured).
    func revoke(_ tokens: SessionTokens, session name: String = "default") {
        guard let endpoint = runtime.current.sessionSettings(name).revoke else { return }
        input.yield((tokens, endpoint))
    }

    func run() async throws {
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for await item in queue {
                    group.addTask { await self.send(item.tokens, endpoint: item.endpoint) }
                }
            }
        } onGracefulShutdown: {
            self.input.finish()
        }
    }

    /// One revocation request; a 2xx (an empty `200` included) is a success.
    func send(_ tokens: SessionTokens, endpoint: ConciergeConfig.TokenEndpoint) async {
        let (rc, environment) = runtime.snapshot
        guard let upstream = rc.settings.upstream(named: endpoint.upstream ?? environment) else { return }
        let built = TokenRequest(endpoint, refreshToken: tokens.refreshToken, accessToken: tokens.accessToken)
        let body: UpstreamRequest.Body = built.body.map { .bytes(ByteBuffer(bytes: $0)) } ?? .none
        let request = UpstreamRequest(method: built.method, base: upstream.baseURL, target: built.target, headers: built.headers, body: body,
                                      timeout: endpoint.timeout)
        do {
            let response = try await transport.send(request, maxBody: 64 << 10)
            if (200..<300).contains(response.status) {
                logger.info("tokens revoked at the provider", metadata: ["user": "\(tokens.userID ?? "-")", "path": "\(built.path)"])
            } else {
                logger.warning("token revocation refused", metadata: ["status": "\(response.status)", "path": "\(built.path)"])
            }
        } catch {
            logger.warning("token revocation failed", metadata: ["error": "\(error)", "path": "\(built.path)"])
        }
    }
}
