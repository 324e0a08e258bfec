import ConciergeCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Matches cache keys against an invalidation regex, fast.
///
/// Patterns that mean the same in POSIX extended syntax and in ICU syntax (no `\d`-style
/// escapes, no `(?…)` groups, no lazy quantifiers) run on glibc's `regexec` straight over
/// the bytes SQLite hands out, with no string allocated per key; anything else falls back
/// to `NSRegularExpression`. The search is unanchored either way.
public final class KeyMatcher: @unchecked Sendable {
    // @unchecked: `regex` is written only in init and freed in deinit; regexec on a
    // compiled regex_t is read-only and thread-safe in glibc. The fallback regex is
    // NSRegularExpression, immutable and thread-safe for matching.
    private var regex = regex_t()
    private let posix: Bool
    private let fallback: RegexBox

    /// Throws the ICU compiler's error for an invalid pattern.
    public init(_ pattern: String) throws {
        fallback = try RegexBox(pattern)
        if Self.isPortable(pattern), regcomp(&regex, pattern, REG_EXTENDED | REG_NOSUB) == 0 {
            posix = true
        } else {
            posix = false
        }
    }

    deinit {
        if posix { regfree(&regex) }
    }

    public var usesPOSIX: Bool { posix }

    /// Whether the pattern means the same in POSIX ERE and ICU.
    static func isPortable(_ pattern: String) -> Bool {
        let bytes = Array(pattern.utf8)
        if bytes.contains(where: { $0 >= 0x80 }) { return false }
        var i = 0
        var inClass = false
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "\\") {
                guard i + 1 < bytes.count else { return false }
                let next = bytes[i + 1]
                // Escaped letters and digits are classes or back-references in ICU.
                if (next >= 0x30 && next <= 0x39) || (next | 0x20 >= 0x61 && next | 0x20 <= 0x7A) { return false }
                if inClass { return false }  // POSIX has no escapes inside brackets
                i += 2
                continue
            }
            if inClass {
                if c == UInt8(ascii: "]") { inClass = false }
                if c == UInt8(ascii: "[") { return false }  // [:class:] and ICU set operations
            } else {
                if c == UInt8(ascii: "[") {
                    inClass = true
                    // `[]…]` and `[^]…]` differ; keep it simple.
                    if i + 1 < bytes.count, bytes[i + 1] == UInt8(ascii: "]") { return false }
                    if i + 2 < bytes.count, bytes[i + 1] == UInt8(ascii: "^"), bytes[i + 2] == UInt8(ascii: "]") { return false }
                }
                if c == UInt8(ascii: "("), i + 1 < bytes.count, bytes[i + 1] == UInt8(ascii: "?") { return false }
                if c == UInt8(ascii: "?") || c == UInt8(ascii: "+") || c == UInt8(ascii: "*") || c == UInt8(ascii: "}") {
                    if i + 1 < bytes.count, bytes[i + 1] == UInt8(ascii: "?") || bytes[i + 1] == UInt8(ascii: "+") { return false }
                }
                if c == UInt8(ascii: "{") {
                    // ICU takes a `{` that is not a valid interval literally; POSIX may not.
                    var j = i + 1
                    while j < bytes.count, (bytes[j] >= 0x30 && bytes[j] <= 0x39) || bytes[j] == UInt8(ascii: ",") { j += 1 }
                    if j >= bytes.count || bytes[j] != UInt8(ascii: "}") || j == i + 1 { return false }
                }
            }
            i += 1
        }
        return !inClass
    }

    /// Matches a NUL-terminated UTF-8 key.
    public func matches(cString: UnsafePointer<CChar>) -> Bool {
        if posix { return regexec(&regex, cString, 0, nil, 0) == 0 }
        return fallback.firstMatch(in: String(cString: cString))
    }

    public func matches(_ key: String) -> Bool {
        if posix { return key.withCString { regexec(&regex, $0, 0, nil, 0) == 0 } }
        return fallback.firstMatch(in: key)
    }
}

/// FNV-1a over the key's UTF-8 bytes: the in-memory presence set uses it to skip SQLite
/// reads for keys that are certainly not stored.
enum KeyHash {
    static func of(_ key: String) -> UInt64 {
        var key = key
        return key.withUTF8 { of(UnsafeRawBufferPointer($0)) }
    }

    static func of(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01B3
        }
        return hash
    }
}
