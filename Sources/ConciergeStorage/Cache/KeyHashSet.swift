/// A set of 64-bit key hashes in one flat array: open addressing with linear probing, the slot
/// chosen by the hash's top bits after a Fibonacci multiply, deletion by shifting the probe run
/// back (no tombstones). ``KeyIndex``'s set of the keys that may have a row.
///
/// What it saves over `Set<UInt64>` at ten million keys is the hashing, not memory (both take 8
/// bytes a slot, at most 3/4 full): the values are already hashes, so they need no SipHash pass
/// of their own, and a lookup or an insert is one multiply and a short scan of adjacent slots.
/// Growing doubles the table and re-inserts every value, as `Set` does, but with no hashing: at
/// ten million values the re-inserts of every growth together cost about a second's fraction.
///
/// Slot value 0 means empty; the hash 0 is kept beside the table (``hasZero``).
struct KeyHashSet: Sendable {
    private var slots: [UInt64]
    /// 64 − log2(slot count): a hash's home slot is `(hash &* multiplier) >> shift`.
    private var shift: UInt64
    private var hasZero = false
    /// The values in the set.
    private(set) var count = 0

    private static let multiplier: UInt64 = 0x9E37_79B9_7F4A_7C15
    private static let smallest = 16

    init(minimumCapacity: Int = 0) {
        let slotCount = Self.slotCount(for: minimumCapacity)
        slots = [UInt64](repeating: 0, count: slotCount)
        shift = UInt64(64 - slotCount.trailingZeroBitCount)
    }

    init<S: Sequence>(_ values: S) where S.Element == UInt64 {
        self.init(minimumCapacity: values.underestimatedCount)
        for value in values { insert(value) }
    }

    /// The power of two at least `Self.smallest` that holds `capacity` values at most 3/4 full.
    private static func slotCount(for capacity: Int) -> Int {
        var count = smallest
        while count / 4 * 3 < capacity { count *= 2 }
        return count
    }

    private var mask: Int { slots.count - 1 }

    @inline(__always)
    private func home(_ value: UInt64) -> Int {
        Int(truncatingIfNeeded: (value &* Self.multiplier) >> shift)
    }

    /// The slot holding `value`, or the empty slot where it would go.
    @inline(__always)
    private func slot(of value: UInt64) -> (index: Int, found: Bool) {
        var i = home(value)
        while true {
            let held = slots[i]
            if held == value { return (i, true) }
            if held == 0 { return (i, false) }
            i = (i + 1) & mask
        }
    }

    func contains(_ value: UInt64) -> Bool {
        value == 0 ? hasZero : slot(of: value).found
    }

    /// Adds `value`; whether it was not there before.
    @discardableResult
    mutating func insert(_ value: UInt64) -> Bool {
        if value == 0 {
            defer { hasZero = true }
            if hasZero { return false }
            count += 1
            return true
        }
        var (i, found) = slot(of: value)
        if found { return false }
        if (count + 1) > slots.count / 4 * 3 {
            grow(to: slots.count * 2)
            i = slot(of: value).index
        }
        slots[i] = value
        count += 1
        return true
    }

    /// Removes `value`; whether it was there.
    @discardableResult
    mutating func remove(_ value: UInt64) -> Bool {
        if value == 0 {
            guard hasZero else { return false }
            (hasZero, count) = (false, count - 1)
            return true
        }
        var (hole, found) = slot(of: value)
        guard found else { return false }
        // Backward shift: a later value of the probe run moves into the hole unless its home
        // lies cyclically after the hole, up to its own slot (then it is reachable already).
        var next = (hole + 1) & mask
        while slots[next] != 0 {
            let wanted = home(slots[next])
            let stays = hole <= next ? (hole < wanted && wanted <= next) : (hole < wanted || wanted <= next)
            if !stays {
                slots[hole] = slots[next]
                hole = next
            }
            next = (next + 1) & mask
        }
        slots[hole] = 0
        count -= 1
        return true
    }

    /// Room for `capacity` values without growing.
    mutating func reserveCapacity(_ capacity: Int) {
        let wanted = Self.slotCount(for: capacity)
        if wanted > slots.count { grow(to: wanted) }
    }

    mutating func removeAll(keepingCapacity: Bool = false) {
        if keepingCapacity {
            slots.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
        } else {
            self = KeyHashSet()
        }
        (hasZero, count) = (false, 0)
    }

    private mutating func grow(to slotCount: Int) {
        let old = slots
        slots = [UInt64](repeating: 0, count: slotCount)
        shift = UInt64(64 - slotCount.trailingZeroBitCount)
        for value in old where value != 0 {
            slots[slot(of: value).index] = value
        }
    }
}
