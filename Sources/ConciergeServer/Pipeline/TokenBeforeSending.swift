import ConciergeCore
import Foundation

/// Step 6's first question before a request leaves: which token to send. The app token is
/// fetched on first need; a user token close to its expiry is renewed ahead
/// (`refresh_ahead`) so the upstream never sees it expire.
enum TokenBeforeSending {
    enum Decision: Sendable {
        case send(String?)
        /// Answer locally (not logged in, unavailable), with the reply's business code.
        case answer(ProxyReply, BusinessCode?)
    }

    nonisolated(nonsending) static func decide(_ p: PreparedRequest, refresher: TokenRefresher, session current: SessionTokens?) async -> Decision {
        let config = p.config.config
        guard let token = p.token else {
            // An app token not fetched yet.
            switch await refresher.freshToken(replacing: nil) {
            case .refreshed(let fresh): return .send(fresh)
            case .loggedOut: return notLoggedIn(p)
            case .unavailable, .throttled: return .answer(LocalReplies.unavailable(p.config), nil)
            }
        }
        guard let current, current.accessToken == token, config.session.tokenEndpoint != nil,
              current.needsRenewal(at: Date(), ahead: config.session.refreshAhead)
        else { return .send(token) }
        switch await refresher.freshToken(replacing: token) {
        case .refreshed(let fresh): return .send(fresh)
        case .loggedOut: return notLoggedIn(p)
        case .unavailable, .throttled: return .send(token)  // still valid for a moment: try it
        }
    }

    private static func notLoggedIn(_ p: PreparedRequest) -> Decision {
        let (reply, code) = LocalReplies.notLoggedIn(p.config)
        return .answer(reply, code)
    }
}
