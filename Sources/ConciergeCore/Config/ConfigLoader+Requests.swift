import Foundation
import NIOHTTP1
import Yams

/// The sections about what requests and replies carry: common additions, the envelope, the
/// cache's keys and the endpoints.
extension ConfigLoader {
    /// `common`: headers and params added to every request.
    static func commonSection(_ node: Node?, _ r: YAMLReader) -> ConciergeConfig.Common {
        var common = ConciergeConfig.Common(headers: HTTPHeaders(), params: [])
        if let node, let m = r.mapping(node, "common", allowed: ["headers", "params"]) {
            if let n = m["headers"] { common.headers = r.headerFields(n, "common.headers") }
            if let n = m["params"] {
                for (k, v) in r.pairs(n, "common.params") {
                    if let s = r.string(v, "common.params.\(k)") { common.params.append((k, s)) }
                }
            }
        }
        return common
    }

    /// `envelope`: where the business code is and what each code means.
    static func envelopeSection(_ node: Node?, _ r: YAMLReader) -> ConciergeConfig.Envelope {
        var envelope = ConciergeConfig.Envelope(
            codePath: "code", messagePath: "msg", successCodes: [200], refreshCodes: [801], logoutCodes: [802],
            unavailable: CannedReply(status: 502, body: ["code": -1, "msg": "service temporarily unavailable"]),
            invalid: CannedReply(status: 502, body: ["code": -2, "msg": "response failed validation"]),
            warningCodes: [:])
        if let node, let m = r.mapping(node, "envelope", allowed: [
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
        return envelope
    }

    /// `cache.mode` or `endpoints[].cache.mode`: `ttl` or `http`.
    private static func cacheMode(_ node: Node, _ path: String, _ r: YAMLReader) -> EndpointPolicy.CachePolicy.Mode? {
        guard let s = r.string(node, path) else { return nil }
        guard let mode = EndpointPolicy.CachePolicy.Mode(rawValue: s) else {
            r.fail(path, node, "expected ttl or http, found '\(s)'")
            return nil
        }
        return mode
    }

    /// `cache.key_headers` or `endpoints[].cache.key_headers`: field names (tokens), lowercased;
    /// never a credential's.
    private static func keyHeaders(_ node: Node, _ path: String, _ r: YAMLReader) -> [String]? {
        guard let list = r.stringList(node, path) else { return nil }
        var names: [String] = []
        for (i, name) in list.enumerated() {
            let lower = name.lowercased()
            if !HTTPFieldSyntax.isToken(name) {
                r.fail("\(path)[\(i)]", node, "not a header name: '\(HTTPFieldSyntax.printable(name))'")
            } else if UnkeyedRequestFields.credentialNames.contains(lower) {
                r.fail("\(path)[\(i)]", node, "'\(name)' carries credentials and may not be part of a cache key")
            } else if !names.contains(lower) {
                names.append(lower)
            }
        }
        return names
    }

    /// `cache`: the key version, the params left out of keys and the default TTL.
    static func cacheSection(_ node: Node?, _ r: YAMLReader, signing: SigningConfig?) -> ConciergeConfig.Cache {
        var cache = ConciergeConfig.Cache(version: 1, volatileParams: ["timestamp", "signature", "_"], defaultTTL: .zero)
        if let node, let m = r.mapping(node, "cache", allowed: ["version", "volatile_params", "default_ttl", "mode", "max_ttl",
                                                                "store_set_cookie", "key_headers"]) {
            if let n = m["mode"], let mode = cacheMode(n, "cache.mode", r) { cache.mode = mode }
            if let n = m["max_ttl"], let d = r.duration(n, "cache.max_ttl") { cache.maxTTL = d }
            if let n = m["store_set_cookie"], let b = r.bool(n, "cache.store_set_cookie") { cache.storeSetCookie = b }
            if let n = m["key_headers"], let names = keyHeaders(n, "cache.key_headers", r) { cache.keyHeaders = names }
            if let n = m["version"], let v = r.int(n, "cache.version", range: 0...Int(Int32.max)) { cache.version = v }
            if let n = m["volatile_params"], let v = r.stringList(n, "cache.volatile_params") { cache.volatileParams = Set(v) }
            if let n = m["default_ttl"], let d = r.duration(n, "cache.default_ttl") { cache.defaultTTL = d }
        }
        if let signing {
            cache.volatileParams.insert(signing.param)
            if let t = signing.timestampParam { cache.volatileParams.insert(t) }
            if let n = signing.nonceParam { cache.volatileParams.insert(n) }
        }
        return cache
    }

    /// `endpoints`: the policies, in match order; names that others refer to must exist.
    static func endpointsSection(_ node: Node?, _ r: YAMLReader, cache: ConciergeConfig.Cache, upstreamNames: Set<String>) -> [EndpointPolicy] {
        var endpoints: [EndpointPolicy] = []
        var invalidateChecks: [(path: String, node: Node, name: String)] = []
        if let node, let items = r.sequence(node, "endpoints") {
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
        return endpoints
    }

    static let endpointKeys = ["name", "match", "login", "cache", "envelope", "upstream", "timeout", "invalidates",
                               "validate", "unwrap", "sign", "session"]

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
        policy.cache.ttl = cache.defaultTTL
        var explicitScope: EndpointPolicy.Scope? = nil
        if let n = m["cache"] { explicitScope = endpointCache(n, "\(path).cache", r, matchText: matchText, into: &policy.cache) }
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
        if let n = m["session"], let s = r.nonEmptyString(n, "\(path).session") { policy.session = s }
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

    static let endpointCacheKeys = ["ttl", "scope", "stale_if_error", "stale_while_revalidate", "version", "mode", "max_ttl",
                                    "tags", "tags_header", "store_set_cookie", "key_headers"]

    /// An endpoint's `cache:` mapping, read into `cache`; the `scope` it names, if any.
    static func endpointCache(_ n: Node, _ path: String, _ r: YAMLReader, matchText: String,
                              into cache: inout EndpointPolicy.CachePolicy) -> EndpointPolicy.Scope? {
        guard let cm = r.mapping(n, path, allowed: endpointCacheKeys) else { return nil }
        var explicitScope: EndpointPolicy.Scope? = nil
        var templates: [String] = []
        var tagsHeader: String? = nil
        if let v = cm["tags"], let list = r.stringList(v, "\(path).tags") { templates = list }
        if let v = cm["tags_header"], let s = r.nonEmptyString(v, "\(path).tags_header") { tagsHeader = s }
        let matchPath = matchText.split(separator: " ").first { $0.hasPrefix("/") }.map(String.init) ?? ""
        switch CacheTags.parse(templates, header: tagsHeader, matchPath: matchPath) {
        case .success(let tags): cache.tags = tags
        case .failure(let problem): r.fail("\(path).tags[\(problem.index)]", cm["tags"]!, "invalid tag template: \(problem.message)")
        }
        if let v = cm["mode"], let mode = cacheMode(v, "\(path).mode", r) { cache.mode = mode }
        if let v = cm["max_ttl"], let d = r.duration(v, "\(path).max_ttl") { cache.maxTTL = d }
        if let v = cm["store_set_cookie"], let b = r.bool(v, "\(path).store_set_cookie") { cache.storeSetCookie = b }
        if let v = cm["key_headers"], let names = keyHeaders(v, "\(path).key_headers", r) { cache.keyHeaders = names }
        if let v = cm["ttl"], let d = r.duration(v, "\(path).ttl") { cache.ttl = d }
        if let v = cm["scope"], let s = r.string(v, "\(path).scope") {
            if let sc = EndpointPolicy.Scope(rawValue: s) { explicitScope = sc } else { r.fail("\(path).scope", v, "expected user, shared or session, found '\(s)'") }
        }
        if let v = cm["stale_if_error"], let d = r.duration(v, "\(path).stale_if_error") { cache.staleIfError = d }
        if let v = cm["stale_while_revalidate"], let d = r.duration(v, "\(path).stale_while_revalidate") { cache.staleWhileRevalidate = d }
        if let v = cm["version"], let i = r.int(v, "\(path).version", range: 0...Int(Int32.max)) { cache.version = i }
        return explicitScope
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
}
