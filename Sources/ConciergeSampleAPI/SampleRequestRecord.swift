import ConciergeCore

/// What the sample API saw of one request (kept as the last request per path).
public struct SampleRequestRecord: Sendable, Equatable {
    /// HTTP method, e.g. `GET`.
    public var method: String
    /// Request path without the query.
    public var path: String
    /// Decoded query parameters in received order.
    public var query: [Param]
    /// Header fields keyed by lower-cased name; repeated fields are joined with `", "`.
    public var headers: [String: String]
    /// Raw body as UTF-8 text (empty for streamed uploads).
    public var body: String

    public init(method: String, path: String, query: [Param], headers: [String: String], body: String) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
    }

    /// The first query value named `name`, if any.
    public func queryValue(_ name: String) -> String? {
        query.first { $0.name == name }?.value
    }
}
