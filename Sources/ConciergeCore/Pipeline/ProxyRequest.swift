import NIOHTTP1

/// One name/value parameter, decoded (not percent-encoded), and, for a parameter the client
/// sent, the pair exactly as it was written (`q=%D6%D0`): what is forwarded and what the cache
/// key normalises, so bytes that are not UTF-8 (GBK, `%FF`) reach the upstream unchanged and
/// keep separate entries. Changing either side drops the written form.
public struct Param: Sendable, Hashable {
    public var name: String { didSet { wire = nil } }
    public var value: String { didSet { wire = nil } }
    /// The pair as the client wrote it, while neither side changed.
    public private(set) var wire: String?

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }

    /// A parameter read from the client's text.
    init(_ name: String, _ value: String, wire: String) {
        self.name = name
        self.value = value
        self.wire = wire
    }

    /// Compares the decoded sides only (two GBK words both decode to U+FFFD: the written
    /// forms tell them apart where it matters, in the forwarded text and the cache key).
    public static func == (a: Param, b: Param) -> Bool { a.name == b.name && a.value == b.value }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(name)
        hasher.combine(value)
    }

    /// The pair as it is forwarded: the client's own text, or RFC 3986 encoded.
    public var encoded: String {
        if let wire { return wire }
        return QueryString.percentEncode(name) + "=" + QueryString.percentEncode(value)
    }
}

/// What a request body holds, as far as parameters go. Form and JSON bodies keep the client's
/// bytes and are edited in place, so what Concierge does not add reaches the upstream as sent.
public enum RequestBody: Sendable {
    /// No body.
    case empty
    /// `application/x-www-form-urlencoded` in UTF-8: the pairs, and the bytes as received
    /// (empty once a pair was replaced: the pairs are then joined again, each in its written form).
    case form([Param], original: [UInt8])
    /// A JSON object at the top level, as the client's text.
    case json(JSONObjectText)
    /// Anything else, passed through untouched: non-JSON or non-UTF-8 text included.
    case opaque([UInt8])

    /// Parses a buffered body according to its `Content-Type`.
    public static func parse(_ bytes: [UInt8], contentType: String?) -> RequestBody {
        guard !bytes.isEmpty else { return .empty }
        let type = contentType?.lowercased() ?? ""
        if type.hasPrefix("application/x-www-form-urlencoded") {
            // A form whose bytes are not UTF-8 cannot be read by name without loss: untouched.
            guard let text = String(validating: bytes, as: UTF8.self) else { return .opaque(bytes) }
            return .form(QueryString.parse(text), original: bytes)
        }
        if type.hasPrefix("application/json") || type.contains("+json"), let object = JSONObjectText(bytes) {
            return .json(object)
        }
        return .opaque(bytes)
    }

    /// Parameters the cache key and the signature see: form pairs or JSON top-level members.
    public var params: [Param] {
        switch self {
        case .empty, .opaque: return []
        case .form(let params, _): return params
        case .json(let object): return object.params
        }
    }

    public var bytes: [UInt8] {
        switch self {
        case .empty: return []
        case .form(let params, let original): return original.isEmpty ? Array(QueryString.encode(params).utf8) : original
        case .json(let object): return object.bytes
        case .opaque(let bytes): return bytes
        }
    }

    /// Sets a parameter (replacing one of that name) in a form or JSON body: a new one is
    /// appended to the client's text, a replaced one changes only its own value.
    /// - Returns: `false` for an opaque body, which cannot take parameters.
    @discardableResult
    public mutating func set(_ name: String, _ value: JSONValue, onlyIfAbsent: Bool = false) -> Bool {
        switch self {
        case .empty:
            self = .form([Param(name, value.parameterText)], original: [])
        case .form(var params, var original):
            let present = params.contains { $0.name == name }
            if onlyIfAbsent, present { return true }
            let param = Param(name, value.parameterText)
            if present {
                params.removeAll { $0.name == name }
                original = []
            } else if !original.isEmpty {
                if original.last != UInt8(ascii: "&") { original.append(UInt8(ascii: "&")) }
                original.append(contentsOf: param.encoded.utf8)
            }
            params.append(param)
            self = .form(params, original: original)
        case .json(var object):
            object.set(name, value, onlyIfAbsent: onlyIfAbsent)
            self = .json(object)
        case .opaque:
            return false
        }
        return true
    }

    public func value(of name: String) -> String? {
        switch self {
        case .form(let params, _): return params.first { $0.name == name }?.value
        case .json(let object): return object.value(of: name)?.parameterText
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
    public var path: String { didSet { pathAsReceived = false } }
    /// No step changed ``path``: with ``rawQuery``, the target is the received one as it was.
    private var pathAsReceived = true
    /// The query's parameters, decoded (``QueryString/parse(_:)``); changing them drops
    /// ``rawQuery``. While no step changed them they are read from ``rawQuery`` when asked
    /// for: a request whose steps never look at its parameters (the cache key reads
    /// ``rawQuery`` itself) parses nothing.
    public var query: [Param] {
        get { changedQuery ?? rawQuery.map { QueryString.parse(String($0)) } ?? [] }
        set {
            changedQuery = newValue
            rawQuery = nil
        }
    }
    /// The parameters once a step set them (or the memberwise initialiser gave them).
    private var changedQuery: [Param]?
    /// The query exactly as received, while no step changed a parameter.
    public private(set) var rawQuery: Substring?
    public var headers: HTTPHeaders
    public var body: RequestBody

    public init(method: String, path: String, query: [Param] = [], headers: HTTPHeaders = HTTPHeaders(), body: RequestBody = .empty) {
        self.method = method
        self.path = path
        self.changedQuery = query
        self.headers = headers
        self.body = body
    }

    /// Splits a request target (`/api/items?limit=10`) into path and query (decoded when asked for).
    public init(method: String, target: String, headers: HTTPHeaders = HTTPHeaders(), body: RequestBody = .empty) {
        (self.method, self.headers, self.body) = (method, headers, body)
        // The `?` found in the target's contiguous bytes (the listener's strings are native).
        let mark = target.utf8.withContiguousStorageIfAvailable { $0.firstIndex(of: UInt8(ascii: "?")) }
            ?? target.utf8.firstIndex(of: UInt8(ascii: "?")).map { target.utf8.distance(from: target.utf8.startIndex, to: $0) }
        if let mark {
            let q = target.utf8.index(target.utf8.startIndex, offsetBy: mark)
            path = String(target[..<q])
            rawQuery = target[target.utf8.index(after: q)...]
        } else {
            path = target
        }
    }

    /// Path and query as sent upstream: the client's query as received, or, once a step
    /// changed it, its pairs in their written form with Concierge's own appended.
    public var target: String {
        if let rawQuery {
            // `rawQuery` is a slice of the target as received (``init(method:target:headers:body:)``).
            return pathAsReceived ? rawQuery.base : path + "?" + rawQuery
        }
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
