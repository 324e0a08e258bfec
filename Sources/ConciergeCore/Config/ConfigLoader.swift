import Foundation
import NIOHTTP1
import Yams

/// Reads and validates a configuration file (docs/configuration.md). The whole schema lives here: every
/// key, its default and its check. Unknown keys, wrong types, bad durations/sizes/regexes
/// and dangling names are reported with their key path and line.
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
        result.secretValues = reader.substitutedValues.sorted()
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
                          "cache", "endpoints", "log", "limits", "signing", "hooks"]

    static func build(_ root: Node, _ r: YAMLReader, environment: [String: String]) -> ConciergeConfig? {
        guard let top = r.mapping(root, "", allowed: topKeys) else { return nil }

        // listen
        var listen = ConciergeConfig.Listen(proxy: .tcp(host: "127.0.0.1", port: 8080), admin: .tcp(host: "127.0.0.1", port: 8081))
        if let node = top["listen"], let m = r.mapping(node, "listen", allowed: ["proxy", "admin", "allowed_hosts"]) {
            if let n = m["allowed_hosts"], let items = r.sequence(n, "listen.allowed_hosts") {
                for (i, item) in items.enumerated() {
                    guard let s = r.nonEmptyString(item, "listen.allowed_hosts[\(i)]") else { continue }
                    let name = s.hasPrefix(".") ? String(s.dropFirst()) : s
                    if HostPolicy.hostPart(of: name) == nil || name.contains(":") && !name.hasPrefix("[") {
                        r.fail("listen.allowed_hosts[\(i)]", item, "expected a host name or .domain (no port, no scheme), found '\(HTTPFieldSyntax.printable(s))'")
                    } else {
                        listen.allowedHosts.append(s)
                    }
                }
            }
            if let n = m["proxy"], let s = r.string(n, "listen.proxy") {
                if let a = SocketAddressSpec.parse(s), case .tcp = a { listen.proxy = a } else { r.fail("listen.proxy", n, "expected host:port, found '\(s)'") }
            }
            if let n = m["admin"], let s = r.string(n, "listen.admin") {
                if let a = SocketAddressSpec.parse(s) { listen.admin = a } else { r.fail("listen.admin", n, "expected host:port or unix:/path, found '\(s)'") }
            }
        }

        // admin
        var admin = ConciergeConfig.Admin(token: nil, tokenFile: nil)
        if let node = top["admin"], let m = r.mapping(node, "admin", allowed: ["token", "token_file"]) {
            if let n = m["token"] { admin.token = r.nonEmptyString(n, "admin.token") }
            if let n = m["token_file"] { admin.tokenFile = r.nonEmptyString(n, "admin.token_file") }
        }
        if let envToken = environment["CONCIERGE_ADMIN_TOKEN"], !envToken.isEmpty, admin.token == nil, admin.tokenFile == nil {
            admin.token = envToken
        }

        // storage
        var storage = ConciergeConfig.Storage(path: "./.concierge/concierge.sqlite", maxBytes: 512 << 20, memoryBytes: 64 << 20)
        if let node = top["storage"], let m = r.mapping(node, "storage", allowed: ["path", "max_bytes", "memory_bytes"]) {
            if let n = m["path"], let s = r.nonEmptyString(n, "storage.path") { storage.path = s }
            if let n = m["max_bytes"], let v = r.size(n, "storage.max_bytes") { storage.maxBytes = v }
            if let n = m["memory_bytes"], let v = r.size(n, "storage.memory_bytes") { storage.memoryBytes = v }
        }

        // upstreams
        var upstreams: [ConciergeConfig.Upstream] = []
        if let node = top["upstreams"] {
            r.declareKeys("upstreams.<name>", upstreamKeys)
            for (name, value) in r.pairs(node, "upstreams") {
                if let upstream = upstream(name: name, value, r) { upstreams.append(upstream) }
            }
            if upstreams.isEmpty, r.issues.isEmpty { r.fail("upstreams", node, "at least one upstream is required") }
        } else {
            r.fail("upstreams", root, "missing: at least one named upstream base URL is required")
        }
        let upstreamNames = Set(upstreams.map(\.name))

        // environment
        var environmentName = upstreams.first(where: { $0.name == "release" })?.name ?? upstreams.first?.name ?? ""
        if let node = top["environment"], let s = r.nonEmptyString(node, "environment") {
            if upstreamNames.contains(s) || upstreams.isEmpty { environmentName = s } else {
                r.fail("environment", node, "names no upstream: '\(s)' (known: \(upstreamNames.sorted().joined(separator: ", ")))")
            }
        }
        if let override = environment["CONCIERGE_ENVIRONMENT"], !override.isEmpty {
            if upstreamNames.contains(override) { environmentName = override } else {
                r.fail("environment", nil, "CONCIERGE_ENVIRONMENT names no upstream: '\(override)'")
            }
        }

        // common
        var common = ConciergeConfig.Common(headers: HTTPHeaders(), params: [])
        if let node = top["common"], let m = r.mapping(node, "common", allowed: ["headers", "params"]) {
            if let n = m["headers"] { common.headers = r.headerFields(n, "common.headers") }
            if let n = m["params"] {
                for (k, v) in r.pairs(n, "common.params") {
                    if let s = r.string(v, "common.params.\(k)") { common.params.append((k, s)) }
                }
            }
        }

        // envelope
        var envelope = ConciergeConfig.Envelope(
            codePath: "code", messagePath: "msg", successCodes: [200], refreshCodes: [801], logoutCodes: [802],
            unavailable: CannedReply(status: 502, body: ["code": -1, "msg": "service temporarily unavailable"]),
            invalid: CannedReply(status: 502, body: ["code": -2, "msg": "response failed validation"]),
            warningCodes: [:])
        if let node = top["envelope"], let m = r.mapping(node, "envelope", allowed: [
            "code_path", "message_path", "success_codes", "refresh_codes", "logout_codes", "unavailable", "invalid", "warning_codes",
            "success_when_missing",
        ]) {
            if let n = m["code_path"], let s = r.nonEmptyString(n, "envelope.code_path") { envelope.codePath = s }
            if let n = m["message_path"], let s = r.nonEmptyString(n, "envelope.message_path") { envelope.messagePath = s }
            if let n = m["success_codes"], let v = codeList(n, "envelope.success_codes", r) {
                let missingIsSuccess = m["success_when_missing"].flatMap { $0.scalar?.string.lowercased() } == "true"
                if v.numbers.isEmpty, v.texts.isEmpty, !missingIsSuccess {
                    r.fail("envelope.success_codes", n, "must list at least one code (or set success_when_missing: true)")
                }
                envelope.successCodes = v.numbers
                envelope.successTextCodes = v.texts
            }
            if let n = m["refresh_codes"], let v = codeList(n, "envelope.refresh_codes", r) {
                envelope.refreshCodes = v.numbers
                envelope.refreshTextCodes = v.texts
            }
            if let n = m["logout_codes"], let v = codeList(n, "envelope.logout_codes", r) {
                envelope.logoutCodes = v.numbers
                envelope.logoutTextCodes = v.texts
            }
            if let n = m["success_when_missing"], let b = r.bool(n, "envelope.success_when_missing") { envelope.successWhenMissing = b }
            if let n = m["unavailable"], let c = cannedReply(n, "envelope.unavailable", r) { envelope.unavailable = c }
            if let n = m["invalid"], let c = cannedReply(n, "envelope.invalid", r) { envelope.invalid = c }
            if let n = m["warning_codes"] {
                for (k, v) in r.pairs(n, "envelope.warning_codes") {
                    let path = "envelope.warning_codes.\(k)"
                    guard let code = Int(k) else { r.fail(path, v, "expected an integer business code, found '\(k)'"); continue }
                    guard let names = r.stringList(v, path) else { continue }
                    var actions = Set<ConciergeConfig.WarningAction>()
                    for (i, name) in names.enumerated() {
                        if let a = ConciergeConfig.WarningAction(rawValue: name) { actions.insert(a) } else {
                            r.fail("\(path)[\(i)]", v, "unknown action '\(name)' (expected event, logout or log)")
                        }
                    }
                    envelope.warningCodes[code] = actions
                }
            }
            let overlap = envelope.successCodes.intersection(envelope.refreshCodes.union(envelope.logoutCodes))
            if !overlap.isEmpty { r.fail("envelope", node, "codes \(overlap.sorted()) are both success and refresh/logout codes") }
            let textOverlap = envelope.successTextCodes.intersection(envelope.refreshTextCodes.union(envelope.logoutTextCodes))
            if !textOverlap.isEmpty { r.fail("envelope", node, "codes \(textOverlap.sorted()) are both success and refresh/logout codes") }
        }

        // signing (before endpoints, which may inherit it)
        var signing: SigningConfig? = nil
        if let node = top["signing"], !YAMLReader.isNull(node) {
            signing = signingConfig(node, "signing", r)
        }

        // session
        var session = ConciergeConfig.Session(inject: [], capture: nil, refresh: nil,
                                              notLoggedIn: CannedReply(status: 401, body: ["code": 800, "msg": "not logged in"]))
        var captureNode: Node? = nil
        var tokenUpstreamNodes: [(path: String, node: Node, name: String)] = []
        if let node = top["session"], let m = r.mapping(node, "session", allowed: [
            "inject", "capture", "refresh", "not_logged_in", "app_token", "refresh_on_status", "refresh_ahead", "max_refreshes",
        ]) {
            if let n = m["inject"], let items = r.sequence(n, "session.inject") {
                for (i, item) in items.enumerated() {
                    let path = "session.inject[\(i)]"
                    guard let im = r.mapping(item, path, allowed: ["query", "header", "format", "body"]) else { continue }
                    let places = ["query", "header", "body"].filter { im[$0] != nil }
                    guard places.count == 1 else {
                        r.fail(path, item, "give exactly one of query, header or body")
                        continue
                    }
                    if let q = im["query"], let s = r.nonEmptyString(q, "\(path).query") {
                        session.inject.append(.query(name: s))
                    } else if let h = im["header"], let s = r.nonEmptyString(h, "\(path).header") {
                        if !HTTPFieldSyntax.isToken(s) { r.fail("\(path).header", h, "invalid header name '\(HTTPFieldSyntax.printable(s))' (must be an RFC 9110 token)") }
                        var format = "{access_token}"
                        if let f = im["format"], let fs = r.nonEmptyString(f, "\(path).format") {
                            if !fs.contains("{access_token}") { r.fail("\(path).format", f, "must contain {access_token}") }
                            if !HTTPFieldSyntax.isFieldValue(fs) { r.fail("\(path).format", f, "not a valid header value (control characters or surrounding white space)") }
                            format = fs
                        }
                        session.inject.append(.header(name: s, format: format))
                    } else if let b = im["body"], let s = r.nonEmptyString(b, "\(path).body") {
                        session.inject.append(.body(field: s))
                    }
                    if im["format"] != nil, im["header"] == nil { r.fail("\(path).format", im["format"], "format applies to header injection only") }
                }
            }
            if let n = m["capture"], let cm = r.mapping(n, "session.capture", allowed: [
                "endpoint", "access_token", "refresh_token", "user_id", "expires_in", "redact",
            ]) {
                captureNode = cm["endpoint"] ?? n
                let endpoint = cm["endpoint"].flatMap { r.nonEmptyString($0, "session.capture.endpoint") }
                let access = cm["access_token"].flatMap { r.nonEmptyString($0, "session.capture.access_token") }
                if cm["endpoint"] == nil { r.fail("session.capture.endpoint", n, "missing: the login endpoint's name") }
                if cm["access_token"] == nil { r.fail("session.capture.access_token", n, "missing: path of the access token in the login reply") }
                if let endpoint, let access {
                    var capture = ConciergeConfig.Capture(
                        endpoint: endpoint, accessToken: access,
                        refreshToken: cm["refresh_token"].flatMap { r.nonEmptyString($0, "session.capture.refresh_token") },
                        userID: cm["user_id"].flatMap { r.nonEmptyString($0, "session.capture.user_id") })
                    capture.expiresIn = cm["expires_in"].flatMap { r.nonEmptyString($0, "session.capture.expires_in") }
                    if let v = cm["redact"], let b = r.bool(v, "session.capture.redact") { capture.redact = b }
                    session.capture = capture
                }
            }
            if let n = m["refresh"], let t = tokenEndpoint(n, "session.refresh", r, defaultMethod: "POST", upstreamNodes: &tokenUpstreamNodes) {
                session.refresh = t
            }
            if let n = m["app_token"], let t = tokenEndpoint(n, "session.app_token", r, defaultMethod: "GET", upstreamNodes: &tokenUpstreamNodes) {
                session.appToken = t
                for other in ["capture", "refresh"] where m[other] != nil {
                    r.fail("session.app_token", n, "app_token cannot be combined with session.\(other) (line \((m[other]?.mark?.line).map(String.init) ?? "?")): an app token replaces the user login")
                }
                if m["inject"] == nil { r.fail("session.app_token", n, "needs session.inject: where the app token goes in each request") }
            }
            if let n = m["refresh_on_status"], let list = r.intList(n, "session.refresh_on_status") {
                for (i, status) in list.enumerated() where !(400...499).contains(status) {
                    r.fail("session.refresh_on_status[\(i)]", n, "expected a 4xx status, found \(status)")
                }
                session.refreshOnStatus = Set(list.filter { (400...499).contains($0) })
            }
            if let n = m["refresh_ahead"], let d = r.duration(n, "session.refresh_ahead") { session.refreshAhead = d }
            if let n = m["max_refreshes"], let lm = r.mapping(n, "session.max_refreshes", allowed: ["count", "within"]) {
                if let v = lm["count"], let c = r.int(v, "session.max_refreshes.count", range: 1...1000) { session.maxRefreshes.count = c }
                if let v = lm["within"], let d = r.duration(v, "session.max_refreshes.within") {
                    if d > .zero { session.maxRefreshes.within = d } else { r.fail("session.max_refreshes.within", v, "must be greater than 0") }
                }
            }
            if let n = m["not_logged_in"], let c = cannedReply(n, "session.not_logged_in", r) { session.notLoggedIn = c }
        }
        for check in tokenUpstreamNodes where !upstreamNames.contains(check.name) {
            r.fail(check.path, check.node, "names no upstream: '\(check.name)' (known: \(upstreamNames.sorted().joined(separator: ", ")))")
        }

        // cache
        var cache = ConciergeConfig.Cache(version: 1, volatileParams: ["timestamp", "signature", "_"], defaultTTL: .zero)
        if let node = top["cache"], let m = r.mapping(node, "cache", allowed: ["version", "volatile_params", "default_ttl"]) {
            if let n = m["version"], let v = r.int(n, "cache.version", range: 0...Int(Int32.max)) { cache.version = v }
            if let n = m["volatile_params"], let v = r.stringList(n, "cache.volatile_params") { cache.volatileParams = Set(v) }
            if let n = m["default_ttl"], let d = r.duration(n, "cache.default_ttl") { cache.defaultTTL = d }
        }
        if let signing {
            cache.volatileParams.insert(signing.param)
            if let t = signing.timestampParam { cache.volatileParams.insert(t) }
            if let n = signing.nonceParam { cache.volatileParams.insert(n) }
        }

        // endpoints
        var endpoints: [EndpointPolicy] = []
        var invalidateChecks: [(path: String, node: Node, name: String)] = []
        if let node = top["endpoints"], let items = r.sequence(node, "endpoints") {
            var names = Set<String>()
            for (i, item) in items.enumerated() {
                let path = "endpoints[\(i)]"
                if let e = endpoint(item, path, r, cache: cache, upstreamNames: upstreamNames, invalidateChecks: &invalidateChecks) {
                    if !names.insert(e.name).inserted {
                        r.fail("\(path).name", item, "duplicate endpoint name '\(e.name)'")
                    }
                    endpoints.append(e)
                }
            }
        }
        let endpointNames = Set(endpoints.map(\.name))
        for check in invalidateChecks where !endpointNames.contains(check.name) {
            r.fail(check.path, check.node, "names no endpoint: '\(check.name)'")
        }
        if let capture = session.capture, !endpointNames.contains(capture.endpoint) {
            r.fail("session.capture.endpoint", captureNode, "names no endpoint: '\(capture.endpoint)'")
        }

        // log
        var log = ConciergeConfig.Log(format: .text, level: .info, requests: true)
        if let node = top["log"], let m = r.mapping(node, "log", allowed: ["format", "level", "requests"]) {
            if let n = m["format"], let s = r.string(n, "log.format") {
                if let f = ConciergeConfig.Log.Format(rawValue: s) { log.format = f } else { r.fail("log.format", n, "expected text or json, found '\(s)'") }
            }
            if let n = m["level"], let s = r.string(n, "log.level") {
                if let l = ConciergeConfig.Log.Level(rawValue: s) { log.level = l } else { r.fail("log.level", n, "expected debug, info, warning or error, found '\(s)'") }
            }
            if let n = m["requests"], let b = r.bool(n, "log.requests") { log.requests = b }
        }

        // limits
        var limits = ConciergeConfig.Limits(maxHeaderBytes: 16 << 10, maxBodyBytes: 8 << 20, headerTimeout: .seconds(10),
                                            defaultTimeout: .seconds(30), batchConcurrency: 8, shutdownGrace: .seconds(10))
        if let node = top["limits"], let m = r.mapping(node, "limits", allowed: [
            "max_header_bytes", "max_body_bytes", "header_timeout", "upstream_timeout", "batch_concurrency", "shutdown_grace",
            "body_timeout", "underscores_in_headers",
        ]) {
            if let n = m["body_timeout"], let v = r.duration(n, "limits.body_timeout") { limits.bodyTimeout = v }
            if let n = m["underscores_in_headers"], let b = r.bool(n, "limits.underscores_in_headers") { limits.underscoresInHeaders = b }
            if let n = m["max_header_bytes"], let v = r.size(n, "limits.max_header_bytes") { limits.maxHeaderBytes = v }
            if let n = m["max_body_bytes"], let v = r.size(n, "limits.max_body_bytes") { limits.maxBodyBytes = v }
            if let n = m["header_timeout"], let v = r.duration(n, "limits.header_timeout") { limits.headerTimeout = v }
            if let n = m["upstream_timeout"], let v = r.duration(n, "limits.upstream_timeout") { limits.defaultTimeout = v }
            if let n = m["batch_concurrency"], let v = r.int(n, "limits.batch_concurrency", range: 1...100) { limits.batchConcurrency = v }
            if let n = m["shutdown_grace"], let v = r.duration(n, "limits.shutdown_grace") { limits.shutdownGrace = v }
        }

        // hooks
        var hooks: [ConciergeConfig.Hook] = []
        if let node = top["hooks"], let items = r.sequence(node, "hooks") {
            for (i, item) in items.enumerated() {
                let path = "hooks[\(i)]"
                guard let m = r.mapping(item, path, allowed: ["url", "events"]) else { continue }
                guard let un = m["url"], let url = r.nonEmptyString(un, "\(path).url") else {
                    if m["url"] == nil { r.fail("\(path).url", item, "missing: the URL to POST events to") }
                    continue
                }
                guard url.hasPrefix("http://") || url.hasPrefix("https://") else {
                    r.fail("\(path).url", un, "expected an http:// or https:// URL, found '\(url)'")
                    continue
                }
                var events: Set<String> = ["*"]
                if let en = m["events"], let list = r.stringList(en, "\(path).events") {
                    for (j, e) in list.enumerated() where !eventNames.contains(e) {
                        r.fail("\(path).events[\(j)]", en, "unknown event '\(e)'")
                    }
                    events = Set(list)
                }
                hooks.append(ConciergeConfig.Hook(url: url, events: events))
            }
        }

        guard !upstreams.isEmpty else { return nil }
        return ConciergeConfig(listen: listen, admin: admin, storage: storage, upstreams: upstreams, environment: environmentName,
                               common: common, envelope: envelope, session: session, cache: cache, endpoints: endpoints,
                               log: log, limits: limits, signing: signing, hooks: hooks)
    }

    static let endpointKeys = ["name", "match", "login", "cache", "envelope", "upstream", "timeout", "invalidates",
                               "validate", "unwrap", "sign"]

    static func endpoint(_ node: Node, _ path: String, _ r: YAMLReader, cache: ConciergeConfig.Cache,
                         upstreamNames: Set<String>, invalidateChecks: inout [(path: String, node: Node, name: String)]) -> EndpointPolicy? {
        guard let m = r.mapping(node, path, allowed: endpointKeys) else { return nil }
        guard let nameNode = m["name"], let name = r.nonEmptyString(nameNode, "\(path).name") else {
            if m["name"] == nil { r.fail("\(path).name", node, "missing: every endpoint needs a name") }
            return nil
        }
        guard let matchNode = m["match"], let matchText = r.nonEmptyString(matchNode, "\(path).match") else {
            if m["match"] == nil { r.fail("\(path).match", node, "missing: e.g. 'GET /api/items'") }
            return nil
        }
        var policy = EndpointPolicy.passThrough
        policy.name = name
        policy.envelope = true
        do {
            policy.match = try EndpointPattern.parse(matchText)
        } catch {
            switch error {
            case .badRegex(let message): r.fail("\(path).match", matchNode, "invalid regex: \(message)")
            case .badMethod(let method): r.fail("\(path).match", matchNode, "invalid method '\(method)'")
            case .badPath(let p): r.fail("\(path).match", matchNode, "invalid path '\(p)' (must start with / or ~)")
            case .empty: r.fail("\(path).match", matchNode, "must not be empty")
            }
        }
        if let n = m["login"], let s = r.string(n, "\(path).login") {
            if let l = EndpointPolicy.Login(rawValue: s) { policy.login = l } else { r.fail("\(path).login", n, "expected required, optional or none, found '\(s)'") }
        }
        var explicitScope: EndpointPolicy.Scope? = nil
        policy.cache.ttl = cache.defaultTTL
        if let n = m["cache"], let cm = r.mapping(n, "\(path).cache", allowed: ["ttl", "scope", "stale_if_error", "stale_while_revalidate", "version"]) {
            if let v = cm["ttl"], let d = r.duration(v, "\(path).cache.ttl") { policy.cache.ttl = d }
            if let v = cm["scope"], let s = r.string(v, "\(path).cache.scope") {
                if let sc = EndpointPolicy.Scope(rawValue: s) { explicitScope = sc } else { r.fail("\(path).cache.scope", v, "expected user or shared, found '\(s)'") }
            }
            if let v = cm["stale_if_error"], let d = r.duration(v, "\(path).cache.stale_if_error") { policy.cache.staleIfError = d }
            if let v = cm["stale_while_revalidate"], let d = r.duration(v, "\(path).cache.stale_while_revalidate") { policy.cache.staleWhileRevalidate = d }
            if let v = cm["version"], let i = r.int(v, "\(path).cache.version", range: 0...Int(Int32.max)) { policy.cache.version = i }
        }
        policy.cache.scope = explicitScope ?? (policy.login == .required ? .user : .shared)
        policy.scopeIsExplicit = explicitScope != nil
        if let n = m["envelope"], let b = r.bool(n, "\(path).envelope") { policy.envelope = b }
        if let n = m["upstream"], !YAMLReader.isNull(n), let s = r.nonEmptyString(n, "\(path).upstream") {
            if upstreamNames.contains(s) { policy.upstream = s } else {
                r.fail("\(path).upstream", n, "names no upstream: '\(s)' (known: \(upstreamNames.sorted().joined(separator: ", ")))")
            }
        }
        if let n = m["timeout"], let d = r.duration(n, "\(path).timeout") {
            if d > .zero { policy.timeout = d } else { r.fail("\(path).timeout", n, "must be greater than 0") }
        }
        if let n = m["invalidates"], let list = r.stringList(n, "\(path).invalidates") {
            policy.invalidates = list
            for (i, target) in list.enumerated() { invalidateChecks.append(("\(path).invalidates[\(i)]", n, target)) }
        }
        if let n = m["validate"] {
            for (k, v) in r.pairs(n, "\(path).validate") {
                guard let s = r.string(v, "\(path).validate.\(k)") else { continue }
                if let t = EndpointPolicy.ExpectedType(rawValue: s) { policy.validate.append((k, t)) } else {
                    r.fail("\(path).validate.\(k)", v, "unknown type '\(s)' (expected \(EndpointPolicy.ExpectedType.allCases.map(\.rawValue).joined(separator: ", ")))")
                }
            }
        }
        if let n = m["unwrap"], let s = r.nonEmptyString(n, "\(path).unwrap") { policy.unwrap = s }
        if let n = m["sign"] {
            if case .scalar = n {
                if let b = r.bool(n, "\(path).sign") {
                    if b { policy.sign = .inherit } else { policy.sign = .off }
                }
            } else if let s = signingConfig(n, "\(path).sign", r) {
                policy.sign = .custom(s)
            }
        }
        if !policy.envelope, policy.unwrap != nil || !policy.validate.isEmpty {
            r.fail("\(path).envelope", m["envelope"], "unwrap and validate need a JSON endpoint (envelope: true)")
        }
        return policy
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
                                    "refresh_token", "expires_in", "max_replays", "timeout"]

    /// `session.refresh` and `session.app_token`: a token request Concierge sends itself.
    static func tokenEndpoint(_ node: Node, _ path: String, _ r: YAMLReader, defaultMethod: String,
                              upstreamNodes: inout [(path: String, node: Node, name: String)]) -> ConciergeConfig.TokenEndpoint? {
        guard let m = r.mapping(node, path, allowed: tokenEndpointKeys) else { return nil }
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
        if let v = m["access_token"], let s = r.nonEmptyString(v, "\(path).access_token") { t.accessToken = s } else if m["access_token"] == nil {
            r.fail("\(path).access_token", node, "missing: path of the access token in the reply")
        }
        if let v = m["refresh_token"] { t.refreshToken = r.nonEmptyString(v, "\(path).refresh_token") }
        if let v = m["expires_in"] { t.expiresIn = r.nonEmptyString(v, "\(path).expires_in") }
        if let v = m["max_replays"], let i = r.int(v, "\(path).max_replays", range: 0...10) { t.maxReplays = i }
        if let v = m["timeout"], let d = r.duration(v, "\(path).timeout") {
            if d > .zero { t.timeout = d } else { r.fail("\(path).timeout", v, "must be greater than 0") }
        }
        return t
    }

    static func cannedReply(_ node: Node, _ path: String, _ r: YAMLReader) -> CannedReply? {
        guard let m = r.mapping(node, path, allowed: ["status", "body"]) else { return nil }
        var reply = CannedReply(status: 200, body: .object([:]))
        if let n = m["status"], let s = r.int(n, "\(path).status", range: 100...599) { reply.status = s }
        if let n = m["body"], let b = r.json(n, "\(path).body") { reply.body = b }
        return reply
    }

    static func signingConfig(_ node: Node, _ path: String, _ r: YAMLReader) -> SigningConfig? {
        guard let m = r.mapping(node, path, allowed: ["secret", "algorithm", "encoding", "param", "timestamp_param", "nonce_param"]) else { return nil }
        var config = SigningConfig(secret: "", algorithm: .hmacSHA256, encoding: .hex, param: "signature",
                                   timestampParam: "timestamp", nonceParam: "nonce")
        if let n = m["secret"], let s = r.nonEmptyString(n, "\(path).secret") { config.secret = s } else if m["secret"] == nil {
            r.fail("\(path).secret", node, "missing: the signing secret (e.g. \"${SIGN_SECRET}\")")
        }
        if let n = m["algorithm"], let s = r.string(n, "\(path).algorithm") {
            if let a = SigningConfig.Algorithm(rawValue: s) { config.algorithm = a } else {
                r.fail("\(path).algorithm", n, "unknown algorithm '\(s)' (expected hmac-sha256, hmac-sha1 or md5-salted)")
            }
        }
        if let n = m["encoding"], let s = r.string(n, "\(path).encoding") {
            if let e = SigningConfig.Encoding(rawValue: s) { config.encoding = e } else { r.fail("\(path).encoding", n, "expected hex or base64, found '\(s)'") }
        }
        if let n = m["param"], let s = r.nonEmptyString(n, "\(path).param") { config.param = s }
        if let n = m["timestamp_param"] { config.timestampParam = YAMLReader.isNull(n) ? nil : r.nonEmptyString(n, "\(path).timestamp_param") }
        if let n = m["nonce_param"] { config.nonceParam = YAMLReader.isNull(n) ? nil : r.nonEmptyString(n, "\(path).nonce_param") }
        return config
    }

    /// The long form of an upstream: `{ url: ..., ca_file: ... }`.
    static let upstreamKeys = ["url", "ca_file"]

    /// `upstreams.<name>`: a base URL, or the long form with a CA file trusted for https.
    static func upstream(name: String, _ node: Node, _ r: YAMLReader) -> ConciergeConfig.Upstream? {
        let path = "upstreams.\(name)"
        var (urlNode, urlPath) = (node, path)
        var caFile: (path: String, node: Node)?
        if case .mapping = node {
            guard let m = r.mapping(node, path, allowed: upstreamKeys, schemaPath: "upstreams.<name>") else { return nil }
            guard let url = m["url"] else {
                r.fail(path, node, "missing 'url': the upstream's http:// or https:// base URL")
                return nil
            }
            (urlNode, urlPath) = (url, "\(path).url")
            if let n = m["ca_file"], !YAMLReader.isNull(n), let file = r.nonEmptyString(n, "\(path).ca_file") { caFile = (file, n) }
        }
        guard let text = r.nonEmptyString(urlNode, urlPath) else { return nil }
        guard var upstream = parseUpstream(name: name, text) else {
            r.fail(urlPath, urlNode, "expected an http:// or https:// base URL, found '\(text)'")
            return nil
        }
        if let caFile {
            if let problem = CertificateFile.problem(at: caFile.path) {
                r.fail("\(path).ca_file", caFile.node, problem)
            } else if upstream.scheme != "https" {
                r.fail("\(path).ca_file", caFile.node, "only an https:// upstream uses a CA file, found '\(text)'")
            }
            upstream.caFile = caFile.path
        }
        return upstream
    }

    static func parseUpstream(name: String, _ text: String) -> ConciergeConfig.Upstream? {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
              scheme == "http" || scheme == "https", let host = components.host, !host.isEmpty,
              components.query == nil, components.fragment == nil
        else { return nil }
        let port = components.port ?? (scheme == "https" ? 443 : 80)
        var basePath = components.path
        while basePath.hasSuffix("/") { basePath.removeLast() }
        let defaultPort = (scheme == "https" && port == 443) || (scheme == "http" && port == 80)
        let hostText = host.contains(":") ? "[\(host)]" : host
        let base = "\(scheme)://\(hostText.lowercased())\(defaultPort ? "" : ":\(port)")\(basePath)"
        return ConciergeConfig.Upstream(name: name, baseURL: base, scheme: scheme, host: host, port: port, basePath: basePath)
    }
}
