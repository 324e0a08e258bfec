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
    /// `extra` (lowercase names). Runs twice per exchange: names are compared by bytes,
    /// ignoring ASCII case, without lowercased copies, sets or a list of the `Connection`
    /// names (usually `keep-alive` or `close`, hop-by-hop anyway).
    public static func endToEnd(_ headers: HTTPHeaders, dropping extra: [String] = []) -> HTTPHeaders {
        var connection: [String] = []
        for (name, value) in headers where name.utf8.count == 10 && ASCIICase.equals(name, lowercase: "connection") {
            connection.append(value)
        }
        // Built as a list, then wrapped: `HTTPHeaders.add` checks each name again, and
        // `remove(name:)` rewrites the whole list per name.
        var kept: [(String, String)] = []
        kept.reserveCapacity(headers.count)
        for (name, value) in headers
        where !contains(name) && !ASCIICase.equalsAny(name, lowercase: extra) && !connection.contains(where: { FieldList.lists(name, in: $0) }) {
            kept.append((name, value))
        }
        return kept.count == headers.count ? headers : HTTPHeaders(kept)
    }
}
