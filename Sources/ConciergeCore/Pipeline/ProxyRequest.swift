import NIOHTTP1

/// One name/value parameter, decoded (not percent-encoded).
public struct Param: Sendable, Hashable {
    public var name: String
    public var value: String

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }
}

/// What a request body holds, as far as parameters go.
public enum RequestBody: Sendable {
    /// No body.
    case empty
    /// `application/x-www-form-urlencoded`.
    case form([Param])
    /// A JSON object at the top level.
    case json([String: JSONValue], original: [UInt8])
    /// Anything else, passed through untouched.
    case opaque([UInt8])

    /// Parses a buffered body according to its `Content-Type`.
    public static func parse(_ bytes: [UInt8], contentType: String?) -> RequestBody {
        guard !bytes.isEmpty else { return .empty }
        let type = contentType?.lowercased() ?? ""
        if type.hasPrefix("application/x-www-form-urlencoded") {
            return .form(QueryString.parse(String(decoding: bytes, as: UTF8.self)))
        }
        if type.hasPrefix("application/json") || type.contains("+json") {
            if case .object(let members)? = JSONValue.parse(bytes) { return .json(members, original: bytes) }
        }
        return .opaque(bytes)
    }

    /// Parameters the cache key and the signature see: form pairs or JSON top-level members.
    public var params: [Param] {
        switch self {
        case .empty, .opaque: return []
        case .form(let params): return params
        case .json(let members, _): return members.map { Param($0.key, $0.value.parameterText) }
        }
    }

    public var bytes: [UInt8] {
        switch self {
        case .empty: return []
        case .form(let params): return Array(QueryString.encode(params).utf8)
        case .json(let members, let original):
            return original.isEmpty ? JSONValue.object(members).serializedBytes : original
        case .opaque(let bytes): return bytes
        }
    }

    /// Sets a parameter (replacing one of that name) in a form or JSON body.
    /// - Returns: `false` for an opaque body, which cannot take parameters.
    @discardableResult
    public mutating func set(_ name: String, _ value: JSONValue, onlyIfAbsent: Bool = false) -> Bool {
        switch self {
        case .empty:
            self = .form([Param(name, value.parameterText)])
        case .form(var params):
            if onlyIfAbsent, params.contains(where: { $0.name == name }) { return true }
            params.removeAll { $0.name == name }
            params.append(Param(name, value.parameterText))
            self = .form(params)
        case .json(var members, _):
            if onlyIfAbsent, members[name] != nil { return true }
            members[name] = value
            self = .json(members, original: [])
        case .opaque:
            return false
        }
        return true
    }

    public func value(of name: String) -> String? {
        switch self {
        case .form(let params): return params.first { $0.name == name }?.value
        case .json(let members, _): return members[name]?.parameterText
        default: return nil
        }
    }

    public var contentType: String? {
        switch self {
        case .form: return "application/x-www-form-urlencoded"
        case .json: return "application/json"
        default: return nil
        }
    }
}

/// A client request as the pipeline sees it, before and after the rewriting steps.
public struct ProxyRequest: Sendable {
    public var method: String
    /// The path as received (still percent-encoded), without the query.
    public var path: String
    public var query: [Param]
    public var headers: HTTPHeaders
    public var body: RequestBody

    public init(method: String, path: String, query: [Param] = [], headers: HTTPHeaders = HTTPHeaders(), body: RequestBody = .empty) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
    }

    /// Splits a request target (`/api/items?limit=10`) into path and decoded query.
    public init(method: String, target: String, headers: HTTPHeaders = HTTPHeaders(), body: RequestBody = .empty) {
        if let q = target.utf8.firstIndex(of: UInt8(ascii: "?")) {
            self.init(method: method, path: String(target[..<q]),
                      query: QueryString.parse(String(target[target.utf8.index(after: q)...])), headers: headers, body: body)
        } else {
            self.init(method: method, path: target, headers: headers, body: body)
        }
    }

    /// Path and re-encoded query as sent upstream.
    public var target: String {
        guard !query.isEmpty else { return path }
        let encoded = QueryString.encode(query)
        var target = TextBuilder(capacity: path.utf8.count + 1 + encoded.utf8.count)
        target.append(path)
        target.append("?" as StaticString)
        target.append(encoded)
        return target.text
    }

    /// Whether parameters go in the query (GET/HEAD/DELETE or an opaque body) or the body.
    public var paramsGoInQuery: Bool {
        switch method {
        case "GET", "HEAD", "DELETE", "OPTIONS": return true
        default:
            if case .opaque = body { return true }
            return false
        }
    }

    /// Sets a parameter where parameters go for this request.
    public mutating func setParam(_ name: String, _ value: String, onlyIfAbsent: Bool = false) {
        if paramsGoInQuery {
            if onlyIfAbsent, query.contains(where: { $0.name == name }) { return }
            query.removeAll { $0.name == name }
            query.append(Param(name, value))
        } else {
            body.set(name, .string(value), onlyIfAbsent: onlyIfAbsent)
        }
    }
}
