import Foundation

/// The one masking function behind every log line (request lines, `curl` lines, signing
/// strings, batch and chain bodies): parameter and field values whose name is a credential
/// or an injected-token place, whole bodies of token requests, and literal secrets (tokens
/// in use, `${VAR}` values) wherever they appear.
public struct SecretRedactor: Sendable {
    /// Field names masked wherever they appear (form fields, JSON members at any depth,
    /// query params, header-like JSON members), compared case-insensitively.
    public static let credentialNames: Set<String> = [
        "password", "passwd", "secret", "client_secret", "appsecret", "refresh_token", "refreshtoken",
        "access_token", "accesstoken", "authorization", "cookie", "token",
    ]

    /// Lower-cased names whose values are masked.
    public let names: Set<String>

    /// - Parameter extraNames: the injected-token names, signing and capture field names.
    public init(extraNames: Set<String> = []) {
        names = Self.credentialNames.union(extraNames.map { $0.lowercased() })
    }

    public static let mask = "***"

    /// A `path?query` with the masked names' values replaced.
    public func redactTarget(_ target: String) -> String {
        guard let q = target.firstIndex(of: "?") else { return target }
        return String(target[...q]) + redactForm(String(target[target.index(after: q)...]))
    }

    /// An `a=1&b=2` text with the masked names' values replaced.
    public func redactForm(_ text: String) -> String {
        text.split(separator: "&", omittingEmptySubsequences: false).map { piece -> String in
            guard let eq = piece.firstIndex(of: "=") else { return String(piece) }
            let name = QueryString.decode(piece[..<eq]).lowercased()
            return names.contains(name) ? "\(piece[..<eq])=\(Self.mask)" : String(piece)
        }.joined(separator: "&")
    }

    /// A JSON value with the masked names' values replaced at any depth.
    public func redactJSON(_ value: JSONValue) -> JSONValue {
        switch value {
        case .object(let members):
            var out: [String: JSONValue] = [:]
            for (key, member) in members {
                out[key] = names.contains(key.lowercased()) ? .string(Self.mask) : redactJSON(member)
            }
            return .object(out)
        case .array(let items):
            return .array(items.map(redactJSON))
        default:
            return value
        }
    }

    /// A request body for a log line: JSON and form bodies with the masked names' values
    /// replaced; anything else shown only as its size.
    public func redactBody(_ bytes: some Collection<UInt8>, contentType: String?) -> String {
        if let json = JSONValue.parse(bytes) {
            return String(decoding: redactJSON(json).serializedBytes, as: UTF8.self)
        }
        let text = String(decoding: bytes, as: UTF8.self)
        let type = contentType?.lowercased() ?? ""
        if type.contains("x-www-form-urlencoded") || (type.isEmpty && text.contains("=") && !text.contains(where: \.isNewline)) {
            return redactForm(text)
        }
        return "<\(bytes.count) bytes>"
    }

    /// Replaces every occurrence of the literal secrets (4 characters or more) in a text.
    public static func scrub(_ text: String, literals: [String]) -> String {
        var out = text
        for secret in literals where secret.count >= 4 && out.contains(secret) {
            out = out.replacingOccurrences(of: secret, with: mask)
        }
        return out
    }
}
