/// Reads one value of a JSON text without building the tree: the envelope's business code
/// when no later step needs the whole reply (no `validate`, `unwrap`, capture or warning
/// codes). The text is still checked from end to end, so a cut or broken body is never
/// mistaken for a success.
///
/// - Important: the scan is conservative. Whenever it answers ``Result/found(_:)`` or
///   ``Result/missing``, ``JSONValue/parse(_:)`` accepts the text and agrees on the value;
///   when it answers ``Result/notJSON`` the caller falls back to the full parser, which has
///   the last word (it may accept what the scan refuses: a byte-order mark, deep nesting,
///   other encodings). The fuzz target `jsonscan` checks this against the full parser.
public enum JSONScan {
    /// The four hex digits of a `\u` escape, or `nil` if one is not a hex digit.
    static func hex4<Digits: Collection<UInt8>>(_ digits: Digits) -> UInt16? {
        var value: UInt16 = 0
        for byte in digits {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt16(digit)
        }
        return value
    }

    public enum Result: Equatable, Sendable {
        /// Not JSON as far as the scan goes (ask the full parser).
        case notJSON
        /// JSON with nothing at the path.
        case missing
        case found(JSONValue)
    }

    /// Nesting deeper than this is left to the full parser.
    static let maxDepth = 256

    /// The value at a dotted path (`code`, `meta.code`, `list.0.id`), as
    /// `JSONValue.parse(bytes)?[path: path]` would give it.
    public static func value(at path: String, in bytes: some Collection<UInt8>) -> Result {
        value(at: components(path), in: bytes)
    }

    /// The value at a path already split into ``components(_:)``.
    public static func value(at components: [[UInt8]], in bytes: some Collection<UInt8>) -> Result {
        if let result = bytes.withContiguousStorageIfAvailable({ scan($0, components) }) { return result }
        return Array(bytes).withUnsafeBufferPointer { scan($0, components) }
    }

    /// A dotted path's components as bytes; one component (`code`, `errcode`) without a split.
    public static func components(_ path: String) -> [[UInt8]] {
        if path.isEmpty { return [] }
        if !StringBytes.contains(UInt8(ascii: "."), in: path) { return [Array(path.utf8)] }
        return path.split(separator: ".", omittingEmptySubsequences: false).map { Array($0.utf8) }
    }

    static func scan(_ buffer: UnsafeBufferPointer<UInt8>, _ components: [[UInt8]]) -> Result {
        var scanner = Scanner(bytes: buffer, path: components)
        scanner.skipWhitespace()
        // Only an object or an array at the top (fragments are left to the full parser).
        guard scanner.index < buffer.count, buffer[scanner.index] == UInt8(ascii: "{") || buffer[scanner.index] == UInt8(ascii: "[") else {
            return .notJSON
        }
        guard scanner.value(depth: 0, onPath: 0), scanner.atEndAfterWhitespace() else { return .notJSON }
        guard let range = scanner.found else { return components.isEmpty ? .notJSON : .missing }
        guard let value = Self.decode(UnsafeBufferPointer(rebasing: buffer[range])) else { return .notJSON }
        return .found(value)
    }

    /// A scalar decoded directly; anything else (escapes, fractions, containers) by the full
    /// parser, on that value's bytes only.
    static func decode(_ token: UnsafeBufferPointer<UInt8>) -> JSONValue? {
        guard let first = token.first else { return nil }
        switch first {
        case UInt8(ascii: "\""):
            let inner = UnsafeBufferPointer(rebasing: token.dropFirst().dropLast())
            if !inner.contains(UInt8(ascii: "\\")) { return .string(String(decoding: inner, as: UTF8.self)) }
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            if token.count <= 18, !token.contains(where: { $0 == UInt8(ascii: ".") || $0 | 0x20 == UInt8(ascii: "e") }) {
                var value: Int64 = 0
                for digit in token where digit != UInt8(ascii: "-") { value = value * 10 + Int64(digit - UInt8(ascii: "0")) }
                return .int(first == UInt8(ascii: "-") ? -value : value)
            }
        case UInt8(ascii: "t"): return .bool(true)
        case UInt8(ascii: "f"): return .bool(false)
        case UInt8(ascii: "n"): return .null
        default: break
        }
        var wrapped: [UInt8] = [UInt8(ascii: "[")]
        wrapped.append(contentsOf: token)
        wrapped.append(UInt8(ascii: "]"))
        guard case .array(let items)? = JSONValue.parse(wrapped), items.count == 1 else { return nil }
        return items[0]
    }

    /// A strict RFC 8259 recogniser that remembers where the value at the path lies.
    struct Scanner {
        let bytes: UnsafeBufferPointer<UInt8>
        let path: [[UInt8]]
        var index = 0
        /// The first value met at the path (duplicate keys: the first one wins, as in the parser).
        var found: Range<Int>?

