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
            var start = 0
            while start < bytes.count {
                var end = start
                var eq: Int?
                while end < bytes.count, bytes[end] != UInt8(ascii: "&") {
                    if eq == nil, bytes[end] == UInt8(ascii: "=") { eq = end }
                    end += 1
                }
                if end > start {
                    let wire = String(decoding: bytes[start..<end], as: UTF8.self)
                    if let eq {
                        out.append(Param(decode(bytes[start..<eq]), decode(bytes[(eq + 1)..<end]), wire: wire))
                    } else {
                        out.append(Param(decode(bytes[start..<end]), "", wire: wire))
                    }
                }
                start = end + 1
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
        for b in text.utf8 {
            if isUnreserved(b) {
                out.append(b)
            } else {
                out.append(UInt8(ascii: "%"))
                out.append(hexDigits[Int(b >> 4)])
                out.append(hexDigits[Int(b & 0x0F)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Unreserved or reserved (RFC 3986 §2.2–2.3): what a URI may hold as it is.
    static func isURIByte(_ b: UInt8) -> Bool {
        if isUnreserved(b) { return true }
        switch b {
        case UInt8(ascii: ":"), UInt8(ascii: "/"), UInt8(ascii: "?"), UInt8(ascii: "#"), UInt8(ascii: "["), UInt8(ascii: "]"),
             UInt8(ascii: "@"), UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "("),
             UInt8(ascii: ")"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: ";"), UInt8(ascii: "="):
            return true
        default:
            return false
        }
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

    /// The cache key's parameter string: pairs sorted as in ``canonical(_:)``, but each in its
    /// written form normalised only where RFC 3986 §6.2.2 calls two forms equivalent
    /// (``normalized(_:)``), so `%FF` and `%FE`, or two GBK words, stay apart.
    public static func keyCanonical<S: Sequence>(_ params: S) -> String where S.Element == Param {
        var out = TextBuilder(capacity: 64)
        writeKeyCanonical(Array(params), into: &out)
        return out.text
    }

    /// ``keyCanonical(_:)`` written straight into a key being built: no pair list joined into
    /// a string of its own first. Every piece is ASCII (normalised or percent-encoded), where
    /// String order is byte order.
    static func writeKeyCanonical(_ params: [Param], into out: inout TextBuilder) {
        var pairs: [(name: String, value: String)] = []
        pairs.reserveCapacity(params.count)
        for param in params {
            if let wire = param.wire {
                if let eq = wire.utf8.firstIndex(of: UInt8(ascii: "=")) {
                    pairs.append((normalized(wire[..<eq]), normalized(wire[wire.utf8.index(after: eq)...])))
                } else {
                    pairs.append((normalized(wire[...]), ""))
                }
            } else {
                pairs.append((percentEncode(param.name), percentEncode(param.value)))
            }
        }
        if pairs.count > 1 { pairs.sort { a, b in a.name != b.name ? a.name < b.name : a.value < b.value } }
        for index in pairs.indices {
            if index > 0 { out.append("&" as StaticString) }
            out.append(pairs[index].name)
            out.append("=" as StaticString)
            out.append(pairs[index].value)
        }
    }

    /// RFC 3986 §6.2.2 normalisation of written text: hex digits of escapes upper-cased,
    /// escaped unreserved characters decoded, and bytes a URI cannot hold raw (outside ASCII,
    /// controls, space, `"<>\^`{|}`, a `%` that starts no escape) escaped, as an IRI maps to a
    /// URI. Unreserved and reserved characters, `+` included, stay as written.
    static func normalized(_ text: Substring) -> String {
        var needs = false
        for b in text.utf8 where b == UInt8(ascii: "%") || !isURIByte(b) { needs = true; break }
        if !needs { return String(text) }
        let utf8 = Array(text.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count + 8)
        var i = 0
        while i < utf8.count {
            let b = utf8[i]
            if b == UInt8(ascii: "%"), i + 2 < utf8.count, let h = hex(utf8[i + 1]), let l = hex(utf8[i + 2]) {
                let decoded = h << 4 | l
                if isUnreserved(decoded) {
                    out.append(decoded)
                } else {
                    out.append(contentsOf: [UInt8(ascii: "%"), hexDigits[Int(h)], hexDigits[Int(l)]])
                }
                i += 3
            } else if b == UInt8(ascii: "%") || !isURIByte(b) {
                out.append(contentsOf: [UInt8(ascii: "%"), hexDigits[Int(b >> 4)], hexDigits[Int(b & 0x0F)]])
                i += 1
            } else {
                out.append(b)
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
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
