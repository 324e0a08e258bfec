/// Request path, login guard: an endpoint with `login: required` is answered locally with
/// `not_logged_in` when there is no session; the upstream is never called.
public struct LoginGuard: Sendable {
    public init() {}

    public func admits(_ endpoint: EndpointPolicy, session: SessionTokens?) -> Bool {
        endpoint.login != .required || session != nil
    }
}
