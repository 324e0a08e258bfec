import Foundation
import NIOHTTP1

/// The HTTP request for a token call (`session.refresh` or `session.app_token`), built from
/// its configuration with `{refresh_token}` / `{access_token}` filled in: body as JSON or as
/// a form (RFC 6749 token endpoints take only forms), templated headers and query.
///
/// - Important: the body and query hold credentials (client secret, app secret, refresh
///   token). Never log them; log the path only.
public struct TokenRequest: Sendable, Equatable {
    public var method: String
    /// `path?query`, to append to the upstream's base URL.
    public var target: String
    public var headers: HTTPHeaders
    public var body: [UInt8]?
    /// Path only: the one part that may be logged.
    public var path: String

    public init(_ endpoint: ConciergeConfig.TokenEndpoint, refreshToken: String?, accessToken: String?) {
        let values = ["refresh_token": refreshToken ?? "", "access_token": accessToken ?? ""]
        method = endpoint.method
        path = Self.fill(endpoint.path, values, percentEncoded: true)
        var target = path
        let query = endpoint.query.map { Param($0.name, Self.fill($0.value, values)) }
        if !query.isEmpty {
            target += (target.contains("?") ? "&" : "?") + QueryString.encode(query)
        }
        self.target = target
        headers = ["Accept": "application/json"]
        var template = endpoint.body
        if endpoint.clientAuth == .post, let id = endpoint.clientID {
            var members: [String: JSONValue] = [:]
            if case .object(let existing)? = template { members = existing }
            members["client_id"] = .string(id)
            if let secret = endpoint.clientSecret { members["client_secret"] = .string(secret) }
            template = .object(members)
        }
        if let template {
            let filled = Self.fill(template, values)
            switch endpoint.encoding {
            case .json:
                headers.add(name: "Content-Type", value: "application/json")
                body = filled.serializedBytes
            case .form:
                headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
                var fields: [Param] = []
                if case .object(let members) = filled {
                    for name in members.keys.sorted() where members[name] != .null {
                        fields.append(Param(name, members[name]!.parameterText))
                    }
                }
                body = Array(QueryString.encode(fields).utf8)
            }
        }
        if endpoint.clientAuth == .basic, let id = endpoint.clientID {
            headers.replaceOrAdd(name: "Authorization", value: Self.basicCredentials(id: id, secret: endpoint.clientSecret ?? ""))
        }
        for header in endpoint.headers {
            let value = Self.fill(header.value, values)
            headers.replaceOrAdd(name: header.name, value: value)
        }
    }

    /// RFC 6749 §2.3.1: `Basic` over `urlencode(id) ":" urlencode(secret)` (form encoding).
    public static func basicCredentials(id: String, secret: String) -> String {
        func formEncode(_ text: String) -> String { QueryString.percentEncode(text).replacingOccurrences(of: "%20", with: "+") }
        let pair = formEncode(id) + ":" + formEncode(secret)
        return "Basic " + Data(pair.utf8).base64EncodedString()
    }

    static func fill(_ text: String, _ values: [String: String], percentEncoded: Bool = false) -> String {
        var out = text
        for (name, value) in values {
            out = out.replacingOccurrences(of: "{\(name)}", with: percentEncoded ? QueryString.percentEncode(value) : value)
        }
        return out
    }

    static func fill(_ value: JSONValue, _ values: [String: String]) -> JSONValue {
        switch value {
        case .string(let s): return .string(fill(s, values))
        case .array(let items): return .array(items.map { fill($0, values) })
        case .object(let members): return .object(members.mapValues { fill($0, values) })
        default: return value
        }
    }
}
