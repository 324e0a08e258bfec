/// Request path, token injection: puts the access token in every place `session.inject` names, replacing
/// whatever the client sent there.
public struct TokenInjector: Sendable {
    public let points: [InjectionPoint]
    /// The token goes in `Authorization`, replacing whatever the client sent there.
    public let replacesAuthorization: Bool

    public init(points: [InjectionPoint]) {
        self.points = points
        replacesAuthorization = points.contains {
            if case .header(let name, _) = $0 { ASCIICase.equals(name, lowercase: "authorization") } else { false }
        }
    }

    /// Query and body names that carry a token: excluded from cache keys, masked in logs.
    public var paramNames: Set<String> {
        var names = Set<String>()
        for point in points {
            switch point {
            case .query(let name): names.insert(name)
            case .body(let field): names.insert(field)
            case .header: break
            }
        }
        return names
    }

    public var headerNames: [String] {
        points.compactMap { if case .header(let name, _) = $0 { return name } else { return nil } }
    }

    /// Whether the client itself sent something in one of the token places.
    public func carriesToken(_ request: ProxyRequest) -> Bool {
        for point in points {
            switch point {
            case .query(let name): if request.query.contains(where: { $0.name == name }) { return true }
            case .header(let name, _): if request.headers.contains(name: name) { return true }
            case .body(let field): if request.body.value(of: field) != nil { return true }
            }
        }
        return false
    }

    public func inject(_ token: String, into request: inout ProxyRequest) {
        for point in points {
            switch point {
            case .query(let name):
                request.query.removeAll { $0.name == name }
                request.query.append(Param(name, token))
            case .header(let name, let format):
                request.headers.replaceOrAdd(name: name, value: format.replacingOccurrences(of: "{access_token}", with: token))
            case .body(let field):
                if request.paramsGoInQuery || !request.body.set(field, .string(token)) {
                    // An opaque body cannot take a field; fall back to the query.
                    request.query.removeAll { $0.name == field }
                    request.query.append(Param(field, token))
                }
            }
        }
    }
}
