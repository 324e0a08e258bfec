import ConciergeCore
import Hummingbird

/// Views of a request in the shapes the sample API reports them.
extension Request {
    /// Decoded query parameters, in order.
    var decodedQuery: [Param] {
        uri.query.map { QueryString.parse($0) } ?? []
    }

    /// Header fields keyed by lower-cased name, repeated fields joined with `", "`; includes
    /// `host` (which HTTPTypes keeps as the `:authority` pseudo-header).
    var lowercasedHeaders: [String: String] {
        var headers: [String: String] = [:]
        if let authority = head.authority {
            headers["host"] = authority
        }
        for field in self.headers {
            let name = field.name.canonicalName
            headers[name] = headers[name].map { "\($0), \(field.value)" } ?? field.value
        }
        return headers
    }
}
