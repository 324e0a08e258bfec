import Foundation
import NIOHTTP1
import Yams

/// Walks a composed YAML tree, converting values and collecting every problem with its key
/// path and line, so one run of `check-config` reports all errors at once.
final class YAMLReader {
    private(set) var issues: [ConfigIssue] = []
    /// Values taken from the environment by `${VAR}` (secrets to mask in logs).
    private(set) var substitutedValues: Set<String> = []
    /// The keys each mapping of the schema allows, by schema path (`endpoints[].cache`),
    /// as met while reading: the loader's own key list (``ConfigLoader/schemaKeys(yaml:)``).
    private(set) var allowedKeys: [String: Set<String>] = [:]
    let environment: [String: String]
    /// While a named session is read: its path (`sessions.shop`) and the schema path its keys
    /// are listed under (`session`), so every session shares one key list.
    var schemaAlias: (path: String, schema: String)?

    init(environment: [String: String]) {
        self.environment = environment
    }

    func fail(_ path: String, _ node: Node?, _ message: String) {
        issues.append(ConfigIssue(path: path, line: node?.mark?.line, message: message))
    }

    static func join(_ path: String, _ key: String) -> String {
        path.isEmpty ? key : "\(path).\(key)"
    }

    /// `endpoints[2].cache` → `endpoints[].cache`.
    static func schemaPath(_ path: String) -> String {
        path.replacing(/\[[0-9]+\]/, with: "[]")
    }

    private func aliased(_ schemaPath: String) -> String {
        guard let alias = schemaAlias, schemaPath == alias.path || schemaPath.hasPrefix(alias.path + ".") else { return schemaPath }
        return alias.schema + schemaPath.dropFirst(alias.path.count)
    }

    static func isNull(_ node: Node) -> Bool {
        guard case .scalar(let scalar) = node, scalar.style == .plain || scalar.style == .any else { return false }
        return ["", "~", "null", "Null", "NULL"].contains(scalar.string)
    }

    /// The entries of a mapping, reporting keys not in `allowed` as unknown.
    /// - Parameter schemaPath: where the keys are listed in ``allowedKeys`` when `path` holds a
    ///   free-form name (`upstreams.<name>`); by default `path` with list indexes dropped.
    func mapping(_ node: Node, _ path: String, allowed: [String], schemaPath: String? = nil) -> [String: Node]? {
        declareKeys(schemaPath ?? aliased(Self.schemaPath(path)), allowed)
        guard case .mapping(let mapping) = node else {
            fail(path, node, "expected a mapping, found \(Self.kind(node))")
            return nil
        }
        var result: [String: Node] = [:]
        for (keyNode, value) in mapping {
            guard let key = keyNode.scalar?.string else {
                fail(path, keyNode, "keys must be plain strings")
                continue
            }
            let keyPath = Self.join(path, key)
            if !allowed.contains(key) {
                let hint = Self.suggestion(for: key, among: allowed).map { " (did you mean '\($0)'?)" } ?? ""
                fail(keyPath, keyNode, "unknown key '\(key)'\(hint)")
                continue
            }
            if result[key] != nil {
                fail(keyPath, keyNode, "duplicate key '\(key)'")
                continue
            }
            result[key] = value
        }
        return result
    }

    /// Lists the keys a mapping at `schemaPath` allows, whether or not this document has one there.
    func declareKeys(_ schemaPath: String, _ keys: [String]) {
        allowedKeys[schemaPath, default: []].formUnion(keys)
    }

    /// All entries of a free-form string mapping (common headers and params, upstreams).
    func pairs(_ node: Node, _ path: String) -> [(key: String, value: Node)] {
        guard case .mapping(let mapping) = node else {
            fail(path, node, "expected a mapping, found \(Self.kind(node))")
            return []
        }
        var result: [(String, Node)] = []
        var seen = Set<String>()
        for (keyNode, value) in mapping {
            guard let key = keyNode.scalar?.string, !key.isEmpty else {
                fail(path, keyNode, "keys must be non-empty strings")
                continue
            }
            if !seen.insert(key).inserted {
                fail(Self.join(path, key), keyNode, "duplicate key '\(key)'")
                continue
            }
            result.append((key, value))
        }
        return result
    }

    func sequence(_ node: Node, _ path: String) -> [Node]? {
        guard case .sequence(let sequence) = node else {
            fail(path, node, "expected a list, found \(Self.kind(node))")
            return nil
        }
        return Array(sequence)
    }

    func string(_ node: Node, _ path: String) -> String? {
        guard case .scalar(let scalar) = node else {
            fail(path, node, "expected a string, found \(Self.kind(node))")
            return nil
        }
        do {
            return try ValueParsers.expandEnvironment(scalar.string, environment: environment) { value in
                if value.count >= 4 { self.substitutedValues.insert(value) }
            }
        } catch .undefined(let name) {
            fail(path, node, "environment variable '\(name)' is not set (use ${\(name):-default} for a fallback)")
        } catch {
            fail(path, node, "unterminated ${...} in '\(scalar.string)'")
        }
        return nil
    }

