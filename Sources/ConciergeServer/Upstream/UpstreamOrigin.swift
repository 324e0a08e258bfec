import NIOCore
import NIOHTTP1
import NIOPosix

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
        let isAddress = host.utf8.contains(UInt8(ascii: ":"))
            || host.utf8.split(separator: UInt8(ascii: ".")).allSatisfy { !$0.isEmpty && $0.allSatisfy { (0x30...0x39).contains($0) } }
        return isAddress ? nil : host
    }

    /// Splits an absolute `http://` or `https://` URL into its origin and the request target
    /// (path and query, `/` when empty); nil for anything else. Walks the URL's UTF-8 bytes:
    /// it runs twice per miss.
    static func parse(_ url: String, caFile: String? = nil) -> (origin: UpstreamOrigin, target: String)? {
        let bytes = url.utf8
        guard let isTLS = schemeIsTLS(url) else { return nil }
        let hostStart = bytes.index(bytes.startIndex, offsetBy: isTLS ? 8 : 7)
        let delimiters: [UInt8] = [UInt8(ascii: "/"), UInt8(ascii: "?"), UInt8(ascii: "#")]
        let hostEnd = bytes[hostStart...].firstIndex { delimiters.contains($0) } ?? bytes.endIndex
        let targetEnd = bytes[hostEnd...].firstIndex(of: UInt8(ascii: "#")) ?? bytes.endIndex
        let authority = String(url[hostStart..<hostEnd])
        var target = String(url[hostEnd..<targetEnd])
        if target.utf8.first != UInt8(ascii: "/") { target = "/" + target }
        guard !authority.isEmpty, !authority.utf8.contains(UInt8(ascii: "@")),
              let (host, port) = hostAndPort(authority, defaultPort: isTLS ? 443 : 80) else {
            return nil
        }
        return (UpstreamOrigin(isTLS: isTLS, host: host, port: port, caFile: isTLS ? caFile : nil, authority: authority), target)
    }

    /// ``parse(_:caFile:)`` remembering, per thread, the origin of the last URL: a request to
    /// the same origin (nearly every one) then costs a prefix compare and the target's copy.
    final class Memo: Sendable {
        private final class Last: Sendable {
            /// The URL up to the end of its authority (`http://host:port`).
            let prefix: String
            let origin: UpstreamOrigin

            init(prefix: String, origin: UpstreamOrigin) {
                (self.prefix, self.origin) = (prefix, origin)
            }
        }

        private let last = ThreadSpecificVariable<Last>()

        func parse(_ url: String, caFile: String?) -> (origin: UpstreamOrigin, target: String)? {
            if let last = last.currentValue, last.origin.caFile == (last.origin.isTLS ? caFile : nil),
               let target = Self.target(of: url, after: last.prefix) {
                return (last.origin, target)
            }
            guard let parsed = UpstreamOrigin.parse(url, caFile: caFile) else { return nil }
            let scheme = parsed.origin.isTLS ? "https://" : "http://"
            // Only a URL spelled as the origin would be (scheme in lowercase) is remembered.
            if url.hasPrefix(scheme + parsed.origin.authority) {
                last.currentValue = Last(prefix: scheme + parsed.origin.authority, origin: parsed.origin)
            }
            return parsed
        }

        /// ``parse(_:caFile:)`` of `base + target`, without joining them when `base` is the
        /// remembered origin (an upstream's `base_url` without a path: one compare) or that
        /// origin and a path, and `target` a target as the full parse leaves it.
        func parse(base: String, target: String, caFile: String?) -> (origin: UpstreamOrigin, target: String)? {
            if let last = last.currentValue, last.origin.caFile == (last.origin.isTLS ? caFile : nil), Self.isPlainTarget(target) {
                if base == last.prefix { return (last.origin, target) }
                if let path = Self.target(of: base, after: last.prefix) { return (last.origin, path + target) }
            }
            return parse(target.isEmpty ? base : base + target, caFile: caFile)
        }

        /// Starts with `/` and holds no fragment.
        static func isPlainTarget(_ target: String) -> Bool {
            var target = target
            return target.withUTF8 { bytes in
                guard bytes.first == UInt8(ascii: "/") else { return false }
                for byte in bytes where byte == UInt8(ascii: "#") { return false }
                return true
            }
        }

        /// The rest of `url` after `prefix` when it is a target as the full parse leaves it
        /// (starts with `/`, no fragment), read over both strings' bytes.
        static func target(of url: String, after prefix: String) -> String? {
            var (url, prefix) = (url, prefix)
            return url.withUTF8 { url in
                prefix.withUTF8 { prefix -> String? in
                    guard url.count > prefix.count, url[prefix.count] == UInt8(ascii: "/"),
                          UnsafeBufferPointer(rebasing: url[..<prefix.count]).elementsEqual(prefix) else { return nil }
                    let rest = UnsafeBufferPointer(rebasing: url[prefix.count...])
                    for byte in rest where byte == UInt8(ascii: "#") { return nil }
                    return String(decoding: rest, as: UTF8.self)
                }
            }
        }
    }

    /// `true` for `https://`, `false` for `http://` (scheme in any case), nil for anything else.
    static func schemeIsTLS(_ url: String) -> Bool? {
        var bytes = url.utf8.makeIterator()
        for expected in "http".utf8 {
            guard let byte = bytes.next(), byte | 0x20 == expected else { return nil }
        }
        var next = bytes.next()
        let isTLS = next.map { $0 | 0x20 == UInt8(ascii: "s") } ?? false
        if isTLS { next = bytes.next() }
        guard next == UInt8(ascii: ":"), bytes.next() == UInt8(ascii: "/"), bytes.next() == UInt8(ascii: "/") else { return nil }
        return isTLS
    }

    private static func hostAndPort(_ authority: String, defaultPort: Int) -> (String, Int)? {
        let bytes = authority.utf8
        var host = bytes[...]
        var portText: Substring.UTF8View?
        if host.first == UInt8(ascii: "[") {
            guard let close = host.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            let after = host[host.index(after: close)...]
            if !after.isEmpty {
                guard after.first == UInt8(ascii: ":") else { return nil }
                portText = Substring(after.dropFirst()).utf8
            }
            host = host[host.index(after: host.startIndex)..<close]
        } else if let colon = host.lastIndex(of: UInt8(ascii: ":")) {
            portText = Substring(host[host.index(after: colon)...]).utf8
            host = host[..<colon]
        }
        guard !host.isEmpty else { return nil }
        let hostName = String(Substring(host))
        guard let portText else { return (hostName, defaultPort) }
        guard let port = Int(Substring(portText)), (1...65535).contains(port) else { return nil }
        return (hostName, port)
    }

    /// Whether a configured upstream is this origin (its CA file then applies).
    func matches(_ upstreamScheme: String, host upstreamHost: String, port upstreamPort: Int) -> Bool {
        let bare = upstreamHost.hasPrefix("[") ? String(upstreamHost.dropFirst().dropLast()) : upstreamHost
        return (upstreamScheme == "https") == isTLS && upstreamPort == port && bare.lowercased() == host.lowercased()
    }
}
