/// A business status code read from a JSON envelope: an integer (`0`, `801`, also when sent
/// as the string `"0"`) or a text code (`"InvalidAuthentication"`).
///
/// - Important: `0` and `"0"` are one code: a string that reads as an integer is always
///   ``number(_:)``.
public enum BusinessCode: Sendable, Hashable, ExpressibleByIntegerLiteral, CustomStringConvertible {
    case number(Int)
    case text(String)

    public init(integerLiteral value: Int) {
        self = .number(value)
    }

    /// A code from configuration or a reply: integer-like strings become numbers.
    public init(_ text: String) {
        if let n = Int(text) { self = .number(n) } else { self = .text(text) }
    }

    public var number: Int? {
        if case .number(let n) = self { return n }
        return nil
    }

    public var description: String {
        switch self {
        case .number(let n): return String(n)
        case .text(let s): return s
        }
    }

    public var jsonValue: JSONValue {
        switch self {
        case .number(let n): return .int(Int64(n))
        case .text(let s): return .string(s)
        }
    }
}
