import Foundation
import NIOHTTP1
import Yams

/// The sections about Concierge itself: listeners, admin token, storage, log, limits, hooks.
extension ConfigLoader {
    /// `listen`: where the proxy and admin listeners bind, and the extra host names allowed.
    /// `sessions`: each listener's `session`, checked once the sessions are read.
    static func listenSection(_ node: Node?, _ r: YAMLReader, sessions: inout [ListenerSessionReference]) -> ConciergeConfig.Listen {
        var listen = ConciergeConfig.Listen(proxy: .tcp(host: "127.0.0.1", port: 8080), admin: .tcp(host: "127.0.0.1", port: 8081))
        if let node, let m = r.mapping(node, "listen", allowed: ["proxy", "admin", "allowed_hosts"]) {
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
            if let n = m["proxy"], let listeners = proxyListeners(n, r, sessions: &sessions) { listen.proxyListeners = listeners }
            if let n = m["admin"], let s = r.string(n, "listen.admin") {
                if let a = SocketAddressSpec.parse(s) { listen.admin = a } else { r.fail("listen.admin", n, "expected host:port or unix:/path, found '\(s)'") }
            }
        }
        return listen
    }

    /// `admin`: the admin token (or its file); `CONCIERGE_ADMIN_TOKEN` when neither is set.
    static func adminSection(_ node: Node?, _ r: YAMLReader, environment: [String: String]) -> ConciergeConfig.Admin {
        var admin = ConciergeConfig.Admin(token: nil, tokenFile: nil)
        if let node, let m = r.mapping(node, "admin", allowed: ["token", "token_file"]) {
            if let n = m["token"] { admin.token = r.nonEmptyString(n, "admin.token") }
            if let n = m["token_file"] { admin.tokenFile = r.nonEmptyString(n, "admin.token_file") }
        }
        if let envToken = environment["CONCIERGE_ADMIN_TOKEN"], !envToken.isEmpty, admin.token == nil, admin.tokenFile == nil {
            admin.token = envToken
        }
        return admin
    }

    /// `storage`: the SQLite file and its bounds.
    static func storageSection(_ node: Node?, _ r: YAMLReader) -> ConciergeConfig.Storage {
        var storage = ConciergeConfig.Storage(path: "./.concierge/concierge.sqlite", maxBytes: 512 << 20, memoryBytes: 64 << 20)
        if let node, let m = r.mapping(node, "storage", allowed: ["path", "max_bytes", "memory_bytes"]) {
            if let n = m["path"], let s = r.nonEmptyString(n, "storage.path") { storage.path = s }
            if let n = m["max_bytes"], let v = r.size(n, "storage.max_bytes") { storage.maxBytes = v }
            if let n = m["memory_bytes"], let v = r.size(n, "storage.memory_bytes") { storage.memoryBytes = v }
        }
        return storage
    }

    /// `log`: format, level and the request log.
    static func logSection(_ node: Node?, _ r: YAMLReader) -> ConciergeConfig.Log {
        var log = ConciergeConfig.Log(format: .text, level: .info, requests: true)
        if let node, let m = r.mapping(node, "log", allowed: ["format", "level", "requests"]) {
            if let n = m["format"], let s = r.string(n, "log.format") {
                if let f = ConciergeConfig.Log.Format(rawValue: s) { log.format = f } else { r.fail("log.format", n, "expected text or json, found '\(s)'") }
            }
            if let n = m["level"], let s = r.string(n, "log.level") {
                if let l = ConciergeConfig.Log.Level(rawValue: s) { log.level = l } else { r.fail("log.level", n, "expected debug, info, warning or error, found '\(s)'") }
            }
            if let n = m["requests"], let b = r.bool(n, "log.requests") { log.requests = b }
        }
        return log
    }

    /// `limits`: request sizes and timeouts.
    static func limitsSection(_ node: Node?, _ r: YAMLReader) -> ConciergeConfig.Limits {
        var limits = ConciergeConfig.Limits(maxHeaderBytes: 16 << 10, maxBodyBytes: 8 << 20, headerTimeout: .seconds(10),
                                            defaultTimeout: .seconds(30), batchConcurrency: 8, shutdownGrace: .seconds(10))
        if let node, let m = r.mapping(node, "limits", allowed: [
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
        return limits
    }

    /// `hooks`: URLs that events are POSTed to.
    static func hooksSection(_ node: Node?, _ r: YAMLReader) -> [ConciergeConfig.Hook] {
        var hooks: [ConciergeConfig.Hook] = []
        if let node, let items = r.sequence(node, "hooks") {
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
        return hooks
    }
}
