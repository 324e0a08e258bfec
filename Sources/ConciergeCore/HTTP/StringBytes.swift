/// Byte tests over a string's own UTF-8 bytes: `text.utf8.contains(byte)` runs the generic
/// sequence code, a few dozen instructions a byte, and it runs for every header name of
/// every request.
public enum StringBytes {
    /// Whether `text` holds `byte`.
    @inlinable
    public static func contains(_ byte: UInt8, in text: String) -> Bool {
        if let found = text.utf8.withContiguousStorageIfAvailable({ bytes in
            for b in bytes where b == byte { return true }
            return false
        }) {
            return found
        }
        return text.utf8.contains(byte)
    }
}
