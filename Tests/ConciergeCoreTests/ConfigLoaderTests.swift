@testable import ConciergeCore
import Foundation
import Testing

@Suite("ConfigLoader")
struct ConfigLoaderTests {
    /// The issues a configuration that must fail reports (records a failure if it loads).
    private func issues(_ yaml: String, environment: [String: String] = [:],
                        sourceLocation: SourceLocation = #_sourceLocation) -> [ConfigIssue] {
        do {
            _ = try ConfigLoader.parse(yaml: yaml, environment: environment)
            Issue.record("expected a ConfigError", sourceLocation: sourceLocation)
            return []
        } catch {
            return error.issues
        }
    }

    /// The one issue at `path`, recording a failure when there is not exactly one.
    private func issue(_ path: String, in issues: [ConfigIssue], sourceLocation: SourceLocation = #_sourceLocation) -> ConfigIssue? {
        let found = issues.filter { $0.path == path }
        guard found.count == 1 else {
            Issue.record("expected one issue at '\(path)', found \(found.count) in: \(issues)", sourceLocation: sourceLocation)
            return found.first
        }
        return found[0]
    }

    private static let repoRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    // MARK: Valid configurations and defaults

    @Test("a minimal config (one upstream) loads with every default")
    func minimalDefaults() throws {
        let config = try ConfigLoader.parse(yaml: """
            upstreams:
              release: https://api.example.com
            """)
        #expect(config.listen.proxy == .tcp(host: "127.0.0.1", port: 8080))
        #expect(config.listen.admin == .tcp(host: "127.0.0.1", port: 8081))
        #expect(config.admin.token == nil)
        #expect(config.admin.tokenFile == nil)
        #expect(config.storage.path == "./.concierge/concierge.sqlite")
        #expect(config.storage.maxBytes == 512 * 1024 * 1024)
        #expect(config.storage.memoryBytes == 64 * 1024 * 1024)
        #expect(config.upstreams.map(\.name) == ["release"])
        #expect(config.environment == "release")
        #expect(config.common.headers.isEmpty)
        #expect(config.common.params.isEmpty)
        #expect(config.envelope.codePath == "code")
        #expect(config.envelope.messagePath == "msg")
        #expect(config.envelope.successCodes == [200])
        #expect(config.envelope.refreshCodes == [801])
        #expect(config.envelope.logoutCodes == [802])
        #expect(config.envelope.unavailable.status == 502)
        #expect(config.envelope.unavailable.body == ["code": -1, "msg": "service temporarily unavailable"])
        #expect(config.envelope.invalid.status == 502)
        #expect(config.envelope.invalid.body[path: "code"] == -2)
        #expect(config.envelope.warningCodes.isEmpty)
        #expect(config.session.inject.isEmpty)
        #expect(config.session.capture == nil)
        #expect(config.session.refresh == nil)
        #expect(config.session.notLoggedIn.status == 401)
        #expect(config.session.notLoggedIn.body == ["code": 800, "msg": "not logged in"])
        #expect(config.cache.version == 1)
        #expect(config.cache.volatileParams == ["timestamp", "signature", "_"])
        #expect(config.cache.defaultTTL == .zero)
        #expect(config.endpoints.isEmpty)
        #expect(config.log.format == .text)
        #expect(config.log.level == .info)
        #expect(config.log.requests == true)
        #expect(config.limits.maxHeaderBytes == 16 * 1024)
        #expect(config.limits.maxBodyBytes == 8 * 1024 * 1024)
        #expect(config.limits.headerTimeout == .seconds(10))
        #expect(config.limits.defaultTimeout == .seconds(30))
        #expect(config.signing == nil)
        #expect(config.hooks.isEmpty)
    }

    @Test("without 'release' the first upstream is the default environment")
    func environmentDefaultsToFirst() throws {
        let config = try ConfigLoader.parse(yaml: """
            upstreams:
              staging: https://staging.example.com
              debug: http://127.0.0.1:9000
            """)
        #expect(config.environment == "staging")
        #expect(config.upstreams.map(\.name) == ["staging", "debug"])
    }

