import Foundation

/// The `match:` of an endpoint: a method list and a path pattern.
///
/// Path patterns: literal segments, `{name}` and `*` match exactly one segment, a final
/// `**` matches the rest (zero or more segments); a pattern starting with `~` is a regular
/// expression searched in the path (anchor it with `^…$` for a whole match).
public struct EndpointPattern: Sendable {
    public enum Segment: Sendable, Equatable {
        case literal(String)
        case wildcard
        case rest
    }

    public enum PathPattern: Sendable {
        case segments([Segment])
        case regex(RegexBox)
    }

    /// Upper-case methods; `nil` matches any method.
    public var methods: Set<String>?
    public var path: PathPattern

    public init(methods: Set<String>?, path: PathPattern) {
        self.methods = methods
        self.path = path
    }

    /// Parses `GET,POST /api/items`, `/api/items` (any method) or `GET ~^/api/v[0-9]+/`.
    public static func parse(_ text: String) throws(ParseError) -> EndpointPattern {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else { throw .empty }
        var methods: Set<String>? = nil
        var pathText = trimmed
        // The path starts at the first word beginning with `/` or `~`; the words before list methods.
        let words = trimmed.split(separator: " ", omittingEmptySubsequences: true)
        guard let pathWord = words.firstIndex(where: { $0.hasPrefix("/") || $0.hasPrefix("~") }) else {
            throw .badPath(String(words.last ?? ""))
        }
        if pathWord > 0 {
            pathText = words[pathWord...].joined(separator: " ")
            var set = Set<String>()
            for m in words[..<pathWord].joined(separator: ",").split(separator: ",") {
                let method = m.trimmingCharacters(in: .whitespaces).uppercased()
                if method.isEmpty { continue }
                if method == "*" || method == "ANY" { set = []; break }
                guard method.allSatisfy({ $0.isLetter }) else { throw .badMethod(String(m)) }
                set.insert(method)
            }
            methods = set.isEmpty ? nil : set
        }
        if pathText.hasPrefix("~") {
            let source = String(pathText.dropFirst()).trimmingCharacters(in: .whitespaces)
            do {
                return EndpointPattern(methods: methods, path: .regex(try RegexBox(source)))
            } catch {
                throw .badRegex("\(error)")
            }
        }
        guard pathText.hasPrefix("/") else { throw .badPath(pathText) }
        let parts = pathText.split(separator: "/", omittingEmptySubsequences: true)
        var segments: [Segment] = []
        for (i, part) in parts.enumerated() {
            if part == "**" {
                guard i == parts.count - 1 else { throw .badPath(pathText) }
                segments.append(.rest)
            } else if part == "*" || (part.hasPrefix("{") && part.hasSuffix("}") && part.count > 2) {
                segments.append(.wildcard)
            } else {
                segments.append(.literal(String(part)))
            }
        }
        return EndpointPattern(methods: methods, path: .segments(segments))
    }

    /// Whether a request's method and path (without query) fit this pattern.
    public func matches(method: String, path: String) -> Bool {
        if let methods, !methods.contains(method) { return false }
        switch self.path {
        case .regex(let regex):
            return regex.firstMatch(in: path)
        case .segments(let segments):
            return Self.match(segments: segments, path: path)
        }
    }

    static func match(segments: [Segment], path: String) -> Bool {
        var index = 0
        var remaining = path.utf8[...]
        while true {
            // Skip slashes between segments.
            while remaining.first == UInt8(ascii: "/") { remaining = remaining.dropFirst() }
            if index == segments.count { return remaining.isEmpty }
            let segment = segments[index]
            if case .rest = segment { return true }
            guard !remaining.isEmpty else { return false }
            let end = remaining.firstIndex(of: UInt8(ascii: "/")) ?? remaining.endIndex
            let piece = remaining[remaining.startIndex..<end]
            switch segment {
            case .literal(let literal):
                guard piece.elementsEqual(literal.utf8) else { return false }
            case .wildcard, .rest:
                break
            }
            remaining = remaining[end...]
            index += 1
        }
    }

    /// Why a `match` value was refused.
    public enum ParseError: Error, Equatable {
        case empty
        case badMethod(String)
        case badPath(String)
        case badRegex(String)
    }
}

/// A compiled regular expression that can cross concurrency domains.
///
/// `NSRegularExpression` is immutable after creation and documented thread-safe for matching,
/// which is why this box is `@unchecked Sendable`.
public final class RegexBox: @unchecked Sendable {
    public let source: String
    public let regex: NSRegularExpression

    /// Throws ``CompileError`` with the compiler's message (what is wrong, e.g. "expected ')'")
    /// for an invalid pattern.
    public init(_ source: String) throws {
        self.source = source
        do {
            self.regex = try NSRegularExpression(pattern: source, options: [])
        } catch {
            throw CompileError(pattern: source, message: Self.compilerMessage(source) ?? "\(error)")
        }
    }

    /// Why a pattern did not compile, in the words of Swift's regex parser (Foundation on Linux
    /// says only "The value is invalid").
    public struct CompileError: Error, CustomStringConvertible, Sendable {
        public let pattern: String
        public let message: String
        public var description: String { message }
    }

    static func compilerMessage(_ source: String) -> String? {
        do {
            _ = try Regex(source)
            return nil
        } catch {
            return "\(error)"
        }
    }

    /// Unanchored search.
    public func firstMatch(in text: String) -> Bool {
        regex.firstMatch(in: text, options: [], range: NSRange(text.startIndex..., in: text)) != nil
    }
}