        init(bytes: UnsafeBufferPointer<UInt8>, path: [[UInt8]]) {
            self.bytes = bytes
            self.path = path
        }

        mutating func skipWhitespace() {
            while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 {
                index += 1
            }
        }

        mutating func atEndAfterWhitespace() -> Bool {
            skipWhitespace()
            return index == bytes.count
        }

        /// One value; `onPath` is how many path components the enclosing containers matched
        /// (`nil`: off the path).
        mutating func value(depth: Int, onPath: Int?) -> Bool {
            guard index < bytes.count, depth <= JSONScan.maxDepth else { return false }
            let start = index
            let ok: Bool
            switch bytes[index] {
            case UInt8(ascii: "{"): ok = object(depth: depth + 1, onPath: onPath)
            case UInt8(ascii: "["): ok = array(depth: depth + 1, onPath: onPath)
            case UInt8(ascii: "\""): ok = string() != nil
            case UInt8(ascii: "t"): ok = literal("true")
            case UInt8(ascii: "f"): ok = literal("false")
            case UInt8(ascii: "n"): ok = literal("null")
            default: ok = number()
            }
            if ok, onPath == path.count, found == nil { found = start..<index }
            return ok
        }

        /// After `[` or `{`: whether the container is empty (its closer consumed).
        mutating func opensEmpty(closer: UInt8) -> Bool {
            index += 1
            skipWhitespace()
            guard index < bytes.count, bytes[index] == closer else { return false }
            index += 1
            return true
        }

        /// After a member or element: the closer ends the container (`true`), a comma leads
        /// to the next one (`false`), anything else is malformed (`nil`).
        mutating func closes(with closer: UInt8) -> Bool? {
            skipWhitespace()
            guard index < bytes.count else { return nil }
            if bytes[index] == closer {
                index += 1
                return true
            }
            guard bytes[index] == UInt8(ascii: ",") else { return nil }
            index += 1
            skipWhitespace()
            return false
        }