    @Test("upstream URLs are normalised: host lower-cased, trailing slash and default port dropped, path prefix kept")
    func upstreamParsing() throws {
        let config = try ConfigLoader.parse(yaml: """
            upstreams:
              release: https://API.Example.com/v1/
              debug: http://127.0.0.1:9000
              plain: http://example.org:80
            """)
        let release = try #require(config.upstream(named: "release"))
        #expect(release.baseURL == "https://api.example.com/v1")
        #expect(release.scheme == "https")
        #expect(release.port == 443)
        #expect(release.basePath == "/v1")
        let debug = try #require(config.upstream(named: "debug"))
        #expect(debug.baseURL == "http://127.0.0.1:9000")
        #expect(debug.host == "127.0.0.1")
        #expect(debug.port == 9000)
        #expect(debug.basePath == "")
        #expect(config.upstream(named: "plain")?.baseURL == "http://example.org")
        #expect(config.upstream(named: "nope") == nil)
    }

    @Test("a full config with endpoints, session and signing loads with the declared values")
    func fullConfig() throws {
        let config = try ConfigLoader.parse(yaml: """
            listen:
              proxy: 0.0.0.0:9090
              admin: unix:/run/concierge/admin.sock
            admin:
              token: abc
            storage:
              path: /tmp/c.sqlite
              max_bytes: 1GB
              memory_bytes: 512KB
            upstreams:
              release: https://api.example.com
              cdn: https://cdn.example.com
            common:
              headers: { X-Requested-With: "1" }
              params: { platform: linux, app_version: "1.4.0" }
            envelope:
              code_path: meta.code
              success_codes: [0, 200]
              warning_codes:
                803: [event]
                804: [logout, event]
            signing:
              secret: s3cret
              algorithm: hmac-sha1
              encoding: base64
              param: sig
              timestamp_param: ts
              nonce_param: null
            session:
              inject:
                - query: accessToken
                - header: Authorization
                  format: "Bearer {access_token}"
                - body: token
              capture:
                endpoint: login
                access_token: data.result.accessToken
                user_id: data.result.userId
              refresh:
                path: /api/token/refresh
                body: { refreshToken: "{refresh_token}", n: 1 }
                access_token: data.result.accessToken
                max_replays: 2
            cache:
              version: 7
              volatile_params: [timestamp, _]
              default_ttl: 10s
            endpoints:
              - name: login
                match: POST /api/login
                sign: false
              - name: userInfo
                match: GET /api/user/info
                login: required
                cache: { ttl: 5m, stale_if_error: 1h }
                validate: { "data.result": object, "data.result.id": number }
              - name: itemList
                match: GET,POST /api/items
                cache: { ttl: 60s, stale_while_revalidate: 30s, scope: user, version: 3 }
                invalidates: [userInfo]
                unwrap: data.list
              - name: download
                match: GET /api/download/*
                envelope: false
                upstream: cdn
                timeout: 10m
                sign: { secret: other, algorithm: md5-salted }
              - name: other
                match: /api/other
            log: { format: json, level: debug, requests: false }
            hooks:
              - url: http://127.0.0.1:9900/events
                events: [session.logout, upstream.down]
            """)
        #expect(config.listen.proxy == .tcp(host: "0.0.0.0", port: 9090))
        #expect(config.listen.admin == .unix(path: "/run/concierge/admin.sock"))
        #expect(config.admin.token == "abc")
        #expect(config.storage.path == "/tmp/c.sqlite")
        #expect(config.storage.maxBytes == 1 << 30)
        #expect(config.storage.memoryBytes == 512 << 10)
        #expect(config.common.headers.map(\.name) == ["X-Requested-With"])
        #expect(config.common.params.map(\.name) == ["platform", "app_version"])
        #expect(config.common.params.map(\.value) == ["linux", "1.4.0"])
        #expect(config.envelope.codePath == "meta.code")
        #expect(config.envelope.successCodes == [0, 200])
        #expect(config.envelope.warningCodes[803] == [.event])
        #expect(config.envelope.warningCodes[804] == [.logout, .event])
        let signing = try #require(config.signing)
        #expect(signing.secret == "s3cret")
        #expect(signing.algorithm == .hmacSHA1)
        #expect(signing.encoding == .base64)
        #expect(signing.param == "sig")
        #expect(signing.timestampParam == "ts")
        #expect(signing.nonceParam == nil)
        #expect(config.session.inject == [.query(name: "accessToken"), .header(name: "Authorization", format: "Bearer {access_token}"),
                                          .body(field: "token")])
        #expect(config.session.capture?.endpoint == "login")
        #expect(config.session.capture?.userID == "data.result.userId")
        #expect(config.session.capture?.refreshToken == nil)
        let refresh = try #require(config.session.refresh)
        #expect(refresh.method == "POST")
        #expect(refresh.maxReplays == 2)
        #expect(refresh.timeout == .seconds(10))
        #expect(refresh.body == ["refreshToken": "{refresh_token}", "n": 1])
        #expect(config.cache.version == 7)
        // The signing param and timestamp param are always volatile.
        #expect(config.cache.volatileParams == ["timestamp", "_", "sig", "ts"])
        #expect(config.cache.defaultTTL == .seconds(10))
        #expect(config.endpoints.map(\.name) == ["login", "userInfo", "itemList", "download", "other"])

        let login = try #require(config.endpoint(named: "login"))
        #expect(login.envelope == true)
        #expect(login.cache.ttl == .seconds(10))  // default_ttl
        if case .off = login.sign {} else { Issue.record("login.sign should be off") }

        let userInfo = try #require(config.endpoint(named: "userInfo"))
        #expect(userInfo.login == .required)
        #expect(userInfo.cache.ttl == .seconds(300))
        #expect(userInfo.cache.staleIfError == .seconds(3600))
        #expect(userInfo.cache.scope == .user)  // chosen from login: required
        #expect(userInfo.scopeIsExplicit == false)
        #expect(userInfo.validate.map(\.path) == ["data.result", "data.result.id"])
        #expect(userInfo.validate.map(\.type) == [.object, .number])
        if case .inherit = userInfo.sign {} else { Issue.record("userInfo.sign should inherit") }

        let itemList = try #require(config.endpoint(named: "itemList"))
        #expect(itemList.match.matches(method: "POST", path: "/api/items"))
        #expect(itemList.cache.staleWhileRevalidate == .seconds(30))
        #expect(itemList.cache.scope == .user)
        #expect(itemList.scopeIsExplicit == true)
        #expect(itemList.cache.version == 3)
        #expect(itemList.invalidates == ["userInfo"])
        #expect(itemList.unwrap == "data.list")

        let download = try #require(config.endpoint(named: "download"))
        #expect(download.envelope == false)
        #expect(download.upstream == "cdn")
        #expect(download.timeout == .seconds(600))
        if case .custom(let custom) = download.sign {
            #expect(custom.secret == "other")
            #expect(custom.algorithm == .md5Salted)
            #expect(custom.encoding == .hex)
            #expect(custom.param == "signature")
        } else {
            Issue.record("download.sign should be custom")
        }

        let other = try #require(config.endpoint(named: "other"))
        #expect(other.login == .none)
        #expect(other.cache.scope == .shared)
        #expect(other.match.methods == nil)

        #expect(config.log.format == .json)
        #expect(config.log.level == .debug)
        #expect(config.log.requests == false)
        #expect(config.hooks.count == 1)
        #expect(config.hooks.first?.events == ["session.logout", "upstream.down"])
    }

    // MARK: Errors: key path and line

    @Test("an unknown top-level key names the key and its line, with a suggestion")
    func unknownTopLevelKey() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            storge:
              path: /tmp/x.sqlite
            """)
        let i = issue("storge", in: found)
        #expect(i?.line == 3)
        #expect(i?.message.contains("unknown key 'storge'") == true)
        #expect(i?.message.contains("did you mean 'storage'") == true)
    }

    @Test("an unknown nested key names the full path endpoints[1].cache.tll and its line")
    func unknownNestedKey() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            endpoints:
              - name: login
                match: POST /api/login
              - name: itemList
                match: GET /api/items
                cache:
                  tll: 60s
            """)
        let i = issue("endpoints[1].cache.tll", in: found)
        #expect(i?.line == 9)
        #expect(i?.message.contains("did you mean 'ttl'") == true)
        #expect(found.count == 1)
    }

    @Test("a wrong type (cache.version: abc) names the key and line")
    func wrongType() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            cache:
              version: abc
            """)
        let i = issue("cache.version", in: found)
        #expect(i?.line == 4)
        #expect(i?.message.contains("expected an integer") == true)
        #expect(i?.message.contains("abc") == true)
    }

    @Test("a mapping or list where a scalar or list is expected is a type error")
    func structuralTypeErrors() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            environment: [release]
            endpoints:
              name: login
            log:
              requests: maybe
            """)
        #expect(issue("environment", in: found)?.line == 3)
        #expect(issue("environment", in: found)?.message.contains("expected a string, found a list") == true)
        #expect(issue("endpoints", in: found)?.line == 5)
        #expect(issue("endpoints", in: found)?.message.contains("expected a list") == true)
        #expect(issue("log.requests", in: found)?.line == 7)
    }

    @Test("a bad duration names endpoints[0].cache.ttl and its line")
    func badDuration() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            endpoints:
              - name: itemList
                match: GET /api/items
                cache: { ttl: 5x }
            """)
        let i = issue("endpoints[0].cache.ttl", in: found)
        #expect(i?.line == 6)
        #expect(i?.message.contains("invalid duration '5x'") == true)
    }

    @Test("a bad size names storage.max_bytes and its line")
    func badSize() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            storage:
              path: /tmp/x.sqlite
              max_bytes: 12XB
            """)
        let i = issue("storage.max_bytes", in: found)
        #expect(i?.line == 5)
        #expect(i?.message.contains("invalid size '12XB'") == true)
    }

    @Test("an endpoint naming a missing upstream names endpoints[0].upstream and its line")
    func missingUpstream() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            endpoints:
              - name: download
                match: GET /api/download/*
                upstream: cdn
            """)
        let i = issue("endpoints[0].upstream", in: found)
        #expect(i?.line == 6)
        #expect(i?.message.contains("names no upstream: 'cdn'") == true)
    }

    @Test("an invalid regex in match names endpoints[0].match and its line")
    func invalidRegex() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            endpoints:
              - name: versioned
                match: "GET ~[unclosed"
            """)
        let i = issue("endpoints[0].match", in: found)
        #expect(i?.line == 5)
        #expect(i?.message.contains("invalid regex") == true)
    }

    @Test("a bad method and a bad path in match are reported at the match key")
    func badMatch() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            endpoints:
              - name: a
                match: G3T /api/a
              - name: b
                match: GET api/b
            """)
        #expect(issue("endpoints[0].match", in: found)?.line == 5)
        #expect(issue("endpoints[0].match", in: found)?.message.contains("invalid method") == true)
        #expect(issue("endpoints[1].match", in: found)?.line == 7)
        #expect(issue("endpoints[1].match", in: found)?.message.contains("invalid path") == true)
    }

    @Test("session.capture.endpoint naming no endpoint is reported with its line")
    func captureNamesNoEndpoint() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            session:
              capture:
                endpoint: signin
                access_token: data.token
            endpoints:
              - name: login
                match: POST /api/login
            """)
        let i = issue("session.capture.endpoint", in: found)
        #expect(i?.line == 5)
        #expect(i?.message.contains("names no endpoint: 'signin'") == true)
    }

    @Test("invalidates naming no endpoint names endpoints[0].invalidates[1] and its line")
    func invalidatesNamesNoEndpoint() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            endpoints:
              - name: updateProfile
                match: POST /api/user/update
                invalidates: [updateProfile, userInfo]
            """)
        let i = issue("endpoints[0].invalidates[1]", in: found)
        #expect(i?.line == 6)
        #expect(i?.message.contains("names no endpoint: 'userInfo'") == true)
        #expect(found.count == 1)
    }

    @Test("an unknown signing algorithm names signing.algorithm and its line")
    func badSigningAlgorithm() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            signing:
              secret: s3cret
              algorithm: hmac-sha512
            """)
        let i = issue("signing.algorithm", in: found)
        #expect(i?.line == 5)
        #expect(i?.message.contains("unknown algorithm 'hmac-sha512'") == true)
    }

    @Test("an endpoint's sign: block is checked too (missing secret, bad encoding)")
    func badEndpointSign() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            endpoints:
              - name: a
                match: GET /a
                sign:
                  encoding: base32
            """)
        #expect(issue("endpoints[0].sign.encoding", in: found)?.line == 7)
        #expect(issue("endpoints[0].sign.secret", in: found) != nil)
    }

    @Test("an unknown warning action names envelope.warning_codes.804[1] and its line")
    func unknownWarningAction() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            envelope:
              warning_codes:
                803: [event]
                804: [logout, explode]
            """)
        let i = issue("envelope.warning_codes.804[1]", in: found)
        #expect(i?.line == 6)
        #expect(i?.message.contains("unknown action 'explode'") == true)
    }

    @Test("duplicate endpoint names name endpoints[1].name and the entry's line")
    func duplicateEndpointNames() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            endpoints:
              - name: items
                match: GET /api/items
              - name: items
                match: POST /api/items
            """)
        let i = issue("endpoints[1].name", in: found)
        #expect(i?.line == 6)
        #expect(i?.message.contains("duplicate endpoint name 'items'") == true)
    }

    @Test("missing upstreams is an error")
    func missingUpstreams() {
        let found = issues("""
            listen:
              proxy: 127.0.0.1:8080
            """)
        #expect(issue("upstreams", in: found)?.message.contains("missing") == true)
    }

    @Test("a non-http upstream URL is an error at its key")
    func badUpstreamURL() {
        let found = issues("""
            upstreams:
              release: ftp://files.example.com
            """)
        #expect(issue("upstreams.release", in: found)?.line == 2)
    }

    @Test("an empty document and a YAML syntax error are reported")
    func emptyAndSyntaxError() {
        #expect(issues("").first?.message.contains("empty") == true)
        let syntax = issues("""
            upstreams:
              release: https://api.example.com
            cache: { version: 1
            """)
        #expect(syntax.count == 1)
        #expect(syntax.first?.message.contains("YAML syntax error") == true)
        #expect(syntax.first?.line != nil)
    }

    @Test("an out-of-range size is a config error, not a crash of the loader")
    func hugeSizeIsAnError() async {
        await #expect(processExitsWith: .success) {
            let loaded = try? ConfigLoader.parse(yaml: "upstreams:\n  release: https://api.example.com\nstorage:\n  max_bytes: 100000000000GB\n")
            precondition(loaded == nil, "expected a ConfigError")
        }
    }

    @Test("several errors are reported together in one throw, each with path and line")
    func severalErrors() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            storage:
              max_bytes: lots
            cache:
              version: abc
            endpoints:
              - name: a
                match: GET /a
                cache: { ttl: 5x }
                upstream: nowhere
              - name: a
                match: "~[bad"
            """)
        #expect(issue("storage.max_bytes", in: found)?.line == 4)
        #expect(issue("cache.version", in: found)?.line == 6)
        #expect(issue("endpoints[0].cache.ttl", in: found)?.line == 10)
        #expect(issue("endpoints[0].upstream", in: found)?.line == 11)
        #expect(issue("endpoints[1].match", in: found)?.line == 13)
        #expect(issue("endpoints[1].name", in: found)?.line == 12)
        #expect(found.count == 6)
        #expect(found.allSatisfy { $0.line != nil })
    }

    @Test("ConfigError's description lists every issue with key path and line; exit code is 78")
    func errorDescription() {
        do {
            _ = try ConfigLoader.parse(yaml: """
                upstreams:
                  release: https://api.example.com
                cache:
                  version: abc
                  default_ttl: 5x
                """)
            Issue.record("expected a ConfigError")
        } catch {
            let text = error.description
            #expect(text.contains("2 errors"))
            #expect(text.contains("cache.version (line 4)"))
            #expect(text.contains("cache.default_ttl (line 5)"))
        }
        #expect(ConfigError.exitCode == 78)
        #expect(ConfigIssue(path: "", line: nil, message: "m").description == "<document>: m")
    }

    // MARK: Environment

    @Test("${VAR} is expanded in string values")
    func envExpansion() throws {
        let config = try ConfigLoader.parse(yaml: """
            admin:
              token: "${ADMIN_TOKEN}"
            upstreams:
              release: "https://${API_HOST}"
            """, environment: ["ADMIN_TOKEN": "t0ken", "API_HOST": "api.example.net"])
        #expect(config.admin.token == "t0ken")
        #expect(config.upstream(named: "release")?.baseURL == "https://api.example.net")
    }

    @Test("${VAR:-default} falls back to the default when VAR is unset")
    func envDefault() throws {
        let config = try ConfigLoader.parse(yaml: """
            admin:
              token: "${ADMIN_TOKEN:-fallback-token}"
            upstreams:
              release: https://api.example.com
            """)
        #expect(config.admin.token == "fallback-token")
    }

    @Test("an undefined variable is an error naming the key, the line and the variable")
    func envUndefined() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            signing:
              secret: "${SIGN_SECRET}"
            """)
        let i = issue("signing.secret", in: found)
        #expect(i?.line == 4)
        #expect(i?.message.contains("SIGN_SECRET") == true)
    }

    @Test("CONCIERGE_ENVIRONMENT overrides the environment key")
    func environmentOverride() throws {
        let yaml = """
            upstreams:
              release: https://api.example.com
              debug: http://127.0.0.1:9000
            environment: release
            """
        #expect(try ConfigLoader.parse(yaml: yaml).environment == "release")
        #expect(try ConfigLoader.parse(yaml: yaml, environment: ["CONCIERGE_ENVIRONMENT": "debug"]).environment == "debug")
        #expect(try ConfigLoader.parse(yaml: yaml, environment: ["CONCIERGE_ENVIRONMENT": ""]).environment == "release")
    }

    @Test("CONCIERGE_ENVIRONMENT naming no upstream is an error")
    func environmentOverrideUnknown() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            """, environment: ["CONCIERGE_ENVIRONMENT": "staging"])
        #expect(issue("environment", in: found)?.message.contains("staging") == true)
    }

    @Test("environment naming no upstream is an error at its line")
    func environmentUnknown() {
        let found = issues("""
            upstreams:
              release: https://api.example.com
            environment: staging
            """)
        #expect(issue("environment", in: found)?.line == 3)
    }

    @Test("CONCIERGE_ADMIN_TOKEN supplies the admin token when the file gives none")
    func adminTokenFromEnvironment() throws {
        let yaml = "upstreams:\n  release: https://api.example.com\n"
        #expect(try ConfigLoader.parse(yaml: yaml, environment: ["CONCIERGE_ADMIN_TOKEN": "envtok"]).admin.token == "envtok")
        let withFile = try ConfigLoader.parse(yaml: yaml + "admin:\n  token: filetok\n", environment: ["CONCIERGE_ADMIN_TOKEN": "envtok"])
        #expect(withFile.admin.token == "filetok")
    }

    // MARK: Files

    @Test("Config/concierge.yaml loads")
    func loadsReferenceConfig() throws {
        let path = Self.repoRoot.appendingPathComponent("Config/concierge.yaml").path
        let config = try ConfigLoader.load(path: path, environment: [:])
        #expect(config.environment == "release")
        #expect(config.upstreams.map(\.name) == ["release", "debug", "cdn"])
        #expect(config.endpoints.map(\.name).contains("itemList"))
        #expect(config.session.capture?.endpoint == "login")
        #expect(config.envelope.warningCodes[804] == [.logout, .event])
    }

    @Test("Config/demo.yaml loads with the admin token default")
    func loadsDemoConfig() throws {
        let path = Self.repoRoot.appendingPathComponent("Config/demo.yaml").path
        let config = try ConfigLoader.load(path: path, environment: [:])
        #expect(config.environment == "debug")
        #expect(config.admin.token == "demo-admin-token")
        #expect(config.upstream(named: "debug")?.baseURL == "http://127.0.0.1:9000")
        #expect(config.endpoint(named: "item")?.match.matches(method: "GET", path: "/api/items/3") == true)
    }

    @Test("load on a missing file is a ConfigError naming the file")
    func loadMissingFile() {
        let path = "/nonexistent-\(UUID().uuidString)/concierge.yaml"
        do {
            _ = try ConfigLoader.load(path: path, environment: [:])
            Issue.record("expected a ConfigError")
        } catch {
            #expect(error.file == path)
            #expect(error.issues.first?.message.contains("cannot read file") == true)
        }
    }

    @Test("load sets the file name on a parse error")
    func loadSetsFile() throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("concierge-\(UUID().uuidString).yaml")
        try "upstreams:\n  release: https://api.example.com\ncache:\n  version: abc\n".write(to: url, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: url) }
        do {
            _ = try ConfigLoader.load(path: url.path, environment: [:])
            Issue.record("expected a ConfigError")
        } catch {
            #expect(error.file == url.path)
            #expect(error.issues.first?.path == "cache.version")
            #expect(error.issues.first?.line == 4)
        }
    }

    // MARK: Hostile input (SPEC §10)

    @Test("a non-ASCII or control-character common header is an error naming the key and line")
    func invalidCommonHeaders() {
        let found = issues("""
            upstreams: { release: "http://127.0.0.1:9000" }
            common:
              headers:
                "🚀": "1"
                X-Ok: "a\\r\\nb"
            """)
        #expect(issue("common.headers.🚀", in: found)?.line == 4)
        #expect(issue("common.headers.🚀", in: found)?.message.contains("invalid header name") == true)
        #expect(issue("common.headers.X-Ok", in: found)?.line == 5)
    }

    @Test("an injected header name must be a token")
    func invalidInjectedHeader() {
        let found = issues("""
            upstreams: { release: "http://127.0.0.1:9000" }
            session:
              inject: [ { header: "Auth orization" } ]
            """)
        #expect(issue("session.inject[0].header", in: found)?.line == 3)
    }

    @Test("allowed_hosts, body_timeout and underscores_in_headers load; a host with a port or scheme is an error")
    func hardeningKeys() throws {
        let config = try ConfigLoader.parse(yaml: """
            upstreams: { release: "http://127.0.0.1:9000" }
            listen: { allowed_hosts: [app.local, .corp.example] }
            limits: { body_timeout: 5s, underscores_in_headers: true }
            """)
        #expect(config.listen.allowedHosts == ["app.local", ".corp.example"])
        #expect(config.limits.bodyTimeout == .seconds(5))
        #expect(config.limits.underscoresInHeaders)
        let defaults = try ConfigLoader.parse(yaml: "upstreams: { release: \"http://127.0.0.1:9000\" }")
        #expect(defaults.limits.bodyTimeout == .seconds(30))
        #expect(!defaults.limits.underscoresInHeaders)
        let found = issues("""
            upstreams: { release: "http://127.0.0.1:9000" }
            listen:
              allowed_hosts: ["http://x", "app.local:8080"]
            """)
        #expect(issue("listen.allowed_hosts[0]", in: found)?.line == 3)
        #expect(issue("listen.allowed_hosts[1]", in: found) != nil)
    }

    @Test("values taken from the environment are kept as secrets to mask; defaults are not")
    func secretValues() throws {
        let config = try ConfigLoader.parse(yaml: """
            upstreams: { release: "${API:-http://127.0.0.1:9000}" }
            signing: { secret: "${SIGN_SECRET}" }
            """, environment: ["SIGN_SECRET": "sg-very-private"])
        #expect(config.secretValues == ["sg-very-private"])
    }
}
