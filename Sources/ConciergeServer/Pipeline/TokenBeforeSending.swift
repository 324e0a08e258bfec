import ConciergeCore
import Foundation

/// Step 6's first question before a request leaves: which token to send. The app token is
/// fetched on first need; a user token close to its expiry is renewed ahead
/// (`refresh_ahead`) so the upstream never sees it expire. A token whose known expiry has
/// passed is never sent: when it cannot be renewed the request is answered `unavailable`.
enum TokenBeforeSending {
    enum Decision: Sendable {
        case send(String?)
        /// Answer locally (not logged in, unavailable), with the reply's business code.
        case answer(ProxyReply, BusinessCode?)
    }

    nonisolated(nonsending) static func decide(_ p: PreparedRequest, refresher: TokenRefresher, session current: SessionTokens?) async -> Decision {
        if let token = withoutWaiting(p, refresher: refresher, session: current) { return .send(token) }
        guard let token = p.token else {
            // An app token not fetched yet.
            let outcome = await refresher.freshToken(replacing: nil, trace: p.trace)
            switch outcome {
            case .refreshed(let fresh): return .send(fresh)
            case .loggedOut: return notLoggedIn(p)
            case .unavailable, .throttled:
                return .answer(LocalReplies.tokenUnavailable(p.config, retryAfter: outcome.retryAfter), nil)
            }
        }
        // The current token needs renewal before it is sent (``withoutWaiting`` said so).
        guard let current else { return .send(token) }
        let now = refresher.clock.date
        let outcome = await refresher.freshToken(replacing: token, expirySignal: false, trace: p.trace)
        switch outcome {
        case .refreshed(let fresh): return .send(fresh)
        case .loggedOut: return notLoggedIn(p)
        case .unavailable, .throttled:
            // Still valid for a moment: try it. Past its expiry (or about to be) it is never sent.
            if current.hasExpired(at: now) {
                return .answer(LocalReplies.tokenUnavailable(p.config, retryAfter: outcome.retryAfter), nil)
            }
            return .send(token)
        }
    }

    /// The token to send when no wait is needed (it is there and needs no renewal before
    /// sending); `nil` when ``decide(_:refresher:session:)`` must wait (it starts with this).
    static func withoutWaiting(_ p: PreparedRequest, refresher: TokenRefresher, session current: SessionTokens?) -> String? {
        guard let token = p.token else { return nil }
        let config = p.config.settings
        guard let current, current.accessToken == token, config.session.tokenEndpoint != nil,
              current.needsRenewal(at: refresher.clock.date, ahead: config.session.refreshAhead)
        else { return token }
        return nil
    }

    private static func notLoggedIn(_ p: PreparedRequest) -> Decision {
        let (reply, code) = LocalReplies.notLoggedIn(p.config)
        return .answer(reply, code)
    }
}
