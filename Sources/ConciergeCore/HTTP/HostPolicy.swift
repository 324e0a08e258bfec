/// Which `Host` a listener answers (DNS-rebinding defence): its own address, the loopback
/// names, `listen.allowed_hosts` and the upstreams' hosts. Everything else is refused
/// before routing, so a web page on another origin that resolves to 127.0.0.1 never rides
/// the session.
///
/// Loopback literals (`127.0.0.1`, `localhost`, `[::1]`) and the bound address are
/// accepted with any port: a browser only sends them for pages it loaded from this machine
/// under that very name, which rebinding cannot produce.
public struct HostPolicy: Sendable {
    /// Names accepted with any port, lower-cased, IPv6 without brackets.
    let names: Set<String>
    /// Entries starting with a dot: any subdomain of that name.
    let suffixes: [String]

    public init(listenerHosts: [String], allowedHosts: [String], upstreamHosts: [String]) {
        var names: Set<String> = ["127.0.0.1", "localhost", "::1"]
        var suffixes: [String] = []
        for host in listenerHosts + upstreamHosts {
            names.insert(Self.normalized(host))
        }
        for entry in allowedHosts {
            let name = Self.normalized(entry)
            if name.hasPrefix(".") { suffixes.append(name) } else { names.insert(name) }
        }
        names.remove("0.0.0.0")
        names.remove("::")
        self.names = names
        self.suffixes = suffixes
    }

    public enum Verdict: Equatable, Sendable {
        case allowed
        /// No `Host` on an HTTP/1.1 request, two of them, or one that is not `host[:port]`: 400.
        case malformed(String)
        /// A well-formed name this listener does not answer: 403.
        case forbidden(String)
    }

    /// Judges the `Host` fields of a request. `requiresHost` is false for HTTP/1.0.
    public func verdict(hostFields: [String], requiresHost: Bool) -> Verdict {
        switch hostFields.count {
        case 0: return requiresHost ? .malformed("missing Host header") : .allowed
        case 1: break
        default: return .malformed("more than one Host header")
        }
        guard let host = Self.hostPart(of: hostFields[0]) else {
            return .malformed("invalid Host header")
        }
        return allows(host) ? .allowed : .forbidden(host)
    }

    /// Whether a bare host name (no port) is one this listener answers.
    public func allows(_ host: String) -> Bool {
        let name = Self.normalized(host)
        if names.contains(name) { return true }
        return suffixes.contains { name.hasSuffix($0) || name == String($0.dropFirst()) }
    }

    /// The host of a `Host` value (`name`, `name:port`, `[v6]:port`), lower-cased, or `nil`
    /// when the value is not of that form.
    public static func hostPart(of value: String) -> String? {
        // Byte by byte: this runs on every request.
        var rest = value.utf8[...]
        let host: Substring.UTF8View
        if rest.first == UInt8(ascii: "[") {
            guard let close = rest.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            host = rest[rest.index(after: rest.startIndex)..<close]
            rest = rest[rest.index(after: close)...]
            guard !host.isEmpty, host.allSatisfy({ isHexDigit($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") }) else { return nil }
        } else {
            let colon = rest.firstIndex(of: UInt8(ascii: ":")) ?? rest.endIndex
            host = rest[..<colon]
            rest = rest[colon...]
            guard !host.isEmpty, host.allSatisfy(isRegNameByte) else { return nil }
        }
        if !rest.isEmpty {
            guard rest.first == UInt8(ascii: ":"), rest.count <= 6, rest.dropFirst().allSatisfy(isDigit) else { return nil }
        }
        let text = String(Substring(host))
        return host.contains(where: { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) ? text.lowercased() : text
    }

    private static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        isDigit(byte) || (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "f"))
    }

    /// RFC 3986 reg-name: unreserved, sub-delims and `%`.
    private static func isRegNameByte(_ byte: UInt8) -> Bool {
        if isDigit(byte) || (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "z")) { return true }
        return "-._~!$&'()*+,;=%".utf8.contains(byte)
    }

    static func normalized(_ host: String) -> String {
        var h = host.lowercased()
        if h.hasPrefix("["), h.hasSuffix("]") { h = String(h.dropFirst().dropLast()) }
        return h
    }
}
