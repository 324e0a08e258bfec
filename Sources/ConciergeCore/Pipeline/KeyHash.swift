import Foundation

/// A 64-bit hash of a cache key's UTF-8 bytes: the in-memory presence set uses it to skip
/// SQLite reads for keys that are certainly not stored, the writer to tell a row's key from
/// another, and the hot tier and the miss coalescer as the key's hash (``HashedKey``). Kept in memory only (the key index is rebuilt from the keys at each start), so
/// the function may change between versions.
///
/// Eight bytes a step (multiply and shift, as SplitMix64 mixes), the last few bytes as one
/// word, then MurmurHash3's finaliser: about a sixth of byte-at-a-time FNV-1a's instructions
/// for a key of a hundred bytes, hashed twice a miss.
public enum KeyHash {
    public static func of(_ key: String) -> UInt64 {
        var key = key
        return key.withUTF8 { of(UnsafeRawBufferPointer($0)) }
    }

    public static func of(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
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

/// A cache key with its ``KeyHash``, hashed once when the key is made: as a dictionary key
/// (the hot tier, the miss coalescer) it feeds the hasher one word instead of the whole text,
/// which a miss looked up four times, and the key index asks for the same hash.
public struct HashedKey: Hashable, Sendable {
    public let text: String
    public let hash: UInt64

    public init(_ text: String) {
        self.text = text
        hash = KeyHash.of(text)
    }

    public static func == (a: HashedKey, b: HashedKey) -> Bool { a.hash == b.hash && a.text == b.text }

    public func hash(into hasher: inout Hasher) { hasher.combine(hash) }
}

extension HashedKey: ExpressibleByStringLiteral {
    public init(stringLiteral text: String) { self.init(text) }
}
