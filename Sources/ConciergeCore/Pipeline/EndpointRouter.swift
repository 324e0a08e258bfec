/// Request path, routing: the first endpoint whose `match` fits method and path, else the
/// pass-through policy.
public struct EndpointRouter: Sendable {
    public let endpoints: [EndpointPolicy]
    /// For requests no endpoint matches: ``EndpointPolicy/passThrough``, cached by HTTP rules
    /// with `cache: { mode: http }` at the top level.
    public let passThrough: EndpointPolicy

    public init(endpoints: [EndpointPolicy], passThrough: EndpointPolicy = .passThrough) {
        (self.endpoints, self.passThrough) = (endpoints, passThrough)
    }

    public func route(method: String, path: String) -> EndpointPolicy {
        for endpoint in endpoints where endpoint.match.matches(method: method, path: path) {
            return endpoint
        }
        return passThrough
    }
}
