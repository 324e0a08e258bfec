/// RFC 3986 percent-encoding and `application/x-www-form-urlencoded` parsing.
public enum QueryString {
    /// Splits `a=1&b=x%20y` into decoded pairs (`+` is a space, as in forms).
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
                    if let eq {
                        out.append(Param(decode(bytes[start..<eq]), decode(bytes[(eq + 1)..<end])))
                    } else {
                        out.append(Param(decode(bytes[start..<end]), ""))
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

    /// Joins pairs as `k=v&k=v`, each side percent-encoded per RFC 3986, in the given order.
    public static func encode(_ params: [Param]) -> String {
        joined(params.map { (percentEncode($0.name), percentEncode($0.value)) })
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
