/// One problem found in a configuration file: where (key path and line) and what.
public struct ConfigIssue: Sendable, Equatable, CustomStringConvertible {
    /// Key path such as `endpoints[2].cache.ttl`; empty for the document itself.
    public var path: String
    /// 1-based line in the file, when known.
    public var line: Int?
    public var message: String

    public init(path: String, line: Int?, message: String) {
        self.path = path
        self.line = line
        self.message = message
    }

    public var description: String {
        let location = line.map { " (line \($0))" } ?? ""
        let key = path.isEmpty ? "<document>" : path
        return "\(key)\(location): \(message)"
    }
}

/// Every problem found while loading a configuration; the daemon does not start on one.
public struct ConfigError: Error, Sendable, CustomStringConvertible {
    public var file: String?
    public var issues: [ConfigIssue]

    public init(file: String?, issues: [ConfigIssue]) {
        self.file = file
        self.issues = issues
    }

    public var description: String {
        let header = "invalid configuration\(file.map { " \($0)" } ?? ""): \(issues.count) error\(issues.count == 1 ? "" : "s")"
        return ([header] + issues.map { "  \($0)" }).joined(separator: "\n")
    }

    /// EX_CONFIG from sysexits.h.
    public static let exitCode: Int32 = 78
}
