import NIOCore
import NIOHTTP1

/// Where pooled upstream connections go: scheme, host and port, and for https the CA file
/// trusted instead of the system store. Connections are pooled per origin (and event loop).
struct UpstreamOrigin: Hashable, Sendable, CustomStringConvertible {
    var isTLS: Bool
    /// The host name or address, without the brackets of an IPv6 literal.
    var host: String
    var port: Int
    var caFile: String?
    /// The `Host` field: the URL's authority.
    var authority: String

    var description: String { "\(isTLS ? "https" : "http")://\(authority)" }

    /// The name sent as SNI and checked against the certificate; nil for an address (the
    /// certificate is then checked against the peer's IP address).
    var serverName: String? {
        let isAddress = host.contains(":") || host.split(separator: ".").allSatisfy { !$0.isEmpty && $0.allSatisfy(\.isNumber) }
        return isAddress ? nil : host
    }

    /// Splits an absolute `http://` or `https://` URL into its origin and the request target
    /// (path and query, `/` when empty); nil for anything else.
    static func parse(_ url: String, caFile: String? = nil) -> (origin: UpstreamOrigin, target: String)? {
        let lower = url.prefix(8).lowercased()
        let isTLS: Bool
        if lower.hasPrefix("https://") { isTLS = true } else if lower.hasPrefix("http://") { isTLS = false } else { return nil }
        let rest = url.dropFirst(isTLS ? 8 : 7)
        let end = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        let authority = String(rest[..<end])
        var target = String(rest[end...])
        if let hash = target.firstIndex(of: "#") { target = String(target[..<hash]) }
        if !target.hasPrefix("/") { target = "/" + target }
        guard !authority.isEmpty, !authority.contains("@"), let (host, port) = hostAndPort(authority, defaultPort: isTLS ? 443 : 80) else {
            return nil
        }
        return (UpstreamOrigin(isTLS: isTLS, host: host, port: port, caFile: isTLS ? caFile : nil, authority: authority), target)
    }

    private static func hostAndPort(_ authority: String, defaultPort: Int) -> (String, Int)? {
        var host = Substring(authority)
        var portText: Substring?
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return nil }
            let after = host[host.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return nil }
                portText = after.dropFirst()
            }
            host = host[host.index(after: host.startIndex)..<close]
        } else if let colon = host.lastIndex(of: ":") {
            portText = host[host.index(after: colon)...]
            host = host[..<colon]
        }
        guard !host.isEmpty else { return nil }
        guard let portText else { return (String(host), defaultPort) }
        guard let port = Int(portText), (1...65535).contains(port) else { return nil }
        return (String(host), port)
    }

    /// Whether a configured upstream is this origin (its CA file then applies).
    func matches(_ upstreamScheme: String, host upstreamHost: String, port upstreamPort: Int) -> Bool {
        let bare = upstreamHost.hasPrefix("[") ? String(upstreamHost.dropFirst().dropLast()) : upstreamHost
        return (upstreamScheme == "https") == isTLS && upstreamPort == port && bare.lowercased() == host.lowercased()
    }

    /// The head sent upstream: `Host` first when the request has none, and framing set from
    /// the body as AsyncHTTPClient sets it (`Content-Length`; `0` only for methods that
    /// expect a body).
    func requestHead(method: String, target: String, headers: HTTPHeaders, bodyLength: Int) -> HTTPRequestHead {
        let method = HTTPMethod(rawValue: method)
        var fields = HTTPHeaders()
        if !headers.contains(name: "host") { fields.add(name: "Host", value: authority) }
        for (name, value) in headers {
            let lower = name.lowercased()
            if lower == "content-length" || lower == "transfer-encoding" { continue }
            fields.add(name: name, value: value)
        }
        switch method {
        case _ where bodyLength > 0: fields.add(name: "Content-Length", value: String(bodyLength))
        case .GET, .HEAD, .DELETE, .CONNECT, .TRACE: break
        default: fields.add(name: "Content-Length", value: "0")
        }
        return HTTPRequestHead(version: .http1_1, method: method, uri: target, headers: fields)
    }
}
