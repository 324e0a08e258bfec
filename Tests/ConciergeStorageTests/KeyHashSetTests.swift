import Testing

@testable import ConciergeStorage

/// ``KeyHashSet`` against `Set<UInt64>` as its model: every operation's answer and the whole
/// contents after each step. Random values from ``SplitMix`` (KeyIndexTests), so a failing seed repeats.
@Suite("Key hash set")
struct KeyHashSetTests {
    static func check(_ set: KeyHashSet, _ model: Set<UInt64>, probes: [UInt64]) {
        #expect(set.count == model.count)
        for value in model { #expect(set.contains(value)) }
        for value in probes { #expect(set.contains(value) == model.contains(value)) }
    }

    @Test("random inserts and removes over a small pool of values (long probe runs, wrap-around, growth, the value 0) answer as a Set does", arguments: [1, 2, 3, 4])
    func model(seed: UInt64) {
        var random = SplitMix(state: seed)
        // A small pool makes removes hit and values come back; a few values end in the same home slot.
        let pool = (0..<300).map { _ in random.next() } + [0, 1, UInt64.max]
        var set = KeyHashSet()
        var model = Set<UInt64>()
        for step in 0..<20_000 {
            let value = pool[Int(random.next() % UInt64(pool.count))]
            switch random.next() % 10 {
            case 0..<5:
                let inserted = set.insert(value)
                #expect(inserted == model.insert(value).inserted)
            case 5..<9:
                let removed = set.remove(value)
                #expect(removed == (model.remove(value) != nil))
            default:
                #expect(set.contains(value) == model.contains(value))
            }
            if step % 997 == 0 { Self.check(set, model, probes: pool) }
        }
        Self.check(set, model, probes: pool)
        set.removeAll(keepingCapacity: true)
        model.removeAll()
        Self.check(set, model, probes: pool)
    }

    @Test("removing from the middle of a run that wraps past the table's end keeps every other value reachable")
    func wrappingRuns() {
        // Values whose home is the last slot of a 16-slot table: found by search, so the run wraps.
        var random = SplitMix(state: 7)
        var lastSlot: [UInt64] = []
        while lastSlot.count < 6 {
            let value = random.next()
            if (value &* 0x9E37_79B9_7F4A_7C15) >> 60 == 15 { lastSlot.append(value) }
        }
        for removed in lastSlot.indices {
            var set = KeyHashSet()
            for value in lastSlot { set.insert(value) }
            let wasThere = set.remove(lastSlot[removed])
            #expect(wasThere)
            for (i, value) in lastSlot.enumerated() { #expect(set.contains(value) == (i != removed)) }
            #expect(set.count == lastSlot.count - 1)
        }
    }

    @Test("a reserved table holds that many values; growth keeps them all")
    func capacity() {
        var random = SplitMix(state: 11)
        var set = KeyHashSet()
        set.reserveCapacity(10_000)
        let values = (0..<50_000).map { _ in random.next() }
        for value in values {
            let inserted = set.insert(value)
            #expect(inserted)
        }
        #expect(set.count == values.count)
        for value in values { #expect(set.contains(value)) }
        #expect(!set.contains(random.next()))
        #expect(KeyHashSet(values).count == values.count)
    }
}
