import Foundation

/// A 64-bit hash of the key's UTF-8 bytes: the in-memory presence set uses it to skip SQLite
/// reads for keys that are certainly not stored, and the writer to tell a row's key from
/// another. Kept in memory only (the key index is rebuilt from the keys at each start), so
/// the function may change between versions.
///
/// Eight bytes a step (multiply and shift, as SplitMix64 mixes), the last few bytes as one
/// word, then MurmurHash3's finaliser: about a sixth of byte-at-a-time FNV-1a's instructions
/// for a key of a hundred bytes, hashed twice a miss.
enum KeyHash {
    static func of(_ key: String) -> UInt64 {
        var key = key
        return key.withUTF8 { of(UnsafeRawBufferPointer($0)) }
    }

    static func of(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var hash: UInt64 = 0x9E37_79B9_7F4A_7C15 ^ UInt64(truncatingIfNeeded: bytes.count)
        var offset = 0
        while offset &+ 8 <= bytes.count {
            hash = mix(hash ^ UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
            offset &+= 8
        }
        if offset < bytes.count {
            var tail: UInt64 = 0
            withUnsafeMutableBytes(of: &tail) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[offset...])) }
            hash = mix(hash ^ UInt64(littleEndian: tail))
        }
        hash ^= hash >> 33
        hash &*= 0xFF51_AFD7_ED55_8CCD
        hash ^= hash >> 33
        hash &*= 0xC4CE_B9FE_1A85_EC53
        return hash ^ (hash >> 33)
    }

    @inline(__always)
    private static func mix(_ value: UInt64) -> UInt64 {
        let product = value &* 0xBF58_476D_1CE4_E5B9
        return product ^ (product >> 31)
    }
}
