/// RFC 9110 syntax checks for what Concierge puts into a request it builds: header names
/// must be tokens (§5.1), header values field values (§5.5), methods tokens (§9.1).
///
/// - Important: every header name or value that came from outside (configuration, a batch
///   or chain sub-request, a template, a captured token) goes through ``problem(name:value:)``
///   before it reaches an `HTTPHeaders`; NIO traps on a non-ASCII name.
public enum HTTPFieldSyntax {
    /// `tchar` of RFC 9110 §5.6.2: ASCII letters, digits and `!#$%&'*+-.^_`|~`, read as one
    /// bit of two 64-bit masks (bytes 0–63, 64–127) instead of a chain of range tests: it runs
    /// for every byte of every field name sent upstream.
    @inlinable
    public static func isTokenCharacter(_ byte: UInt8) -> Bool {
        if byte < 64 { return (0x03FF_6CFA_0000_0000 as UInt64) >> byte & 1 != 0 }
        if byte < 128 { return (0x57FF_FFFF_C7FF_FFFE as UInt64) >> (byte &- 64) & 1 != 0 }
        return false
    }

    /// A non-empty RFC 9110 token (header names, methods, transfer codings).
    public static func isToken(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy(isTokenCharacter)
    }

    /// An RFC 9110 field value: visible ASCII, obs-text, and spaces or tabs only between
    /// visible characters (no CR, LF, NUL or other control bytes; no leading or trailing
    /// white space).
    public static func isFieldValue(_ text: String) -> Bool {
        let bytes = text.utf8
        if let first = bytes.first, first == 0x20 || first == 0x09 { return false }
        if let last = bytes.last, last == 0x20 || last == 0x09 { return false }
        return bytes.allSatisfy { $0 == 0x20 || $0 == 0x09 || ($0 >= 0x21 && $0 != 0x7F) }
    }

    /// An origin-form request target as the listener's parser would accept it: starts with
    /// `/`, visible ASCII only (no space, no control byte; anything else percent-encoded).
    public static func isOriginFormTarget(_ text: String) -> Bool {
        text.hasPrefix("/") && text.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    /// Why a header field cannot be sent, or `nil` when it can.
    public static func problem(name: String, value: String) -> String? {
        if !isToken(name) { return "invalid header name '\(printable(name))' (must be an RFC 9110 token)" }
        if !isFieldValue(value) { return "invalid value for header '\(name)' (control characters or surrounding white space)" }
        return nil
    }

    /// A text safe to quote in an error message: control bytes escaped, at most 64 characters.
    public static func printable(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars.prefix(64) {
            out += scalar.value < 0x20 || scalar.value == 0x7F ? scalar.escaped(asASCII: true) : String(scalar)
        }
        return text.unicodeScalars.count > 64 ? out + "…" : out
    }
}
