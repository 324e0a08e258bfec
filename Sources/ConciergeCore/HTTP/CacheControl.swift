/// A `Cache-Control` field (RFC 9111 §5.2) parsed by its grammar, not searched for words:
/// `#( token [ "=" ( token / quoted-string ) ] )` over every field line, names compared without
/// case, quoted strings unescaped (a comma inside quotes separates nothing).
///
/// Duplicates and bad values follow RFC 9111 §4.2.1 and §5.2: of a directive given more than
/// once, the first counts; a delta-seconds directive whose value is not one (`max-age=abc`,
/// `max-age=-1`) makes the reply stale (`max-age` 0) rather than be ignored; a value too large
/// for the clock is the largest (2^31 s, §1.2.2).
public struct CacheControl: Sendable, Equatable {
    /// Every directive in order, names lowercased, values unquoted (`nil`: no `=value`).
    public private(set) var directives: [(name: String, value: String?)] = []

    public static func == (a: CacheControl, b: CacheControl) -> Bool {
        a.directives.elementsEqual(b.directives) { $0.name == $1.name && $0.value == $1.value }
    }

    /// Directives already parsed (``HTTPCaching/directives(_:)`` reads `CDN-Cache-Control`).
    public init(directives: [(name: String, value: String?)]) {
        self.directives = directives
    }

    /// Parses the values of every `Cache-Control` line of a message.
    public init<Lines: Sequence>(_ lines: Lines) where Lines.Element: StringProtocol {
        for line in lines { Self.parse(Substring(line), into: &directives) }
    }

    /// The field's lines as `HTTPHeaders` gives them: the same parse, without the generic
    /// iteration (which runs unspecialized across modules, on every upstream reply).
    public init(_ lines: [String]) {
        for line in lines { Self.parse(line[...], into: &directives) }
    }

    /// Whether the directive is present (with or without a value).
    public func has(_ name: String) -> Bool { directives.contains { $0.name == name } }

    /// The value of the first occurrence (`nil` when absent or given without a value).
    public func value(_ name: String) -> String? { directives.first { $0.name == name }?.value }

    public var noStore: Bool { has("no-store") }
    /// `private`, with or without field names: a shared cache never stores such a reply.
    public var isPrivate: Bool { has("private") }
    public var noCache: Bool { has("no-cache") }
    public var isPublic: Bool { has("public") }
    public var mustRevalidate: Bool { has("must-revalidate") }
    public var proxyRevalidate: Bool { has("proxy-revalidate") }
    public var onlyIfCached: Bool { has("only-if-cached") }
    public var maxAge: Int? { seconds("max-age") }
    public var sMaxAge: Int? { seconds("s-maxage") }
    public var minFresh: Int? { seconds("min-fresh") }
    public var staleWhileRevalidate: Int? { seconds("stale-while-revalidate") }
    public var staleIfError: Int? { seconds("stale-if-error") }

    /// The largest delta-seconds a cache needs to tell apart (RFC 9111 §1.2.2).
    public static let maxDeltaSeconds = 2_147_483_648

    /// A delta-seconds directive: `nil` when absent, 0 when its value is not a non-negative
    /// integer (a malformed freshness limit makes the reply stale).
    public func seconds(_ name: String) -> Int? {
        guard let first = directives.first(where: { $0.name == name }) else { return nil }
        guard let text = first.value, !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return 0 }
        let digits = text.drop { $0 == "0" }
        if digits.count > 10 { return Self.maxDeltaSeconds }
        return min(Int(digits) ?? 0, Self.maxDeltaSeconds)
    }

    // MARK: Grammar

    private static func isTokenByte(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"), UInt8(ascii: "'"),
             UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "^"), UInt8(ascii: "_"),
             UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }

    private static func parse(_ line: Substring, into out: inout [(name: String, value: String?)]) {
        let bytes = Array(line.utf8)
        var i = 0
        func skipSpace() { while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x09 { i += 1 } }
        func skipToComma() {
            // Past a malformed member: to the next comma outside quotes.
            var quoted = false
            while i < bytes.count {
                if bytes[i] == UInt8(ascii: "\"") { quoted.toggle() } else if bytes[i] == UInt8(ascii: "\\"), quoted { i += 1 } else if bytes[i] == UInt8(ascii: ","), !quoted { return }
                i += 1
            }
        }
        while i < bytes.count {
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            let nameStart = i
            while i < bytes.count, isTokenByte(bytes[i]) { i += 1 }
            guard i > nameStart else { skipToComma(); continue }
            let name = String(decoding: bytes[nameStart..<i].lazy.map(ASCIICase.lowered), as: UTF8.self)
            skipSpace()
            var value: String? = nil
            if i < bytes.count, bytes[i] == UInt8(ascii: "=") {
                i += 1
                skipSpace()
                if i < bytes.count, bytes[i] == UInt8(ascii: "\"") {
                    i += 1
                    var text: [UInt8] = []
                    var closed = false
                    while i < bytes.count {
                        let b = bytes[i]
                        if b == UInt8(ascii: "\\"), i + 1 < bytes.count { text.append(bytes[i + 1]); i += 2; continue }
                        i += 1
                        if b == UInt8(ascii: "\"") { closed = true; break }
                        text.append(b)
                    }
                    guard closed else { return }  // An unterminated quote ends the line.
                    value = String(decoding: text, as: UTF8.self)
                } else {
                    let valueStart = i
                    while i < bytes.count, isTokenByte(bytes[i]) { i += 1 }
                    value = String(decoding: bytes[valueStart..<i], as: UTF8.self)
                }
                skipSpace()
            }
            guard i >= bytes.count || bytes[i] == UInt8(ascii: ",") else {
                // Trailing junk after the member (`max-age=60 x`): the member is not kept.
                skipToComma()
                continue
            }
            out.append((name, value))
        }
    }
}
