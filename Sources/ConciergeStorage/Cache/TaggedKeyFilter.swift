/// The keys with tag rows while the key index loads, as one bit per key hash: a key it holds
/// answers `true`; a key it does not hold answers `false`, except for the few that share a bit
/// with one it holds (a false `true` costs one needless probe of the tag table when the row is
/// deleted, never a tag row left behind).
///
/// The loader reads the tag table's keys once, in key order, into it (``CacheWriter`` reads
/// them in slices between batches), and the writer adds the key of every put with tags until
/// the load ends; each loaded row's ``RowFacts`` then asks it instead of probing the tag table
/// per row (a B-tree descent, comparing keys, for every row: 37 % of the load of a file whose
/// entries all have tags).
///
/// Sized at 16 bits a key the table can hold (at most 2³¹ bits, 256 MiB; at least 2²⁰): at
/// ten million rows, 32 MiB while the index loads, and about one untagged key in sixteen
/// answers `true` if every other key has tags.
struct TaggedKeyFilter: Sendable {
    private var words: [UInt64]
    /// 64 − log2(bit count): a hash's bit is `(hash &* multiplier) >> shift`.
    private let shift: UInt64

    private static let multiplier: UInt64 = 0x9E37_79B9_7F4A_7C15

    /// A filter for up to about `keys` keys (the largest rowid is a bound).
    init(keys: Int) {
        var bits = 1 << 20
        while bits < (1 << 31), bits / 16 < keys { bits *= 2 }
        words = [UInt64](repeating: 0, count: bits / 64)
        shift = UInt64(64 - bits.trailingZeroBitCount)
    }

    @inline(__always)
    private func bit(_ hash: UInt64) -> Int {
        Int(truncatingIfNeeded: (hash &* Self.multiplier) >> shift)
    }

    mutating func insert(_ hash: UInt64) {
        let bit = bit(hash)
        words[bit >> 6] |= 1 << UInt64(bit & 63)
    }

    /// `false`: the key has no tag rows.
    func mayContain(_ hash: UInt64) -> Bool {
        let bit = bit(hash)
        return words[bit >> 6] & (1 << UInt64(bit & 63)) != 0
    }
}
