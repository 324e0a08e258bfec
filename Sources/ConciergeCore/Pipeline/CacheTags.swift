/// An endpoint's `cache.tags` and `cache.tags_header`: the tags a stored entry carries, so an
/// operator invalidates by what changed (`{"tags": ["item:7"]}`) rather than by URL.
///
/// A template is text with `{…}` parts: a path parameter of the endpoint's `match` (`{id}`),
/// a query or form parameter (`{query.NAME}`), or a dotted path into the stored JSON reply
/// (`{data.result.ownerId}`; an array gives one tag per element). A template with a part
/// whose value is missing gives no tag.
public struct CacheTags: Sendable {
    public enum Part: Sendable, Equatable {
        case literal(String)
        /// The path segment at this index (among the non-empty ones).
        case pathSegment(Int)
        case param(String)
        case json(String)
    }

    public let templates: [[Part]]
    /// The upstream reply header whose space-separated values are tags too; it never reaches the
    /// client.
    public let header: String?

    public static let none = CacheTags(templates: [], header: nil)

    public init(templates: [[Part]], header: String?) {
        (self.templates, self.header) = (templates, header)
    }

    public var isEmpty: Bool { templates.isEmpty && header == nil }

    /// Whether a template reads the reply's JSON (then the pipeline parses the body once).
    public var readsJSON: Bool {
        templates.contains { $0.contains { if case .json = $0 { true } else { false } } }
    }

    /// Parses templates against the endpoint's `match` path (for `{name}` parameters); the
    /// problem with the first bad template otherwise.
    public static func parse(_ texts: [String], header: String?, matchPath: String) -> Result<CacheTags, TemplateError> {
        var names: [String: Int] = [:]
        for (i, segment) in matchPath.split(separator: "/", omittingEmptySubsequences: true).enumerated()
        where segment.hasPrefix("{") && segment.hasSuffix("}") && segment.count > 2 {
            names[String(segment.dropFirst().dropLast())] = i
        }
        var templates: [[Part]] = []
        for (index, text) in texts.enumerated() {
            var parts: [Part] = []
            var rest = Substring(text)
            while let open = rest.firstIndex(of: "{") {
                if open > rest.startIndex { parts.append(.literal(String(rest[..<open]))) }
                guard let close = rest[open...].firstIndex(of: "}") else { return .failure(TemplateError(index: index, message: "'{' without '}'")) }
                let name = String(rest[rest.index(after: open)..<close])
                guard !name.isEmpty, !name.contains("{") else { return .failure(TemplateError(index: index, message: "empty or nested '{}'")) }
                if name.hasPrefix("query.") {
                    let param = String(name.dropFirst(6))
                    guard !param.isEmpty else { return .failure(TemplateError(index: index, message: "'{query.}' names no parameter")) }
                    parts.append(.param(param))
                } else if let segment = names[name] {
                    parts.append(.pathSegment(segment))
                } else {
                    parts.append(.json(name))
                }
                rest = rest[rest.index(after: close)...]
            }
            if !rest.isEmpty { parts.append(.literal(String(rest))) }
            guard !parts.isEmpty else { return .failure(TemplateError(index: index, message: "empty tag")) }
            templates.append(parts)
        }
        return .success(CacheTags(templates: templates, header: header.flatMap { $0.isEmpty ? nil : $0 }))
    }

    public struct TemplateError: Error, Equatable, Sendable {
        public var index: Int
        public var message: String
    }

    /// The tags of one reply: every template's, then the header's values (`headerValues`),
    /// without duplicates, in order.
    public func evaluate(path: String, params: [Param], json: JSONValue?, headerValues: [String] = []) -> [String] {
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        var tags: [String] = []
        for template in templates {
            var texts = [""]
            for part in template {
                let values: [String]
                switch part {
                case .literal(let text): values = [text]
                case .pathSegment(let i): values = i < segments.count ? [String(segments[i])] : []
                case .param(let name): values = params.first { $0.name == name }.map { [$0.value] } ?? []
                case .json(let path): values = json?[path: path].map(Self.texts) ?? []
                }
                texts = texts.flatMap { prefix in values.map { prefix + $0 } }
                if texts.isEmpty { break }
            }
            tags += texts
        }
        for value in headerValues {
            tags += value.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "," }).map(String.init)
        }
        var seen = Set<String>()
        return tags.filter { !$0.isEmpty && seen.insert($0).inserted }
    }

    /// A JSON value as tag texts: a string as is, a number or boolean as written, an array one
    /// per element; `null`, objects: none.
    private static func texts(_ value: JSONValue) -> [String] {
        switch value {
        case .string(let s): return [s]
        case .int, .double, .bool: return [value.serialized]
        case .array(let items): return items.flatMap { texts($0) }
        case .null, .object: return []
        }
    }
}
