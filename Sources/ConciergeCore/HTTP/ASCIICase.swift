/// Case-insensitive comparison in ASCII only, by bytes, without lowercased copies: how HTTP
/// compares field names and tokens (RFC 9110 §5.1). For code that runs on every request.
public enum ASCIICase {
    /// `byte` lowered when it is an ASCII capital letter; any other byte unchanged.
    @inlinable
    public static func lowered(_ byte: UInt8) -> UInt8 {
        (0x41...0x5A).contains(byte) ? byte | 0x20 : byte
    }

    /// Whether `text` equals `lowercase` (lowercase ASCII), ignoring ASCII case.
    @inlinable
    public static func equals(_ text: String, lowercase: String) -> Bool {
        let count = text.utf8.count
        guard count == lowercase.utf8.count else { return false }
        // Over the strings' own bytes, without the copies (a retain and a release each) that
        // `withUTF8` needs of a `var`; every string here is native, so both lend their bytes.
        let answer = text.utf8.withContiguousStorageIfAvailable { a in
            lowercase.utf8.withContiguousStorageIfAvailable { b in
                for i in 0..<count where lowered(a[i]) != b[i] { return false }
                return true
            }
        }
        if let answer = answer ?? nil { return answer }
        return zip(text.utf8, lowercase.utf8).allSatisfy { lowered($0) == $1 }
    }

    /// Whether `bytes` equal `lowercase` (lowercase ASCII), ignoring ASCII case.
    @inlinable
    public static func equals(_ bytes: UnsafeRawBufferPointer, lowercase: StaticString) -> Bool {
        guard bytes.count == lowercase.utf8CodeUnitCount else { return false }
        let b = lowercase.utf8Start
        for i in 0..<bytes.count where lowered(bytes[i]) != b[i] { return false }
        return true
    }

    /// Whether `text` equals one of `lowercase` (lowercase ASCII), ignoring ASCII case.
    @inlinable
    public static func equalsAny(_ text: String, lowercase: [String]) -> Bool {
        // Lengths first: most names match none, and most candidates differ in length.
        let count = text.utf8.count
        for candidate in lowercase where candidate.utf8.count == count && equals(text, lowercase: candidate) {
            return true
        }
        return false
    }

    /// Whether `a` equals `b`, both in any case, ignoring ASCII case.
    @inlinable
    public static func equals(_ a: String, _ b: String) -> Bool {
        guard a.utf8.count == b.utf8.count else { return false }
        var (a, b) = (a, b)
        return a.withUTF8 { x in
            b.withUTF8 { y in
                for i in x.indices where lowered(x[i]) != lowered(y[i]) { return false }
                return true
            }
        }
    }

    /// Whether `text` contains `lowercase` (lowercase ASCII), ignoring ASCII case.
    public static func contains(_ text: String, lowercase: String) -> Bool {
        // Over the strings' own bytes: no arrays copied (it runs on every upstream reply).
        var (text, lowercase) = (text, lowercase)
        return text.withUTF8 { haystack in
            lowercase.withUTF8 { needle in
                guard haystack.count >= needle.count else { return false }
                if needle.isEmpty { return true }
                for start in 0...(haystack.count - needle.count) where lowered(haystack[start]) == needle[0] {
                    var matched = 1
                    while matched < needle.count, lowered(haystack[start + matched]) == needle[matched] { matched += 1 }
                    if matched == needle.count { return true }
                }
                return false
            }
        }
    }
}
