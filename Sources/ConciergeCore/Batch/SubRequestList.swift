import Foundation

/// One sub-request of a batch or one step of a chain, as the client described it
/// (templates not yet resolved).
public struct SubRequest: Sendable {
    public var id: String
    public var method: String
    public var path: JSONValue
    public var headers: [String: JSONValue]
    public var body: JSONValue?

    /// The headers as sent without templates (batch), each checked as an RFC 9110 field.
    public func literalHeaders() throws(SubRequestError) -> [(String, String)] {
        var out: [(String, String)] = []
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) {
            let text = value.parameterText
            if let problem = HTTPFieldSyntax.problem(name: name, value: text) { throw SubRequestError("request '\(id)': headers: \(problem)") }
            out.append((name, text))
        }
        return out
    }
}

/// Why a batch or chain body is refused (400 `{"error": message}`).
public struct SubRequestError: Error, Sendable, Equatable {
    public var message: String

    public init(_ message: String) {
        self.message = message
    }
}

/// The body of `POST /_concierge/batch` (`requests`) or `/_concierge/chain` (`steps`),
/// parsed and checked: ids unique, methods and header names tokens, header values field
/// values (after templates, for chains, see ``ChainTemplate``), at most ``maxRequests``.
public struct SubRequestList: Sendable {
    public static let maxRequests = 100
    /// Paths under this prefix are Concierge's own and cannot be nested.
    public static let ownPrefix = "/_concierge/"

    public var mode: String?
    public var requests: [SubRequest]

    public static func parse(_ bytes: some Collection<UInt8>, listKey: String) throws(SubRequestError) -> SubRequestList {
        guard let json = JSONValue.parse(bytes), case .object(let top) = json else {
            throw SubRequestError("body must be a JSON object")
        }
        for key in top.keys.sorted() where ![listKey, "mode"].contains(key) {
            throw SubRequestError("unknown field '\(HTTPFieldSyntax.printable(key))'")
        }
        var mode: String? = nil
        if let m = top["mode"] {
            guard case .string(let s) = m, ["all", "fail_fast"].contains(s), listKey == "requests" else {
                throw SubRequestError(listKey == "requests" ? "mode must be \"all\" or \"fail_fast\"" : "unknown field 'mode'")
            }
            mode = s
        }
        guard case .array(let items)? = top[listKey] else { throw SubRequestError("'\(listKey)' must be a list") }
        guard !items.isEmpty else { throw SubRequestError("'\(listKey)' is empty") }
        guard items.count <= maxRequests else { throw SubRequestError("too many requests: \(items.count) (at most \(maxRequests))") }
        var requests: [SubRequest] = []
        var ids = Set<String>()
        for (i, item) in items.enumerated() {
            requests.append(try subRequest(item, at: "\(listKey)[\(i)]", ids: &ids))
        }
        return SubRequestList(mode: mode, requests: requests)
    }

    static func subRequest(_ item: JSONValue, at: String, ids: inout Set<String>) throws(SubRequestError) -> SubRequest {
        guard case .object(let fields) = item else { throw SubRequestError("\(at) must be an object") }
        for key in fields.keys.sorted() where !["id", "method", "path", "headers", "body"].contains(key) {
            throw SubRequestError("\(at): unknown field '\(HTTPFieldSyntax.printable(key))'")
        }
        guard case .string(let id)? = fields["id"], !id.isEmpty else { throw SubRequestError("\(at).id must be a non-empty string") }
        guard ids.insert(id).inserted else { throw SubRequestError("\(at).id: duplicate id '\(HTTPFieldSyntax.printable(id))'") }
        var method = "GET"
        if let m = fields["method"] {
            guard case .string(let s) = m, HTTPFieldSyntax.isToken(s) else { throw SubRequestError("\(at).method must be an HTTP method") }
            method = s.uppercased()
        }
        guard let path = fields["path"], case .string(let p) = path, p.hasPrefix("/") else {
            throw SubRequestError("\(at).path must be a string starting with /")
        }
        guard HTTPFieldSyntax.isOriginFormTarget(p) else {
            throw SubRequestError("\(at).path: spaces and control characters must be percent-encoded")
        }
        if p.hasPrefix(ownPrefix) { throw SubRequestError("\(at).path: \(ownPrefix) routes cannot be nested") }
        var headers: [String: JSONValue] = [:]
        if let h = fields["headers"] {
            guard case .object(let hs) = h else { throw SubRequestError("\(at).headers must be an object") }
            for (name, value) in hs {
                if !HTTPFieldSyntax.isToken(name) {
                    throw SubRequestError("\(at).headers: invalid header name '\(HTTPFieldSyntax.printable(name))' (must be an RFC 9110 token)")
                }
                switch value {
                case .object, .array: throw SubRequestError("\(at).headers.\(name) must be a string, number or bool")
                default: break
                }
            }
            headers = hs
        }
        return SubRequest(id: id, method: method, path: path, headers: headers, body: fields["body"])
    }
}

