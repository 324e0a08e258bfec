import Foundation

/// Parsers for the value formats of the configuration: durations, sizes, env expansion.
public enum ValueParsers {
    /// Longest duration accepted (about 31 years); anything longer is a typo.
    static let maxSeconds: Double = 1e9

    /// `30s`, `5m`, `1h`, `2d`, `250ms`, or plain seconds (`90`, `1.5`).
    public static func duration(_ text: String) -> Duration? {
        let t = text.trimmingCharacters(in: .whitespaces).lowercased()
        guard !t.isEmpty else { return nil }
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400)]
        for (suffix, factor) in units where t.hasSuffix(suffix) {
            let number = t.dropLast(suffix.count)
            guard let value = Double(number), value >= 0, value.isFinite, !number.hasPrefix("+"), value * factor < maxSeconds else { return nil }
            return .milliseconds(Int64((value * factor * 1000).rounded()))
        }
        guard let value = Double(t), value >= 0, value.isFinite, value < maxSeconds else { return nil }
        return .milliseconds(Int64((value * 1000).rounded()))
    }

    /// `512KB`, `64MB`, `1GB` (powers of 1024), `100B`, or plain bytes.
    public static func size(_ text: String) -> Int? {
        let t = text.trimmingCharacters(in: .whitespaces).uppercased()
        let units: [(String, Int)] = [("KIB", 1 << 10), ("MIB", 1 << 20), ("GIB", 1 << 30),
                                      ("KB", 1 << 10), ("MB", 1 << 20), ("GB", 1 << 30), ("K", 1 << 10),
                                      ("M", 1 << 20), ("G", 1 << 30), ("B", 1)]
        for (suffix, factor) in units where t.hasSuffix(suffix) {
            let number = t.dropLast(suffix.count).trimmingCharacters(in: .whitespaces)
            guard let value = Double(number), value >= 0, value.isFinite, value * Double(factor) < 1e18 else { return nil }
            return Int(value * Double(factor))
        }
        guard let value = Int(t), value >= 0 else { return nil }
        return value
    }

    public enum ExpansionError: Error, Equatable {
        case undefined(String)
        case unterminated
    }

    /// Expands `${NAME}` and `${NAME:-default}`; `$$` stays a literal `$`.
    public static func expandEnvironment(_ text: String, environment: [String: String],
                                         substituted: ((String) -> Void)? = nil) throws(ExpansionError) -> String {
        guard text.contains("$") else { return text }
        var out = ""
        var i = text.startIndex
        while i < text.endIndex {
            let c = text[i]
            if c == "$" {
                let next = text.index(after: i)
                if next < text.endIndex, text[next] == "$" {
                    out.append("$")
                    i = text.index(after: next)
                    continue
                }
                if next < text.endIndex, text[next] == "{" {
                    guard let close = text[next...].firstIndex(of: "}") else { throw .unterminated }
                    let inner = String(text[text.index(after: next)..<close])
                    let name: String
                    var fallback: String? = nil
                    if let range = inner.range(of: ":-") {
                        name = String(inner[..<range.lowerBound])
                        fallback = String(inner[range.upperBound...])
                    } else {
                        name = inner
                    }
                    if let value = environment[name], !(value.isEmpty && fallback != nil) {
                        substituted?(value)
                        out += value
                    } else if let fallback {
                        out += fallback
                    } else {
                        throw .undefined(name)
                    }
                    i = text.index(after: close)
                    continue
                }
            }
            out.append(c)
            i = text.index(after: i)
        }
        return out
    }
}
