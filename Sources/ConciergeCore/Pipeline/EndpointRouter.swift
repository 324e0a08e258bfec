/// Request path, routing: the first endpoint whose `match` fits method and path, else the
/// pass-through policy.
public struct EndpointRouter: Sendable {
    public let endpoints: [EndpointPolicy]

    public init(endpoints: [EndpointPolicy]) {
        self.endpoints = endpoints
    }

    public func route(method: String, path: String) -> EndpointPolicy {
        for endpoint in endpoints where endpoint.match.matches(method: method, path: path) {
            return endpoint
        }
        return .passThrough
    }
}