/// `{{stepId.path.into.body}}` templates of chain steps: a whole-string template
/// keeps the JSON type of the value; in a path the text is percent-encoded.
public enum ChainTemplate {
    /// Every `{{...}}` reference in the strings of some values.
    public static func references(in values: [JSONValue]) -> [String] {
        var out: [String] = []
        func walk(_ v: JSONValue) {
            switch v {
            case .string(let s):
                var rest = s[...]
                while let open = rest.range(of: "{{"), let close = rest[open.upperBound...].range(of: "}}") {
                    out.append(rest[open.upperBound..<close.lowerBound].trimmingCharacters(in: .whitespaces))
                    rest = rest[close.upperBound...]
                }
            case .array(let items): items.forEach(walk)
            case .object(let members): members.values.forEach(walk)
            default: break
            }
        }
        values.forEach(walk)
        return out
    }

    /// Checks that every template of every step names an earlier step.
    public static func checkReferences(_ steps: [SubRequest]) throws(SubRequestError) {
        var earlier = Set<String>()
        for step in steps {
            for reference in references(in: [step.path, .object(step.headers), step.body ?? .null]) {
                let stepID = String(reference.split(separator: ".", maxSplits: 1).first ?? "")
                guard earlier.contains(stepID) else {
                    throw SubRequestError("step '\(step.id)': template {{\(reference)}} names no earlier step")
                }
            }
            earlier.insert(step.id)
        }
    }

    /// A step with its templates resolved against earlier steps' bodies; header values are
    /// checked as field values once resolved.
    public static func resolve(_ step: SubRequest, _ bodies: [String: JSONValue]) throws(SubRequestError) -> (path: String, headers: [(String, String)], body: JSONValue?) {
        do throws(SubRequestError) {
            let path = try resolve(step.path, bodies, encodeForPath: true).parameterText
            guard HTTPFieldSyntax.isOriginFormTarget(path) else {
                throw SubRequestError("path: spaces and control characters must be percent-encoded")
            }
            var headers: [(String, String)] = []
            for (name, value) in step.headers.sorted(by: { $0.key < $1.key }) {
                let text = try resolve(value, bodies, encodeForPath: false).parameterText
                if let problem = HTTPFieldSyntax.problem(name: name, value: text) { throw SubRequestError("headers: \(problem)") }
                headers.append((name, text))
            }
            let body = try step.body.map { (b) throws(SubRequestError) in try resolve(b, bodies, encodeForPath: false) }
            return (path, headers, body)
        } catch {
            throw SubRequestError("step '\(step.id)': \(error.message)")
        }
    }

    /// Substitutes templates; a string that is exactly one template keeps the value's JSON type.
    public static func resolve(_ value: JSONValue, _ bodies: [String: JSONValue], encodeForPath: Bool) throws(SubRequestError) -> JSONValue {
        switch value {
        case .string(let s):
            guard s.contains("{{") else { return value }
            let trimmed = s.trimmingCharacters(in: .whitespaces)
            if !encodeForPath, trimmed.hasPrefix("{{"), trimmed.hasSuffix("}}"), trimmed.components(separatedBy: "{{").count == 2 {
                return try lookup(String(trimmed.dropFirst(2).dropLast(2)).trimmingCharacters(in: .whitespaces), bodies)
            }
            var out = ""
            var rest = s[...]
            while let open = rest.range(of: "{{"), let close = rest[open.upperBound...].range(of: "}}") {
                out += rest[..<open.lowerBound]
                let reference = rest[open.upperBound..<close.lowerBound].trimmingCharacters(in: .whitespaces)
                let text = try lookup(reference, bodies).parameterText
                out += encodeForPath ? QueryString.percentEncode(text) : text
                rest = rest[close.upperBound...]
            }
            out += rest
            return .string(out)
        case .array(let items):
            var out: [JSONValue] = []
            for item in items { out.append(try resolve(item, bodies, encodeForPath: encodeForPath)) }
            return .array(out)
        case .object(let members):
            var out: [String: JSONValue] = [:]
            for (k, v) in members { out[k] = try resolve(v, bodies, encodeForPath: encodeForPath) }
            return .object(out)
        default:
            return value
        }
    }

    static func lookup(_ reference: String, _ bodies: [String: JSONValue]) throws(SubRequestError) -> JSONValue {
        let parts = reference.split(separator: ".", maxSplits: 1).map(String.init)
        guard let first = parts.first, let body = bodies[first] else { throw SubRequestError("unknown template path {{\(reference)}}") }
        guard let value = body[path: parts.count > 1 ? parts[1] : ""] else {
            throw SubRequestError("unknown template path {{\(reference)}}: no such value in step '\(first)' body")
        }
        return value
    }
}
