/// RFC 3986 percent-encoding and `application/x-www-form-urlencoded` parsing.
public enum QueryString {
    /// Splits `a=1&b=x%20y` into decoded pairs (`+` is a space, as in forms), each keeping
    /// its written form (``Param/wire``).
    public static func parse(_ text: String) -> [Param] {
        guard !text.isEmpty else { return [] }
        var text = text
        // One pass over the bytes (`&` and `=` are ASCII): every cacheable request parses its query.
        return text.withUTF8 { bytes in
            var out: [Param] = []
            // One allocation for the list, not one per doubling.
            var pieces = 1
            for byte in bytes where byte == UInt8(ascii: "&") { pieces += 1 }
            out.reserveCapacity(pieces)
            forEachPair(bytes) { start, equals, end in
                let wire = String(decoding: bytes[start..<end], as: UTF8.self)
                let value = equals < end ? decode(bytes[(equals + 1)..<end]) : ""
                out.append(Param(decode(bytes[start..<equals]), value, wire: wire))
            }
            return out
        }
    }

    /// ``decode(_:)`` of a piece of a valid UTF-8 text cut at ASCII delimiters.
    private static func decode(_ piece: Slice<UnsafeBufferPointer<UInt8>>) -> String {
        guard piece.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "+") }) else {
            return String(decoding: piece, as: UTF8.self)
        }
        return decode(String(decoding: piece, as: UTF8.self))
    }

    /// Joins pairs as `k=v&k=v` in the given order: each in the client's written form when it
    /// has one, else each side percent-encoded per RFC 3986.
    public static func encode(_ params: [Param]) -> String {
        var out = TextBuilder(capacity: params.reduce(0) { $0 + ($1.wire?.utf8.count ?? $1.name.utf8.count + $1.value.utf8.count + 1) + 1 })
        for (i, param) in params.enumerated() {
            if i > 0 { out.append("&" as StaticString) }
            if let wire = param.wire {
                out.append(wire)
            } else {
                out.append(percentEncode(param.name))
                out.append("=" as StaticString)
                out.append(percentEncode(param.value))
            }
        }
        return out.text
    }

    /// Percent-decodes, treating `+` as a space; malformed escapes are kept literally.
    public static func decode<S: StringProtocol>(_ text: S) -> String {
        guard text.utf8.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "+") }) else { return String(text) }
        let utf8 = Array(text.utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count)
        var i = 0
        while i < utf8.count {
            let b = utf8[i]
            if b == UInt8(ascii: "+") {
                bytes.append(UInt8(ascii: " "))
            } else if b == UInt8(ascii: "%"), i + 2 < utf8.count, let h = hex(utf8[i + 1]), let l = hex(utf8[i + 2]) {
                bytes.append(h << 4 | l)
                i += 2
            } else {
                bytes.append(b)
            }
            i += 1
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    private static let hexDigits = Array("0123456789ABCDEF".utf8)

    /// RFC 3986: unreserved `A–Z a–z 0–9 - . _ ~` kept, every other UTF-8 byte as `%XX`.
    public static func percentEncode(_ text: String) -> String {
        var needs = false
        for b in text.utf8 where !isUnreserved(b) { needs = true; break }
        if !needs { return text }
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count * 3)
        appendPercentEncoded(text, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Unreserved or reserved (RFC 3986 §2.2–2.3): what a URI may hold as it is. One bit a
    /// byte below 0x80, in two constant masks (bytes 0–63, 64–127: a test per byte of every
    /// cache key's query, where a switch cost several comparisons); `QueryStringTests` checks
    /// them against the two sets.
    @inline(__always)
    static func isURIByte(_ b: UInt8) -> Bool {
        b < 0x80 && (b < 0x40 ? 0xAFFF_FFDA_0000_0000 as UInt64 : 0x47FF_FFFE_AFFF_FFFF as UInt64) >> UInt64(b & 0x3F) & 1 != 0
    }

    @inline(__always)
    static func isUnreserved(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }

    /// The canonical parameter string shared by cache keys and signatures: encoded pairs
    /// sorted by encoded name, then encoded value, joined as `k=v&k=v`.
    public static func canonical<S: Sequence>(_ params: S) -> String where S.Element == Param {
        // Encoded text is ASCII, where String order is byte order (and `<` compares ASCII
        // strings as bytes, without the per-byte iteration of a UTF-8 view).
        let pairs = params.map { (percentEncode($0.name), percentEncode($0.value)) }.sorted { a, b in
            a.0 != b.0 ? a.0 < b.0 : a.1 < b.1
        }
        return joined(pairs)
    }

    /// The cache key's parameter string: pairs sorted by encoded name only, stably (pairs of one
    /// name keep their order: `a=2&a=1` is not `a=1&a=2`, the upstream may read the last one),
    /// each in its written form normalised only where RFC 3986 §6.2.2 calls two forms
    /// equivalent (``appendNormalized(_:to:)``), so `%FF` and `%FE`, or two GBK words, stay apart.
    public static func keyCanonical<S: Sequence>(_ params: S) -> String where S.Element == Param {
        var out = TextBuilder(capacity: 64)
        writeKeyCanonical(Array(params), into: &out)
        return out.text
    }

    /// ``keyCanonical(_:)`` written straight into a key being built, leaving out the params
    /// named in `excluding`. Each kept pair is normalised (or percent-encoded) into one scratch
    /// buffer and the pairs are ordered by their names' bytes (``KeyPairs``): every piece is
    /// ASCII, where String order is byte order. No string per name and value, no filtered copy
    /// of the list, and a name is hashed against `excluding` only when some excluded name has its length.
    static func writeKeyCanonical(_ params: [Param], excluding: Set<String> = [], into out: inout TextBuilder) {
        writeKeyCanonical(params, excluding: ExcludedParams(excluding), into: &out)
    }

    static func writeKeyCanonical(_ params: [Param], excluding excluded: ExcludedParams, into out: inout TextBuilder) {
        var pairs = KeyPairs(scratch: params.reduce(0) {
            $0 + ($1.wire?.utf8.count ?? 3 * ($1.name.utf8.count + $1.value.utf8.count)) + 8
        }, pairs: params.count)
        for param in params where !excluded.excludes(param.name) {
            if let wire = param.wire {
                wire.utf8.withContiguousStorageIfAvailable { pairs.add(wire: $0) }
                    ?? Array(wire.utf8).withUnsafeBufferPointer { pairs.add(wire: $0) }
            } else {
                pairs.add(name: param.name, value: param.value)
            }
        }
        pairs.write(into: &out)
    }

    /// ``writeKeyCanonical(_:excluding:into:)`` of the pairs ``parse(_:)`` reads from
    /// `rawQuery`, read from its bytes: no parameter list, no string per name and value.
    /// Pairs that normalisation leaves as they are (URI bytes only, no `%`) are ordered and
    /// written from the text itself (``writeUnchanged(_:excluding:into:)``).
    static func writeKeyCanonical(rawQuery: Substring, excluding: ExcludedParams, into out: inout TextBuilder) {
        var raw = rawQuery
        raw.withUTF8 { bytes in
            if writeUnchanged(bytes, excluding: excluding, into: &out) { return }
            var pieces = 1
            for byte in bytes where byte == UInt8(ascii: "&") { pieces += 1 }
            var pairs = KeyPairs(scratch: bytes.count + 8 * pieces, pairs: pieces)
            forEachPair(bytes) { start, equals, end in
                let pair = UnsafeBufferPointer(rebasing: bytes[start..<end])
                if !excluding.excludes(written: UnsafeBufferPointer(rebasing: bytes[start..<equals])) { pairs.add(wire: pair) }
            }
            pairs.write(into: &out)
        }
    }

    /// Each non-empty `&`-separated piece of a query as written, as ``parse(_:)`` splits it:
    /// where it starts, where its first `=` is (or its end, for none) and where it ends.
    private static func forEachPair(_ bytes: UnsafeBufferPointer<UInt8>, _ body: (_ start: Int, _ equals: Int, _ end: Int) -> Void) {
        var start = 0
        while start < bytes.count {
            var end = start
            var eq: Int?
            while end < bytes.count, bytes[end] != UInt8(ascii: "&") {
                if eq == nil, bytes[end] == UInt8(ascii: "=") { eq = end }
                end += 1
            }
            if end > start { body(start, eq ?? end, end) }
            start = end + 1
        }
    }

    /// The most pairs ``writeUnchanged(_:excluding:into:)`` orders on the stack.
    private static let unchangedPairsLimit = 32

    /// Writes the kept pairs of `bytes` in canonical order straight from the text, when every
    /// byte is one normalisation leaves as it is (URI bytes, no `%`) and there are at most
    /// ``unchangedPairsLimit`` pairs: their places kept on the stack, ordered by insertion (a
    /// query has a few pairs, often in order already). `false`, with nothing written, otherwise.
    private static func writeUnchanged(_ bytes: UnsafeBufferPointer<UInt8>, excluding: ExcludedParams, into out: inout TextBuilder) -> Bool {
        var pieces = 1
        for byte in bytes {
            if byte == UInt8(ascii: "&") {
                pieces += 1
            } else if byte == UInt8(ascii: "%") || !isURIByte(byte) {
                return false
            }
        }
        guard pieces <= unchangedPairsLimit else { return false }
        /// A pair's place in `bytes`: the name is `start..<equals`, the value after the `=` up to `end`.
        struct Place {
            var start: Int
            var equals: Int
            var end: Int
        }
        return withUnsafeTemporaryAllocation(of: Place.self, capacity: pieces) { places -> Bool in
            func name(_ p: Place) -> UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(rebasing: bytes[p.start..<p.equals]) }
            func value(_ p: Place) -> UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(rebasing: bytes[min(p.equals + 1, p.end)..<p.end]) }
            // By name only: pairs of one name keep their order (insertion moves only past greater names).
            func before(_ a: Place, _ b: Place) -> Bool { KeyPairs.order(name(a), name(b)) < 0 }
            var count = 0
            forEachPair(bytes) { start, equals, end in
                let place = Place(start: start, equals: equals, end: end)
                guard !excluding.excludes(written: name(place)) else { return }
                // Insertion: later pairs move up past the new one.
                var i = count
                while i > 0, before(place, places[i - 1]) {
                    places[i] = places[i - 1]
                    i -= 1
                }
                places[i] = place
                count += 1
            }
            for i in 0..<count {
                if i > 0 { out.append(byte: UInt8(ascii: "&")) }
                out.append(name(places[i]))
                out.append(byte: UInt8(ascii: "="))
                out.append(value(places[i]))
            }
            return true
        }
    }

    /// A written `name=value` pair normalised into `out` (a pair without `=` is a name with an
    /// empty value); returns where in `out` the value starts.
    public static func appendNormalizedPair(_ wire: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) -> Int {
        guard let eq = wire.firstIndex(of: UInt8(ascii: "=")) else {
            appendNormalized(wire, to: &out)
            return out.count
        }
        appendNormalized(UnsafeBufferPointer(rebasing: wire[..<eq]), to: &out)
        let equals = out.count
        appendNormalized(UnsafeBufferPointer(rebasing: wire[(eq + 1)...]), to: &out)
        return equals
    }

    /// RFC 3986 §6.2.2 normalisation of written text: hex digits of escapes upper-cased,
    /// escaped unreserved characters decoded, and bytes a URI cannot hold raw (outside ASCII,
    /// controls, space, `"<>\^`{|}`, a `%` that starts no escape) escaped, as an IRI maps to a
    /// URI. Unreserved and reserved characters, `+` included, stay as written. Appended to `out`.
    static func appendNormalized(_ utf8: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        var i = 0
        while i < utf8.count {
            let b = utf8[i]
            if b == UInt8(ascii: "%"), i + 2 < utf8.count, let h = hex(utf8[i + 1]), let l = hex(utf8[i + 2]) {
                let decoded = h << 4 | l
                if isUnreserved(decoded) {
                    out.append(decoded)
                } else {
                    out.append(UInt8(ascii: "%"))
                    out.append(hexDigits[Int(h)])
                    out.append(hexDigits[Int(l)])
                }
                i += 3
            } else if b == UInt8(ascii: "%") || !isURIByte(b) {
                out.append(UInt8(ascii: "%"))
                out.append(hexDigits[Int(b >> 4)])
                out.append(hexDigits[Int(b & 0x0F)])
                i += 1
            } else {
                out.append(b)
                i += 1
            }
        }
    }

    /// ``percentEncode(_:)`` of `text`, appended to `out`.
    static func appendPercentEncoded(_ text: String, to out: inout [UInt8]) {
        appendPercentEncoded(bytes: text.utf8, to: &out)
    }

    /// ``percentEncode(_:)`` of bytes, appended to `out`.
    @inline(__always)
    static func appendPercentEncoded<S: Sequence<UInt8>>(bytes: S, to out: inout [UInt8]) {
        for b in bytes {
            if isUnreserved(b) {
                out.append(b)
            } else {
                out.append(UInt8(ascii: "%"))
                out.append(hexDigits[Int(b >> 4)])
                out.append(hexDigits[Int(b & 0x0F)])
            }
        }
    }

    /// Encoded pairs as `k=v&k=v`.
    private static func joined(_ pairs: [(String, String)]) -> String {
        var out = TextBuilder(capacity: pairs.reduce(0) { $0 + $1.0.utf8.count + $1.1.utf8.count + 2 })
        for (i, pair) in pairs.enumerated() {
            if i > 0 { out.append("&" as StaticString) }
            out.append(pair.0)
            out.append("=" as StaticString)
            out.append(pair.1)
        }
        return out.text
    }
}