        mutating func object(depth: Int, onPath: Int?) -> Bool {
            if opensEmpty(closer: UInt8(ascii: "}")) { return true }
            // Duplicate keys: the parser keeps the first, so only the first match stays on the path.
            var matched = false
            while true {
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), let key = string() else { return false }
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return false }
                index += 1
                skipWhitespace()
                var next: Int? = nil
                if let k = onPath, k < path.count, !matched, keyMatches(key, path[k]) {
                    next = k + 1
                    matched = true
                }
                guard value(depth: depth, onPath: next), let closed = closes(with: UInt8(ascii: "}")) else { return false }
                if closed { return true }
            }
        }

        mutating func array(depth: Int, onPath: Int?) -> Bool {
            if opensEmpty(closer: UInt8(ascii: "]")) { return true }
            var position = 0
            let wanted: Int? = onPath.flatMap { k in k < path.count ? Int(String(decoding: path[k], as: UTF8.self)) : nil }
            while true {
                let next: Int? = (wanted == position) ? onPath.map { $0 + 1 } : nil
                guard value(depth: depth, onPath: next), let closed = closes(with: UInt8(ascii: "]")) else { return false }
                if closed { return true }
                position += 1
            }
        }

        /// A string token; returns its inner byte range, and whether it has escapes.
        mutating func string() -> (range: Range<Int>, escaped: Bool)? {
            index += 1
            let start = index
            var escaped = false
            let raw = UnsafeRawBufferPointer(bytes)
            while true {
                // Plain bytes (printable ASCII but `"` and `\`) a word at a time, landing on
                // the first byte that is not plain: one test per eight bytes instead of a
                // switch per byte, four words per loop while 32 bytes are left (a long value,
                // such as a text field, is most of a body). The lowest flagged byte of a word
                // is exactly the first special one (the tests' borrows only run upwards). (A
                // `SIMD16<UInt8>` test was tried: its generic operators made the scan twelve
                // times slower.)
                while index &+ 32 <= bytes.count {
                    let special = Self.specialBytes(raw, at: index) | Self.specialBytes(raw, at: index &+ 8)
                        | Self.specialBytes(raw, at: index &+ 16) | Self.specialBytes(raw, at: index &+ 24)
                    if special != 0 { break }
                    index &+= 32
                }
                while index &+ 8 <= bytes.count {
                    let special = Self.specialBytes(raw, at: index)
                    if special != 0 {
                        index &+= special.trailingZeroBitCount &>> 3
                        break
                    }
                    index &+= 8
                }
                guard index < bytes.count else { return nil }
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    return (start..<(index - 1), escaped)
                case UInt8(ascii: "\\"):
                    escaped = true
                    guard escape() else { return nil }
                case 0..<0x20:
                    return nil
                case 0x80...:
                    guard utf8Sequence() else { return nil }
                default:
                    index += 1  // fewer than eight bytes left
                }
            }
        }

        /// Whether any of the eight bytes of `word` is below 0x20, at or above 0x80, `"` or `\`
        /// (exact for the presence of one; which byte it is does not matter here).
        @inline(__always)
        static func hasSpecialByte(_ word: UInt64) -> Bool { specialBytes(word) != 0 }

        /// The eight bytes at `offset` as ``specialBytes(_:)`` flags them, the first byte lowest.
        @inline(__always)
        static func specialBytes(_ raw: UnsafeRawBufferPointer, at offset: Int) -> UInt64 {
            specialBytes(UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
        }

        /// Non-zero when ``hasSpecialByte(_:)``: the high bit of a byte set where one is found
        /// (the lowest set exactly at the first special byte; bytes above it may be flagged
        /// wrongly, by a borrow).
        @inline(__always)
        static func specialBytes(_ word: UInt64) -> UInt64 {
            let ones: UInt64 = 0x0101_0101_0101_0101
            let highs: UInt64 = 0x8080_8080_8080_8080
            func hasZero(_ v: UInt64) -> UInt64 { (v &- ones) & ~v & highs }
            let control = (word &- ones &* 0x20) & ~word & highs  // a byte below 0x20 (bytes below 0x80)
            return (word & highs) | control | hasZero(word ^ (ones &* 0x22)) | hasZero(word ^ (ones &* 0x5C))
        }

        /// `\x` escapes; `\u` surrogates must pair.
        mutating func escape() -> Bool {
            index += 1
            guard index < bytes.count else { return false }
            switch bytes[index] {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                 UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                index += 1
                return true
            case UInt8(ascii: "u"):
                guard let unit = hex4(at: index + 1) else { return false }
                index += 5
                switch unit {
                case 0xD800...0xDBFF:
                    guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u"),
                          let low = hex4(at: index + 2), (0xDC00...0xDFFF).contains(low) else { return false }
                    index += 6
                    return true
                case 0xDC00...0xDFFF:
                    return false
                case 0:
                    return false  // a NUL inside a string: left to the full parser
                default:
                    return true
                }
            default:
                return false
            }
        }

        func hex4(at position: Int) -> UInt16? {
            guard position + 4 <= bytes.count else { return nil }
            return JSONScan.hex4(bytes[position..<(position + 4)])
        }

        /// One well-formed UTF-8 sequence of 2–4 bytes (no overlongs, no surrogates).
        mutating func utf8Sequence() -> Bool {
            let lead = bytes[index]
            let length: Int
            var lower: UInt8 = 0x80, upper: UInt8 = 0xBF
            switch lead {
            case 0xC2...0xDF: length = 2
            case 0xE0: length = 3; lower = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED: length = 3; upper = 0x9F
            case 0xF0: length = 4; lower = 0x90
            case 0xF1...0xF3: length = 4
            case 0xF4: length = 4; upper = 0x8F
            default: return false
            }
            guard index + length <= bytes.count else { return false }
            let second = bytes[index + 1]
            guard second >= lower, second <= upper else { return false }
            for offset in 2..<max(2, length) where !(0x80...0xBF).contains(bytes[index + offset]) { return false }
            index += length
            return true
        }

        mutating func literal(_ word: StaticString) -> Bool {
            let count = word.utf8CodeUnitCount
            guard index + count <= bytes.count else { return false }
            for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] { return false }
            index += count
            return true
        }

        /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`; a fraction or exponent,
        /// or more than 18 digits, must give a finite Double.
        mutating func number() -> Bool {
            let start = index
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { return false }
            if bytes[index] == UInt8(ascii: "0") {
                index += 1
            } else {
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            var plainInteger = true
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                plainInteger = false
                index += 1
                guard index < bytes.count, isDigit(bytes[index]) else { return false }
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            if index < bytes.count, bytes[index] | 0x20 == UInt8(ascii: "e") {
                plainInteger = false
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                guard index < bytes.count, isDigit(bytes[index]) else { return false }
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            if plainInteger, index - start <= 18 { return true }
            guard let double = Double(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)) else { return false }
            return double.isFinite
        }

        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

        func keyMatches(_ key: (range: Range<Int>, escaped: Bool), _ component: [UInt8]) -> Bool {
            if !key.escaped {
                return key.range.count == component.count && bytes[key.range].elementsEqual(component)
            }
            var quoted: [UInt8] = [UInt8(ascii: "\"")]
            quoted.append(contentsOf: bytes[key.range])
            quoted.append(UInt8(ascii: "\""))
            guard case .string(let text)? = quoted.withUnsafeBufferPointer({ JSONScan.decode($0) }) else { return false }
            return Array(text.utf8) == component
        }
    }
}
