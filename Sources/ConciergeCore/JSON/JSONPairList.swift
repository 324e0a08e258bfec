/// A stored header list, `[["name","value"],...]` as ``JSONValue/serializedPairBytes(_:)``
/// writes it, read straight from its bytes: no tree, no `Data`, no decoder.
///
/// It accepts a strict subset of what the full parser (``JSONValue/parse(_:)-(Collection)``)
/// accepts: the compact form (no whitespace), strings whose escapes are `\"`, `\\`, `\/`,
/// `\b`, `\f`, `\n`, `\r`, `\t` or `\u` of an ASCII code point, and whose other bytes are valid
/// UTF-8 with no control character. Anything else answers `nil`, and the caller asks the full
/// parser: whatever this reads, the full parser reads alike (the `jsonscan` fuzz target and
/// `JSONPairListTests` compare the two).
public enum JSONPairList {
    /// The pairs, or `nil` when the text is not in the subset (which says nothing about
    /// whether it is JSON).
    public static func read(_ bytes: UnsafeRawBufferPointer) -> [(String, String)]? {
        var reader = Reader(bytes: bytes)
        guard reader.take(UInt8(ascii: "[")) else { return nil }
        var pairs: [(String, String)] = []
        if reader.take(UInt8(ascii: "]")) { return reader.atEnd ? pairs : nil }
        repeat {
            guard reader.take(UInt8(ascii: "[")), let name = reader.string(), reader.take(UInt8(ascii: ",")),
                  let value = reader.string(), reader.take(UInt8(ascii: "]")) else { return nil }
            pairs.append((name, value))
        } while reader.take(UInt8(ascii: ","))
        guard reader.take(UInt8(ascii: "]")), reader.atEnd else { return nil }
        return pairs
    }

    /// ``read(_:)`` over an array's bytes.
    public static func read(_ bytes: [UInt8]) -> [(String, String)]? {
        bytes.withUnsafeBytes { read($0) }
    }

    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var at = 0

        var atEnd: Bool { at == bytes.count }

        mutating func take(_ byte: UInt8) -> Bool {
            guard at < bytes.count, bytes[at] == byte else { return false }
            at += 1
            return true
        }

        /// A string from its opening quote: the bytes as they are while no escape comes (one
        /// copy), else unescaped into a scratch array.
        mutating func string() -> String? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = at
            var ascii = true
            while at < bytes.count {
                let byte = bytes[at]
                if byte == UInt8(ascii: "\"") {
                    let text = UnsafeRawBufferPointer(rebasing: bytes[start..<at])
                    at += 1
                    return Self.text(text, ascii: ascii)
                }
                if byte == UInt8(ascii: "\\") { return escaped(from: start) }
                if byte < 0x20 { return nil }
                if byte >= 0x80 { ascii = false }
                at += 1
            }
            return nil
        }

        /// The rest of a string that holds an escape, from its first byte at `start`.
        private mutating func escaped(from start: Int) -> String? {
            var out = Array(bytes[start..<at])
            var ascii = !out.contains { $0 >= 0x80 }
            while at < bytes.count {
                let byte = bytes[at]
                at += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return out.withUnsafeBytes { Self.text($0, ascii: ascii) }
                case UInt8(ascii: "\\"):
                    guard at < bytes.count else { return nil }
                    let escape = bytes[at]
                    at += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escape)
                    case UInt8(ascii: "b"): out.append(0x08)
                    case UInt8(ascii: "f"): out.append(0x0C)
                    case UInt8(ascii: "n"): out.append(0x0A)
                    case UInt8(ascii: "r"): out.append(0x0D)
                    case UInt8(ascii: "t"): out.append(0x09)
                    case UInt8(ascii: "u"):
                        guard let code = hex4(), code < 0x80 else { return nil }
                        out.append(UInt8(code))
                    default: return nil
                    }
                case 0..<0x20: return nil
                default:
                    if byte >= 0x80 { ascii = false }
                    out.append(byte)
                }
            }
            return nil
        }

        private mutating func hex4() -> UInt16? {
            guard at + 4 <= bytes.count else { return nil }
            defer { at += 4 }
            return JSONScan.hex4(bytes[at..<(at + 4)])
        }

        /// ASCII as it is; other bytes only when they are valid UTF-8 (the full parser
        /// refuses the text otherwise, so this answers `nil` and leaves it to that parser).
        private static func text(_ bytes: UnsafeRawBufferPointer, ascii: Bool) -> String? {
            if ascii { return String(decoding: bytes, as: UTF8.self) }
            return String(validating: bytes, as: UTF8.self)
        }
    }
}
