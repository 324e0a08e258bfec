import Foundation
import NIOHTTP1
import Yams

/// The upstream sections: the named base URLs and the current environment.
extension ConfigLoader {
    /// `upstreams`: at least one named base URL.
    static func upstreamsSection(_ node: Node?, root: Node, _ r: YAMLReader) -> [ConciergeConfig.Upstream] {
        var upstreams: [ConciergeConfig.Upstream] = []
        if let node {
            r.declareKeys("upstreams.<name>", upstreamKeys)
            for (name, value) in r.pairs(node, "upstreams") {
                if let upstream = upstream(name: name, value, r) { upstreams.append(upstream) }
            }
            if upstreams.isEmpty, r.issues.isEmpty { r.fail("upstreams", node, "at least one upstream is required") }
        } else {
            r.fail("upstreams", root, "missing: at least one named upstream base URL is required")
        }
        return upstreams
    }

    /// `environment`: the upstream requests go to by default (`CONCIERGE_ENVIRONMENT` overrides it).
    static func environmentSection(_ node: Node?, upstreams: [ConciergeConfig.Upstream], _ r: YAMLReader, environment: [String: String]) -> String {
        let upstreamNames = Set(upstreams.map(\.name))
        var environmentName = upstreams.first(where: { $0.name == "release" })?.name ?? upstreams.first?.name ?? ""
        if let node, let s = r.nonEmptyString(node, "environment") {
            if upstreamNames.contains(s) || upstreams.isEmpty { environmentName = s } else {
                r.fail("environment", node, "names no upstream: '\(s)' (known: \(upstreamNames.sorted().joined(separator: ", ")))")
            }
        }
        if let override = environment["CONCIERGE_ENVIRONMENT"], !override.isEmpty {
            if upstreamNames.contains(override) { environmentName = override } else {
                r.fail("environment", nil, "CONCIERGE_ENVIRONMENT names no upstream: '\(override)'")
            }
        }
        return environmentName
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
