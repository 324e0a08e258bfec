import Foundation
import NIOHTTP1

/// A JSON document as a value: what the envelope reader, templates, validation and
/// unwrap work on.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// Parses UTF-8 JSON bytes; `nil` when they are not JSON, or nest arrays and objects deeper
    /// than ``maxNesting``.
    public static func parse<Bytes: Collection>(_ bytes: Bytes) -> JSONValue? where Bytes.Element == UInt8 {
        guard !bytes.isEmpty, !nestsDeeper(than: maxNesting, bytes) else { return nil }
        return try? JSONDecoder().decode(JSONValue.self, from: Data(bytes))
    }

    /// The deepest nesting parsed: Foundation's own limit. Its decoder traps (instead of
    /// throwing) while reporting a text nested one level deeper (the `jsonscan` fuzz target's
    /// find, kept in its corpus), so such texts never reach it.
    public static let maxNesting = 512

    /// Whether arrays and objects nest deeper than `limit`, counted outside strings in one pass.
    static func nestsDeeper(than limit: Int, _ bytes: some Collection<UInt8>) -> Bool {
        var depth = 0
        var inString = false
        var escaped = false
        for byte in bytes {
            if inString {
                if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                if depth > limit { return true }
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth -= 1
            default: break
            }
        }
        return false
    }

    public static func parse(_ text: String) -> JSONValue? { parse(Array(text.utf8)) }

    /// Compact JSON text with sorted object keys.
    public var serialized: String {
        String(decoding: serializedBytes, as: UTF8.self)
    }

    public var serializedBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(into: &out)
        return out
    }

    /// `[["name","value"],...]`: what `.array` of two-string arrays serializes to, written
    /// straight from the pairs (the cache writer stores each entry's headers so).
    public static func serializedPairs(_ pairs: HTTPHeaders) -> String {
        String(decoding: serializedPairBytes(pairs), as: UTF8.self)
    }

    /// ``serializedPairs(_:)`` as UTF-8 bytes (bound as SQL text without a `String` between).
    public static func serializedPairBytes(_ pairs: HTTPHeaders) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        out.append(UInt8(ascii: "["))
        var first = true
        for (name, value) in pairs {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            out.append(UInt8(ascii: "["))
            writeString(name, into: &out)
            out.append(UInt8(ascii: ","))
            writeString(value, into: &out)
            out.append(UInt8(ascii: "]"))
        }
        out.append(UInt8(ascii: "]"))
        return out
    }

    func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .int(let i): out.append(contentsOf: String(i).utf8)
        case .double(let d):
            if d.isFinite, d == d.rounded(), abs(d) < 1e15 {
                out.append(contentsOf: String(Int64(d)).utf8)
            } else if d.isFinite {
                out.append(contentsOf: "\(d)".utf8)
            } else {
                out.append(contentsOf: "null".utf8)
            }
        case .string(let s): JSONValue.writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (i, key) in members.keys.sorted().enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONValue.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                members[key]!.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        defer { out.append(UInt8(ascii: "\"")) }
        // Most strings need no escape: one copy instead of a byte at a time, from the
        // string's own bytes when it lends them.
        func needsEscape(_ b: UInt8) -> Bool { b < 0x20 || b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") }
        let copied = s.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
            for b in bytes where needsEscape(b) { return false }
            out.append(contentsOf: bytes)
            return true
        }
        if copied == true { return }
        if copied == nil, !s.utf8.contains(where: needsEscape) {
            out.append(contentsOf: s.utf8)
            return
        }
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: "\\\"".utf8)
            case UInt8(ascii: "\\"): out.append(contentsOf: "\\\\".utf8)
            case 0x0A: out.append(contentsOf: "\\n".utf8)
            case 0x0D: out.append(contentsOf: "\\r".utf8)
            case 0x09: out.append(contentsOf: "\\t".utf8)
            case 0..<0x20:
                let hex = String(byte, radix: 16)
                out.append(contentsOf: "\\u00".utf8)
                if hex.count < 2 { out.append(UInt8(ascii: "0")) }
                out.append(contentsOf: hex.utf8)
            default: out.append(byte)
            }
        }
    }

    /// The value at a dotted path (`data.result.id`); array elements by index (`data.list.0`).
    public subscript(path path: String) -> JSONValue? {
        if path.isEmpty { return self }
        if case .object(let members) = self, !StringBytes.contains(UInt8(ascii: "."), in: path) {
            // One member (`code`, `errcode`): no split, no copies of the name.
            return members[path]
        }
        var current = self
        for component in path.split(separator: ".", omittingEmptySubsequences: false) {
            switch current {
            case .object(let members):
                guard let next = members[String(component)] else { return nil }
                current = next
            case .array(let items):
                guard let index = Int(component), items.indices.contains(index) else { return nil }
                current = items[index]
            default:
                return nil
            }
        }
        return current
    }

    /// The integer a business code field holds, whether sent as a number or a numeric string.
    public var intValue: Int? {
        switch self {
        case .int(let i): return Int(exactly: i)
        case .double(let d): return d == d.rounded() ? Int(exactly: d) : nil
        case .string(let s): return Int(s)
        default: return nil
        }
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let items) = self { return items }
        return nil
    }

    /// Text used for a parameter value: strings as they are, everything else as JSON.
    public var parameterText: String {
        switch self {
        case .string(let s): return s
        default: return serialized
        }
    }

    /// A short type name used in validation messages.
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "bool"
        case .int, .double: return "number"
        case .string: return "string"
        case .array: return "array"
        case .object: return "object"
        }
    }
}

extension JSONValue: Codable {
    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let b = try? container.decode(Bool.self) {
            self = .bool(b)
        } else if let i = try? container.decode(Int64.self) {
            self = .int(i)
        } else if let d = try? container.decode(Double.self) {
            self = .double(d)
        } else if let s = try? container.decode(String.self) {
            self = .string(s)
        } else if let a = try? container.decode([JSONValue].self) {
            self = .array(a)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let b): try container.encode(b)
        case .int(let i): try container.encode(i)
        case .double(let d): try container.encode(d)
        case .string(let s): try container.encode(s)
        case .array(let a): try container.encode(a)
        case .object(let o): try container.encode(o)
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByDictionaryLiteral, ExpressibleByArrayLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { $1 }))
    }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(nilLiteral: ()) { self = .null }
}
