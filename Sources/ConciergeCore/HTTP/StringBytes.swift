/// Byte tests over a string's own UTF-8 bytes: `text.utf8.contains(byte)` runs the generic
/// sequence code, a few dozen instructions a byte, and it runs for every header name of
/// every request.
public enum StringBytes {
    /// Whether `text` holds `byte`.
    @inlinable
    public static func contains(_ byte: UInt8, in text: String) -> Bool {
        !allSatisfy(in: text) { $0 != byte }
    }

    /// Whether every byte of `text` satisfies `predicate`.
    @inlinable
    public static func allSatisfy(in text: String, _ predicate: (UInt8) -> Bool) -> Bool {
        text.utf8.withContiguousStorageIfAvailable { $0.allSatisfy(predicate) } ?? text.utf8.allSatisfy(predicate)
    }
}
