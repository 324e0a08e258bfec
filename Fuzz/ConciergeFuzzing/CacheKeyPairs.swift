import ConciergeCore

extension FuzzTargets {
    /// The cache key over pairs of requests: two requests share a key exactly when the upstream
    /// sees the same request (the reference ``CacheKeyReference`` says what that is: query
    /// pairs in their order by name, the body's kind and content). Input: a target line, a
    /// content-type line, then the body (any bytes). The input's request is paired with
    /// variants of it: a byte of the body flipped, two neighbouring query pairs swapped, the
    /// query moved into a form body, a JSON string member unquoted, and an order of the query
    /// that keeps each name's pairs in theirs. Each key is also deterministic, the same read
    /// from the query's text as from its parsed params, and free of raw CR or LF.
    public static func cacheKey(_ data: [UInt8]) {
        let lines = data.split(separator: UInt8(ascii: "\n"), maxSplits: 2, omittingEmptySubsequences: false)
        let target = "/" + String(decoding: lines.first ?? [], as: UTF8.self)
        let contentType = lines.count > 1 ? String(decoding: lines[1], as: UTF8.self) : nil
        let body = lines.count > 2 ? Array(lines[2]) : []
        // What a listener can deliver: NIO's parser and the batch parser accept visible ASCII targets only.
        guard HTTPFieldSyntax.isOriginFormTarget(target) else { return }
        let first = CacheKeyReference(target: target, contentType: contentType, body: body)
        let key = first.key()
        guard key == first.key() else { preconditionFailure("cache key is not deterministic") }
        guard !key.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A }) else { preconditionFailure("raw CR/LF in a cache key") }
        for variant in first.variants() {
            let (sameRequest, sameKey) = (variant.identity == first.identity, variant.key() == key)
            guard sameRequest == sameKey else {
                preconditionFailure(sameKey ? "two different requests share the key \(key)" : "one request has two keys: \(key), \(variant.key())")
            }
        }
    }
}

/// A request as the `cachekey` target builds it, with a reference of what tells it from
/// another, written independently of the key's builder (only RFC 3986 normalisation of one
/// piece, ``QueryString``'s, is shared).
struct CacheKeyReference {
    let target: String
    let contentType: String?
    let body: [UInt8]
    static let excluded: Set<String> = ["timestamp", "a b", "x", "%", "é"]

    private var request: ProxyRequest {
        ProxyRequest(method: "POST", target: target, body: RequestBody.parse(body, contentType: contentType))
    }

    /// The key, made as the pipeline makes it (from the query's text), checked against the
    /// key made from the parsed params.
    func key() -> String {
        let request = self.request
        let viaParams = CacheKey.make(method: "POST", upstreamBaseURL: "http://u", path: request.path, params: request.query,
                                      body: request.body, excluding: Self.excluded, userID: "user 1", version: 1)
        guard let raw = request.rawQuery else { return viaParams }
        let viaRaw = CacheKey.make(method: "POST", upstreamBaseURL: "http://u", path: request.path, rawQuery: raw, body: request.body,
                                   excluding: ExcludedParams(Self.excluded), userID: "user 1", version: 1)
        guard viaParams == viaRaw else { preconditionFailure("the key read from the raw query differs from the parsed params' key") }
        return viaRaw
    }

    /// What the upstream sees, as far as the key goes.
    var identity: [String] {
        let request = self.request
        var parts = [request.path, "query"] + Self.stable(request.query.compactMap(Self.pair))
        switch request.body {
        case .empty: parts.append("no body")
        case .form(let params, _): parts += ["form"] + Self.stable(params.compactMap(Self.pair))
        case .json(let object):
            parts.append("json")
            parts += Self.stable(object.members.compactMap { member in
                guard !Self.excluded.contains(member.name) else { return nil }
                let literal = object.literal(of: member)
                let value: String
                if literal.first == UInt8(ascii: "\""), case .string(let text)? = JSONValue.parse(Array(literal)) {
                    value = "string " + text
                } else {
                    value = "literal " + String(decoding: literal, as: UTF8.self)
                }
                return (QueryString.percentEncode(member.name), value)
            })
        case .opaque(let bytes): parts += ["bytes", bytes.map { String($0) }.joined(separator: ",")]
        }
        return parts
    }

    /// A param's normalised name and value, or `nil` when excluded.
    private static func pair(_ param: Param) -> (String, String)? {
        guard !excluded.contains(param.name) else { return nil }
        guard let wire = param.wire else { return (QueryString.percentEncode(param.name), QueryString.percentEncode(param.value)) }
        var normalized: [UInt8] = []
        let equals = Array(wire.utf8).withUnsafeBufferPointer { QueryString.appendNormalizedPair($0, to: &normalized) }
        return (String(decoding: normalized[..<equals], as: UTF8.self), String(decoding: normalized[equals...], as: UTF8.self))
    }

    /// Pairs ordered by name, pairs of one name in their order.
    private static func stable(_ pairs: [(String, String)]) -> [String] {
        pairs.enumerated().sorted { a, b in
            a.element.0 != b.element.0 ? Array(a.element.0.utf8).lexicographicallyPrecedes(b.element.0.utf8) : a.offset < b.offset
        }.map { "\($0.element.0)=\($0.element.1)" }
    }

    /// Requests near this one: some the same to the upstream, most not.
    func variants() -> [CacheKeyReference] {
        var out: [CacheKeyReference] = []
        let (path, query) = target.firstIndex(of: "?").map { (String(target[..<$0]), String(target[target.index(after: $0)...])) }
            ?? (target, "")
        if !body.isEmpty {
            var flipped = body
            flipped[body.count / 2] ^= 0x01
            out.append(CacheKeyReference(target: target, contentType: contentType, body: flipped))
        }
        let pieces = query.split(separator: "&", omittingEmptySubsequences: false).map(String.init)
        for i in pieces.indices.dropLast() {
            var swapped = pieces
            swapped.swapAt(i, i + 1)
            out.append(CacheKeyReference(target: path + "?" + swapped.joined(separator: "&"), contentType: contentType, body: body))
        }
        if !query.isEmpty {
            // The order of names reversed, each name's pairs kept in theirs: the same request.
            let names = pieces.map { piece in QueryString.parse(piece).first.flatMap(Self.pair) }
            let regrouped = pieces.indices.sorted { a, b in
                let (x, y) = (names[a]?.0 ?? "", names[b]?.0 ?? "")
                return x != y ? Array(y.utf8).lexicographicallyPrecedes(x.utf8) : a < b
            }
            out.append(CacheKeyReference(target: path + "?" + regrouped.map { pieces[$0] }.joined(separator: "&"), contentType: contentType, body: body))
            out.append(CacheKeyReference(target: path, contentType: "application/x-www-form-urlencoded", body: Array(query.utf8)))
        }
        if case .json(let object) = request.body, let member = object.members.first(where: { object.literal(of: $0).first == UInt8(ascii: "\"") }) {
            let literal = object.literal(of: member)
            var unquoted = body
            unquoted.replaceSubrange(literal.startIndex..<literal.endIndex, with: literal.dropFirst().dropLast())
            out.append(CacheKeyReference(target: target, contentType: contentType, body: unquoted))
        }
        return out
    }
}
