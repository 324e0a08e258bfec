import ArgumentParser
import ConciergeCore
import Foundation

/// `concierge check-config`: validates a file and prints the effective configuration.
struct CheckConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "check-config",
                                                    abstract: "Validate a configuration file; exit 0, or 78 listing every error.")

    @Option(help: "Configuration file to check.")
    var config: String

    func run() throws {
        let loaded = try ConfigSource.loadOrExit(config)
        if loaded.admin.token == nil, let file = loaded.admin.tokenFile {
            switch AdminTokenFile.read(file) {
            case .success: break
            case .failure(.missing):
                // Often checked away from the machine it is for; `serve` refuses to start without it.
                print("warning: admin.token_file: \(file) does not exist here; `concierge serve` needs it")
            case .failure(let problem):
                var error = problem.configError
                error.file = config
                printError(error.description)
                throw ExitCode(ConfigError.exitCode)
            }
        }
        if case .tcp(let host, _) = loaded.listen.admin, !(host == "localhost" || host == "::1" || host.hasPrefix("127.")) {
            print("warning: listen.admin \(loaded.listen.admin) is not a loopback address")
        }
        print(EffectiveConfig.describe(loaded))
        print("configuration OK: \(config)")
    }
}

/// A readable dump of a loaded configuration (secrets masked).
enum EffectiveConfig {
    static func describe(_ c: ConciergeConfig) -> String {
        func d(_ x: Duration) -> String {
            let ms = x.components.seconds * 1000 + x.components.attoseconds / 1_000_000_000_000_000
            return ms % 1000 == 0 ? "\(ms / 1000)s" : "\(ms)ms"
        }
        func codes(_ numbers: Set<Int>, _ texts: Set<String>) -> String {
            texts.isEmpty ? "\(numbers.sorted())" : "[\((numbers.sorted().map(String.init) + texts.sorted().map { "\"\($0)\"" }).joined(separator: ", "))]"
        }
        var lines: [String] = []
        lines.append("listen: proxy \(c.listen.proxyListeners.map(\.description).joined(separator: ", ")), admin \(c.listen.admin)")
        lines.append("admin token: \(c.admin.token != nil ? "set (inline or CONCIERGE_ADMIN_TOKEN)" : c.admin.tokenFile.map { "from \($0)" } ?? "NOT SET (admin listener disabled)")")
        lines.append("storage: \(c.storage.path), max \(c.storage.maxBytes) bytes, memory tier \(c.storage.memoryBytes) bytes")
        lines.append("upstreams:")
        for u in c.upstreams {
            lines.append("  \(u.name): \(u.baseURL)\(u.caFile.map { " (trusts \($0))" } ?? "")\(u.name == c.environment ? "  (current environment)" : "")")
        }
        if !c.common.headers.isEmpty || !c.common.params.isEmpty {
            lines.append("common: headers \(c.common.headers.map { "\($0.name)=\($0.value)" }.joined(separator: ", ")); params \(c.common.params.map { "\($0.name)=\($0.value)" }.joined(separator: ", "))")
        }
        lines.append("envelope: code at '\(c.envelope.codePath)', success \(codes(c.envelope.successCodes, c.envelope.successTextCodes)), refresh \(codes(c.envelope.refreshCodes, c.envelope.refreshTextCodes)), logout \(codes(c.envelope.logoutCodes, c.envelope.logoutTextCodes))\(c.envelope.successWhenMissing ? ", success when missing" : "")")
        lines.append("session: inject \(c.session.inject.map { "\($0)" }.joined(separator: ", ")); capture from \(c.session.capture?.endpoint ?? "-"); refresh \(c.session.refresh.map { "\($0.method) \($0.path) (\($0.encoding.rawValue)), max \($0.maxReplays) replays" } ?? "-")\(c.session.appToken.map { "; app token \($0.method) \($0.path)" } ?? "")")
        lines.append("cache: version \(c.cache.version), volatile \(c.cache.volatileParams.sorted()), default ttl \(d(c.cache.defaultTTL))")
        lines.append("endpoints (first match wins):")
        for (i, e) in c.endpoints.enumerated() {
            var parts = ["[\(i)] \(e.name)", "login=\(e.login.rawValue)"]
            if e.isCacheable { parts.append("cache ttl=\(d(e.cache.ttl)) scope=\(e.cache.scope.rawValue) swr=\(d(e.cache.staleWhileRevalidate)) sie=\(d(e.cache.staleIfError))") }
            if !e.envelope { parts.append("envelope=false (streamed)") }
            if let u = e.upstream { parts.append("upstream=\(u)") }
            if let t = e.timeout { parts.append("timeout=\(d(t))") }
            if !e.invalidates.isEmpty { parts.append("invalidates=\(e.invalidates)") }
            if let u = e.unwrap { parts.append("unwrap=\(u)") }
            lines.append("  " + parts.joined(separator: " "))
        }
        lines.append("log: \(c.log.format.rawValue), level \(c.log.level.rawValue), requests \(c.log.requests)")
        if let s = c.signing { lines.append("signing: \(s.algorithm.rawValue), \(s.encoding.rawValue), param \(s.param), secret ***") }
        if !c.hooks.isEmpty { lines.append("hooks: \(c.hooks.map { "\($0.url) \($0.events.sorted())" }.joined(separator: "; "))") }
        return lines.joined(separator: "\n")
    }
}
