import ConciergeCore
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// Refreshes the access token, one refresh at a time however many requests wait
/// (single flight). The refresh request goes straight to the upstream, never through the
/// pipeline, so a refresh can never trigger another refresh.
public actor TokenRefresher {
    public enum Outcome: Sendable, Equatable {
        /// Replay with this token.
        case refreshed(String)
        /// No session any more: answer `not_logged_in`.
        case loggedOut
    }

    private let session: SessionState
    private let client: UpstreamClient
    private let runtime: Runtime
    private let stats: ProxyStats
    private let events: EventBus
    private let logger: Logger
    private var inFlight: Task<Outcome, Never>?

    public init(session: SessionState, client: UpstreamClient, runtime: Runtime, stats: ProxyStats, events: EventBus, logger: Logger) {
        self.session = session
        self.client = client
        self.runtime = runtime
        self.stats = stats
        self.events = events
        self.logger = logger
    }

    /// A token newer than `staleToken`: the current one if another request already
    /// refreshed, else the result of the one refresh in flight (started if none is).
    public func freshToken(replacing staleToken: String?) async -> Outcome {
        guard let current = session.current else { return .loggedOut }
        if current.accessToken != staleToken { return .refreshed(current.accessToken) }
        if let inFlight { return await inFlight.value }
        let generation = session.generation
        let task = Task { await self.performRefresh(current, generation: generation) }
        inFlight = task
        let outcome = await task.value
        inFlight = nil
        return outcome
    }

    private func performRefresh(_ tokens: SessionTokens, generation: Int) async -> Outcome {
        let (rc, environment) = runtime.snapshot
        guard let refresh = rc.config.session.refresh, let refreshToken = tokens.refreshToken else {
            logger.warning("token expired and no refresh is possible; dropping the session",
                           metadata: ["reason": "\(rc.config.session.refresh == nil ? "no session.refresh configured" : "no refresh token")"])
            await drop(tokens, reason: "refresh_failed")
            return .loggedOut
        }
        stats.increment(.refreshes)
        let upstreamName = refresh.upstream ?? environment
        guard let upstream = rc.config.upstream(named: upstreamName) else { return .loggedOut }
        var headers = HTTPHeaders()
        headers.add(name: "Accept", value: "application/json")
        var body: UpstreamRequest.Body = .none
        if let template = refresh.body {
            let filled = Self.fill(template, refreshToken: refreshToken, accessToken: tokens.accessToken)
            headers.add(name: "Content-Type", value: "application/json")
            body = .bytes(ByteBuffer(bytes: filled.serializedBytes))
        }
        let path = refresh.path.replacingOccurrences(of: "{refresh_token}", with: QueryString.percentEncode(refreshToken))
        let request = UpstreamRequest(method: refresh.method, url: upstream.baseURL + path, headers: headers, body: body, timeout: refresh.timeout)
        let reason: String
        do {
            let response = try await client.send(request, maxBody: rc.config.limits.maxBodyBytes)
            let json = JSONValue.parse(response.body.readableBytesView)
            if case .success = rc.envelope.classify(json), let json,
               let access = json[path: refresh.accessToken]?.parameterText, !access.isEmpty {
                let rotated = refresh.refreshToken.flatMap { json[path: $0]?.parameterText } ?? refreshToken
                let newTokens = SessionTokens(accessToken: access, refreshToken: rotated, userID: tokens.userID)
                if try await session.replace(ifGeneration: generation, with: newTokens) {
                    logger.info("access token refreshed", metadata: ["user": "\(tokens.userID ?? "-")"])
                    events.publish("session.refreshed", ["user": tokens.userID.map(JSONValue.string) ?? .null])
                    return .refreshed(access)
                }
                // A logout or a new login happened meanwhile: it wins.
                if let now = session.current { return .refreshed(now.accessToken) }
                return .loggedOut
            }
            reason = json == nil ? "refresh reply is not JSON (HTTP \(response.status))"
                : "refresh reply has no success code or no token at \(refresh.accessToken)"
        } catch let failure as UpstreamFailure {
            reason = "\(failure)"
        } catch {
            reason = "\(error)"
        }
        logger.warning("token refresh failed; dropping the session", metadata: ["reason": "\(reason)"])
        await drop(tokens, reason: "refresh_failed")
        return .loggedOut
    }

    private func drop(_ tokens: SessionTokens, reason: String) async {
        if (try? await session.clear(ifAccessToken: tokens.accessToken)) != nil {
            stats.increment(.logouts)
            events.publish("session.logout", ["user": tokens.userID.map(JSONValue.string) ?? .null, "reason": .string(reason)])
        }
    }

    /// Replaces `{refresh_token}` / `{access_token}` in the string values of the body template.
    static func fill(_ value: JSONValue, refreshToken: String, accessToken: String) -> JSONValue {
        switch value {
        case .string(let s):
            return .string(s.replacingOccurrences(of: "{refresh_token}", with: refreshToken)
                .replacingOccurrences(of: "{access_token}", with: accessToken))
        case .array(let items): return .array(items.map { fill($0, refreshToken: refreshToken, accessToken: accessToken) })
        case .object(let members): return .object(members.mapValues { fill($0, refreshToken: refreshToken, accessToken: accessToken) })
        default: return value
        }
    }
}