/// The parameter names a cache key leaves out (volatile ones, injected tokens), with the
/// lengths they have: a name is hashed against the set only when some excluded name has its
/// length. Made once a configuration.
public struct ExcludedParams: Sendable {
    public let names: Set<String>
    /// Bit `n` set: some excluded name is `n` bytes long (63: 63 or more).
    private let lengths: UInt64
    /// The names' UTF-8 bytes, compared with a name as written without making a string of it.
    private let written: [[UInt8]]

    public init(_ names: Set<String>) {
        var lengths: UInt64 = 0
        for name in names { lengths |= 1 << UInt64(min(name.utf8.count, 63)) }
        (self.names, self.lengths, written) = (names, lengths, names.map { Array($0.utf8) })
    }

    /// Whether a decoded name is excluded.
    func excludes(_ name: String) -> Bool {
        lengths & 1 << UInt64(min(name.utf8.count, 63)) != 0 && names.contains(name)
    }

    /// Whether a name as written is excluded once decoded (``QueryString/decode(_:)``).
    func excludes(written name: UnsafeBufferPointer<UInt8>) -> Bool {
        guard lengths != 0 else { return false }
        guard name.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "+") }) else {
            // Decoding changes nothing: the length is the decoded one.
            return lengths & 1 << UInt64(min(name.count, 63)) != 0 && written.contains { $0.elementsEqual(name) }
        }
        return excludes(QueryString.decode(String(decoding: name, as: UTF8.self)))
    }
}
