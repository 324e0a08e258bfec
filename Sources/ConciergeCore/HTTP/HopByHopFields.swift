import NIOHTTP1

/// The fields that belong to one connection and are never forwarded by a proxy (RFC 9110
/// §7.6.1), beside ``FieldList``, which reads the `Connection` field naming more of them.
public enum HopByHopFields {
    /// Hop-by-hop fields (RFC 9110 §7.6.1), and the proxy ones: told apart by their length
    /// first, as most names have none of these lengths.
    public static func contains(_ name: String) -> Bool {
        func named(_ lowercase: String) -> Bool { ASCIICase.equals(name, lowercase: lowercase) }
        switch name.utf8.count {
        case 2: return named("te")
        case 7: return named("trailer") || named("upgrade")
        case 10: return named("connection") || named("keep-alive")
        case 16: return named("proxy-connection")
        case 17: return named("transfer-encoding")
        case 18: return named("proxy-authenticate")
        case 19: return named("proxy-authorization")
        default: return false
        }
    }

    /// Copies end-to-end headers, dropping hop-by-hop ones, those `Connection` names and
    /// `extra` (lowercase names). Runs twice per exchange: one pass over the fields, names
    /// compared by bytes, ignoring ASCII case, without lowercased copies or sets. A `Connection`
    /// value of just `keep-alive` (the usual one) names only a field dropped anyway; the others
    /// (`close` names a field called `Close`, RFC 9110 §7.6.1) are read after the pass.
    public static func endToEnd(_ headers: HTTPHeaders, dropping extra: [String] = []) -> HTTPHeaders {
        let kept = endToEndFields(headers, dropping: extra)
        return kept.count == headers.count ? headers : HTTPHeaders(kept)
    }

    /// ``endToEnd(_:dropping:)`` as a list, for a caller that adds fields before wrapping it
    /// once: a list, because `HTTPHeaders.add` checks each name again, and `remove(name:)`
    /// rewrites the whole list per name.
    public static func endToEndFields(_ headers: HTTPHeaders, dropping extra: [String] = [], reserving more: Int = 0) -> [(String, String)] {
        var kept: [(String, String)] = []
        kept.reserveCapacity(headers.count + more)
        var naming: [String] = []
        for (name, value) in headers {
            if name.utf8.count == 10, ASCIICase.equals(name, lowercase: "connection") {
                if !ASCIICase.equals(value, lowercase: "keep-alive") { naming.append(value) }
                continue
            }
            if contains(name) || ASCIICase.equalsAny(name, lowercase: extra) { continue }
            kept.append((name, value))
        }
        if !naming.isEmpty { kept.removeAll { field in naming.contains { FieldList.lists(field.0, in: $0) } } }
        return kept
    }
}