    func nonEmptyString(_ node: Node, _ path: String) -> String? {
        guard let s = string(node, path) else { return nil }
        if s.isEmpty { fail(path, node, "must not be empty"); return nil }
        return s
    }

    func int(_ node: Node, _ path: String, range: ClosedRange<Int>? = nil) -> Int? {
        guard let text = scalarText(node, path, expected: "an integer") else { return nil }
        guard let value = Int(text) else {
            fail(path, node, "expected an integer, found '\(text)'")
            return nil
        }
        if let range, !range.contains(value) {
            fail(path, node, "must be between \(range.lowerBound) and \(range.upperBound), found \(value)")
            return nil
        }
        return value
    }

    func bool(_ node: Node, _ path: String) -> Bool? {
        guard let text = scalarText(node, path, expected: "true or false") else { return nil }
        switch text.lowercased() {
        case "true", "yes", "on": return true
        case "false", "no", "off": return false
        default:
            fail(path, node, "expected true or false, found '\(text)'")
            return nil
        }
    }

    func duration(_ node: Node, _ path: String) -> Duration? {
        parsed(node, path, expected: "a duration", ValueParsers.duration) { "invalid duration '\($0)' (use 30s, 5m, 1h or seconds)" }
    }

    func size(_ node: Node, _ path: String) -> Int? {
        parsed(node, path, expected: "a size", ValueParsers.size) { "invalid size '\($0)' (use 512KB, 64MB, 1GB or bytes)" }
    }

    /// A scalar read by `parse`; what it refuses is reported with `problem`.
    private func parsed<Value>(_ node: Node, _ path: String, expected: String, _ parse: (String) -> Value?,
                               problem: (String) -> String) -> Value? {
        guard let text = scalarText(node, path, expected: expected) else { return nil }
        guard let value = parse(text) else {
            fail(path, node, problem(text))
            return nil
        }
        return value
    }

    /// A mapping of header fields, each name and value checked as RFC 9110 requires.
    func headerFields(_ node: Node, _ path: String) -> HTTPHeaders {
        var headers = HTTPHeaders()
        for (name, value) in pairs(node, path) {
            guard let text = string(value, "\(path).\(name)") else { continue }
            if let problem = HTTPFieldSyntax.problem(name: name, value: text) {
                fail("\(path).\(HTTPFieldSyntax.printable(name))", value, problem)
            } else {
                headers.add(name: name, value: text)
            }
        }
        return headers
    }

    func stringList(_ node: Node, _ path: String) -> [String]? {
        list(node, path) { string($0, $1) }
    }

    func intList(_ node: Node, _ path: String) -> [Int]? {
        list(node, path) { int($0, $1) }
    }

    /// A sequence whose items `element` reads; bad items are reported and left out.
    private func list<Element>(_ node: Node, _ path: String, _ element: (Node, String) -> Element?) -> [Element]? {
        guard let items = sequence(node, path) else { return nil }
        return items.enumerated().compactMap { i, item in element(item, "\(path)[\(i)]") }
    }

    /// Converts a YAML subtree to JSON (for canned bodies and the refresh body).
    func json(_ node: Node, _ path: String) -> JSONValue? {
        switch node {
        case .scalar(let scalar):
            if scalar.style == .plain || scalar.style == .any {
                if Self.isNull(node) { return .null }
                if let b = node.bool, ["true", "false"].contains(scalar.string.lowercased()) { return .bool(b) }
                if let i = Int64(scalar.string) { return .int(i) }
                if let d = Double(scalar.string), scalar.string.contains(".") { return .double(d) }
            }
            return string(node, path).map(JSONValue.string)
        case .sequence(let sequence):
            return .array(sequence.enumerated().compactMap { json($1, "\(path)[\($0)]") })
        case .mapping(let mapping):
            var out: [String: JSONValue] = [:]
            for (k, v) in mapping {
                guard let key = k.scalar?.string else { continue }
                out[key] = json(v, Self.join(path, key))
            }
            return .object(out)
        case .alias:
            fail(path, node, "YAML aliases are not supported here")
            return nil
        }
    }

    private func scalarText(_ node: Node, _ path: String, expected: String) -> String? {
        guard case .scalar = node else {
            fail(path, node, "expected \(expected), found \(Self.kind(node))")
            return nil
        }
        return string(node, path)
    }

    static func kind(_ node: Node) -> String {
        switch node {
        case .scalar(let s): return "'\(s.string)'"
        case .mapping: return "a mapping"
        case .sequence: return "a list"
        case .alias: return "an alias"
        }
    }

    static func suggestion(for key: String, among allowed: [String]) -> String? {
        let normalized = key.lowercased().replacingOccurrences(of: "-", with: "_")
        if let exact = allowed.first(where: { $0 == normalized }) { return exact }
        let best = allowed.map { ($0, editDistance($0, normalized)) }.min { $0.1 < $1.1 }
        guard let best, best.1 <= max(2, key.count / 3) else { return nil }
        return best.0
    }

    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}
