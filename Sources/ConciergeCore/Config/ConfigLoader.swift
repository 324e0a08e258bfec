import Foundation
import NIOHTTP1
import Yams

/// Reads and validates a configuration file (docs/configuration.md). The whole schema lives in
/// this type: ``build(_:_:environment:)`` reads one section per top-level key, each a function
/// of its own (this file: `session`; `ConfigLoader+Listeners.swift`, `+Upstreams.swift` and
/// `+Requests.swift`: the rest), with every key, its default and its check. Unknown keys,
/// wrong types, bad durations/sizes/regexes and dangling names are reported with their key
/// path and line.
public enum ConfigLoader {
    /// Events that `hooks[].events` may name.
    public static let eventNames: Set<String> = [
        "session.login", "session.refreshed", "session.logout", "session.refresh_throttled", "warning", "cache.invalidated",
        "upstream.down", "upstream.up", "environment.changed", "*",
    ]

    /// Loads a file. `environment` supplies `${VAR}` values and the `CONCIERGE_*` overrides.
    public static func load(path: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigError) -> ConciergeConfig {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ConfigError(file: path, issues: [ConfigIssue(path: "", line: nil, message: "cannot read file: \(error.localizedDescription)")])
        }
        do {
            return try parse(yaml: text, environment: environment)
        } catch {
            var e = error
            e.file = path
            throw e
        }
    }

    /// The configuration used by `concierge serve` without a file.
    public static func embeddedDefault(upstream: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigError) -> ConciergeConfig {
        let yaml = """
            listen:
              proxy: 127.0.0.1:8080
              admin: 127.0.0.1:8081
            storage:
              path: ./.concierge/concierge.sqlite
            upstreams:
              default: "\(upstream)"
            environment: default
            """
        return try parse(yaml: yaml, environment: environment)
    }

    public static func parse(yaml: String, environment: [String: String] = [:]) throws(ConfigError) -> ConciergeConfig {
        let root: Node
        do {
            guard let node = try Yams.compose(yaml: yaml) else {
                throw ConfigError(file: nil, issues: [ConfigIssue(path: "", line: nil, message: "the file is empty")])
            }
            root = node
        } catch let error as ConfigError {
            throw error
        } catch let error as YamlError {
            throw ConfigError(file: nil, issues: [yamlIssue(error)])
        } catch {
            throw ConfigError(file: nil, issues: [ConfigIssue(path: "", line: nil, message: "\(error)")])
        }
        let reader = YAMLReader(environment: environment)
        let config = build(root, reader, environment: environment)
        if !reader.issues.isEmpty || config == nil {
            var issues = reader.issues
            if issues.isEmpty { issues.append(ConfigIssue(path: "", line: nil, message: "invalid configuration")) }
            throw ConfigError(file: nil, issues: issues)
        }
        var result = config!
        let clientSecrets = result.sessions.values.flatMap { [$0.refresh, $0.appToken, $0.revoke] }.compactMap { $0?.clientSecret }
        result.secretValues = reader.substitutedValues.union(clientSecrets).sorted()
        return result
    }

    /// The keys the loader allows in each mapping it read while loading `yaml`, by schema path
    /// (`""` for the top level, `listen`, `endpoints[]`, `endpoints[].cache`…), whether or not
    /// the document is valid. A mapping is read only when the document has it, so a caller
    /// that wants the whole schema adds the sections it finds (see `ConfigKeysDocumentedTests`).
    public static func schemaKeys(yaml: String) -> [String: Set<String>] {
        guard let root = try? Yams.compose(yaml: yaml) else { return [:] }
        let reader = YAMLReader(environment: [:])
        _ = build(root, reader, environment: [:])
        return reader.allowedKeys
    }

    static func yamlIssue(_ error: YamlError) -> ConfigIssue {
        switch error {
        case .scanner(_, let problem, let mark, _), .parser(_, let problem, let mark, _), .composer(_, let problem, let mark, _):
            return ConfigIssue(path: "", line: mark.line, message: "YAML syntax error: \(problem)")
        default:
            return ConfigIssue(path: "", line: nil, message: "YAML error: \(error)")
        }
    }

    // MARK: - Schema

    static let topKeys = ["listen", "admin", "storage", "upstreams", "environment", "common", "envelope", "session",
                          "sessions", "cache", "endpoints", "log", "limits", "signing", "hooks", "fleet", "telemetry"]

    /// The whole schema, one section per top-level key, in the order their errors are reported.
    static func build(_ root: Node, _ r: YAMLReader, environment: [String: String]) -> ConciergeConfig? {
        guard let top = r.mapping(root, "", allowed: topKeys) else { return nil }
        var listenerSessions: [ListenerSessionReference] = []
        let listen = listenSection(top["listen"], r, sessions: &listenerSessions)
        let admin = adminSection(top["admin"], r, environment: environment)
        let storage = storageSection(top["storage"], r)
        let upstreams = upstreamsSection(top["upstreams"], root: root, r)
        let upstreamNames = Set(upstreams.map(\.name))
        let environmentName = environmentSection(top["environment"], upstreams: upstreams, r, environment: environment)
        let common = commonSection(top["common"], r)
        let envelope = envelopeSection(top["envelope"], r)
        // Before the endpoints, which may inherit it.
        let signing = top["signing"].flatMap { YAMLReader.isNull($0) ? nil : signingConfig($0, "signing", r) }
        let sessions = sessionsSection(top, r, upstreamNames: upstreamNames)
        let cache = cacheSection(top["cache"], r, signing: signing)
        var endpoints = endpointsSection(top["endpoints"], r, cache: cache, upstreamNames: upstreamNames)
        assignSessions(&endpoints, sessions, endpointsNode: top["endpoints"], listen: listen,
                       listenerSessions: listenerSessions.map(\.name), r)
        let log = logSection(top["log"], r)
        let limits = limitsSection(top["limits"], r)
        let hooks = hooksSection(top["hooks"], r)
        let fleet = fleetSection(top["fleet"], r)
        let telemetry = telemetrySection(top["telemetry"], r)
        guard !upstreams.isEmpty else { return nil }
        var config = ConciergeConfig(listen: listen, admin: admin, storage: storage, upstreams: upstreams, environment: environmentName,
                                     common: common, envelope: envelope, session: sessions.defaultSession, cache: cache, endpoints: endpoints,
                                     log: log, limits: limits, signing: signing, hooks: hooks, fleet: fleet)
        (config.sessions, config.sessionNames) = (sessions.byName, sessions.names)
        config.telemetry = telemetry
        checkListenerSessions(listenerSessions, known: config.knownSessionNames, r)
        return config
    }

    /// A list of business codes: integers or strings; numeric strings count as integers.
    static func codeList(_ node: Node, _ path: String, _ r: YAMLReader) -> (numbers: Set<Int>, texts: Set<String>)? {
        guard let items = r.sequence(node, path) else { return nil }
        var numbers = Set<Int>()
        var texts = Set<String>()
        for (i, item) in items.enumerated() {
            guard let text = r.nonEmptyString(item, "\(path)[\(i)]") else { continue }
            switch BusinessCode(text.trimmingCharacters(in: .whitespaces)) {
            case .number(let n): numbers.insert(n)
            case .text(let t): texts.insert(t)
            }
        }
        return (numbers, texts)
    }

    static let tokenEndpointKeys = ["method", "path", "upstream", "encoding", "headers", "query", "body", "access_token",
                                    "refresh_token", "expires_in", "max_replays", "timeout", "logout_errors", "retry_errors",
                                    "max_backoff", "client_id", "client_secret", "client_auth"]

    /// `session.refresh` and `session.app_token`: a token request Concierge sends itself.
    /// `session.revoke`: a request whose reply is only a status.
    static let revokeKeys = ["method", "path", "upstream", "encoding", "headers", "query", "body", "timeout", "client_id", "client_secret",
                             "client_auth"]

    /// - Parameter readsReply: the reply holds tokens (`access_token` is required); `false` for
    ///   a revocation, whose reply is only a status.
    static func tokenEndpoint(_ node: Node, _ path: String, _ r: YAMLReader, defaultMethod: String,
                              upstreamNodes: inout [(path: String, node: Node, name: String)],
                              readsReply: Bool = true) -> ConciergeConfig.TokenEndpoint? {
        guard let m = r.mapping(node, path, allowed: readsReply ? tokenEndpointKeys : revokeKeys) else { return nil }
        var t = ConciergeConfig.TokenEndpoint(method: defaultMethod, path: "", upstream: nil, body: nil, accessToken: "",
                                              refreshToken: nil, maxReplays: 3, timeout: .seconds(10))
        if let v = m["method"], let s = r.nonEmptyString(v, "\(path).method") {
            if HTTPFieldSyntax.isToken(s) { t.method = s.uppercased() } else { r.fail("\(path).method", v, "invalid method '\(HTTPFieldSyntax.printable(s))'") }
        }
        if let v = m["path"], let s = r.nonEmptyString(v, "\(path).path") {
            if s.hasPrefix("/") { t.path = s } else { r.fail("\(path).path", v, "must start with /") }
        } else if m["path"] == nil { r.fail("\(path).path", node, "missing: the token request's path") }
        if let v = m["upstream"], !YAMLReader.isNull(v), let s = r.nonEmptyString(v, "\(path).upstream") {
            t.upstream = s
            upstreamNodes.append(("\(path).upstream", v, s))
        }
        if let v = m["encoding"], let s = r.string(v, "\(path).encoding") {
            if let e = ConciergeConfig.TokenEndpoint.Encoding(rawValue: s) { t.encoding = e } else {
                r.fail("\(path).encoding", v, "expected form or json, found '\(s)'")
            }
        }
        if let v = m["headers"] { t.headers = r.headerFields(v, "\(path).headers") }
        if let v = m["query"] {
            for (k, qv) in r.pairs(v, "\(path).query") {
                if let s = r.string(qv, "\(path).query.\(k)") { t.query.append((k, s)) }
            }
        }
        if let v = m["body"] {
            t.body = r.json(v, "\(path).body")
            if t.encoding == .form, let body = t.body {
                guard case .object(let members) = body else {
                    r.fail("\(path).body", v, "a form body must be a mapping of field names to values")
                    return t
                }
                for (k, member) in members {
                    if case .object = member { r.fail("\(path).body.\(k)", v, "a form field must be a plain value") }
                    if case .array = member { r.fail("\(path).body.\(k)", v, "a form field must be a plain value") }
                }
            }
        }
        if let v = m["access_token"], let s = r.nonEmptyString(v, "\(path).access_token") { t.accessToken = s } else if m["access_token"] == nil, readsReply {
            r.fail("\(path).access_token", node, "missing: path of the access token in the reply")
        }
        if let v = m["refresh_token"] { t.refreshToken = r.nonEmptyString(v, "\(path).refresh_token") }
        if let v = m["expires_in"] { t.expiresIn = r.nonEmptyString(v, "\(path).expires_in") }
        if let v = m["max_replays"], let i = r.int(v, "\(path).max_replays", range: 0...10) { t.maxReplays = i }
        if let v = m["timeout"], let d = r.duration(v, "\(path).timeout") {
            if d > .zero { t.timeout = d } else { r.fail("\(path).timeout", v, "must be greater than 0") }
        }
        clientAuthentication(m, path, r, into: &t)
        return t
    }

    /// `logout_errors`, `retry_errors`, `max_backoff`, `client_id`, `client_secret` and
    /// `client_auth` of a token request.
    static func clientAuthentication(_ m: [String: Node], _ path: String, _ r: YAMLReader, into t: inout ConciergeConfig.TokenEndpoint) {
        if let v = m["logout_errors"], let list = r.stringList(v, "\(path).logout_errors") { t.logoutErrors = Set(list) }
        if let v = m["retry_errors"], let list = r.stringList(v, "\(path).retry_errors") {
            t.retryErrors = Set(list)
            for both in t.retryErrors.intersection(t.logoutErrors).sorted() {
                r.fail("\(path).retry_errors", v, "'\(both)' is in logout_errors too: a refusal either ends the session or is retried")
            }
        }
        if let v = m["max_backoff"], let d = r.duration(v, "\(path).max_backoff") {
            if d >= .seconds(1) { t.maxBackoff = d } else { r.fail("\(path).max_backoff", v, "must be at least 1s") }
        }
        if let v = m["client_id"] { t.clientID = r.nonEmptyString(v, "\(path).client_id") }
        if let v = m["client_secret"] { t.clientSecret = r.nonEmptyString(v, "\(path).client_secret") }
        if let v = m["client_auth"], let s = r.string(v, "\(path).client_auth") {
            if let auth = ConciergeConfig.TokenEndpoint.ClientAuth(rawValue: s) { t.clientAuth = auth } else {
                r.fail("\(path).client_auth", v, "expected post or basic, found '\(s)'")
            }
        }
        if t.clientSecret != nil, t.clientID == nil { r.fail("\(path).client_id", m["client_secret"], "missing: client_secret needs client_id") }
    }

    static func cannedReply(_ node: Node, _ path: String, _ r: YAMLReader) -> CannedReply? {
        guard let m = r.mapping(node, path, allowed: ["status", "body"]) else { return nil }
        var reply = CannedReply(status: 200, body: .object([:]))
        if let n = m["status"], let s = r.int(n, "\(path).status", range: 100...599) { reply.status = s }
        if let n = m["body"], let b = r.json(n, "\(path).body") { reply.body = b }
        return reply
    }
}
