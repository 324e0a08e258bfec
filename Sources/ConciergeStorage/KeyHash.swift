import Foundation

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
