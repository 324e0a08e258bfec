import ConciergeCore
import Testing

/// ``SecretIndex`` against the direct search it replaces for many secrets
/// (``SecretRedactor/scrub(_:literals:)``): the same lines out, and no secret left in them.
@Suite("Secret index")
struct SecretIndexTests {
    /// A seeded generator (SplitMix64), so a failure replays.
    struct Seeded: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    static func token(_ random: inout Seeded, length: Int) -> String {
        "tk" + String((0..<length - 2).map { _ in alphabet[Int.random(in: 0..<alphabet.count, using: &random)] })
    }

    @Test("lines made of words and secrets: the index masks what the direct search masks, for 9 to 5,000 secrets")
    func sameAsDirect() {
        var random = Seeded(state: 47)
        for count in [9, 40, 500, 5000] {
            // Each secret starts with "tk" and holds no "tk" after: none is inside another, and
            // two side by side never make a third.
            let secrets = (0..<count).map { _ in Self.token(&random, length: Int.random(in: 8...48, using: &random)).replacingOccurrences(of: "tk", with: "xx", options: [], range: nil) }
                .map { "tk" + $0.dropFirst(2) }
            let index = SecretIndex(secrets)
            for _ in 0..<(count > 1000 ? 40 : 200) {
                var line = "INFO concierge: request"
                for _ in 0..<Int.random(in: 0...6, using: &random) {
                    switch Int.random(in: 0..<3, using: &random) {
                    case 0: line += " user=" + secrets.randomElement(using: &random)!
                    case 1: line += " word=" + Self.token(&random, length: 12).replacingOccurrences(of: "tk", with: "xx")
                    default: line += secrets.randomElement(using: &random)! + "é,"
                    }
                }
                let scrubbed = index.scrub(line)
                #expect(scrubbed == SecretRedactor.scrub(line, literals: secrets), "\(count) secrets: \(line)")
                #expect(!secrets.contains { scrubbed.contains($0) })
            }
        }
    }

    @Test("an index grown a few secrets at a time (from under the direct limit) masks what one built at once masks")
    func grownSameAsBuilt() {
        var random = Seeded(state: 48)
        let secrets = (0..<600).map { _ in "tk" + Self.token(&random, length: Int.random(in: 8...40, using: &random)).dropFirst(2).replacingOccurrences(of: "tk", with: "xx") }
        var grown = SecretIndex(Array(secrets.prefix(3)))
        var at = 3
        while at < secrets.count {
            let next = min(secrets.count, at + Int.random(in: 1...40, using: &random))
            // A secret added twice, and a short value, change nothing.
            grown.add(Array(secrets[at..<next]) + [secrets[at], "abc"])
            at = next
            let built = SecretIndex(Array(secrets[..<at]))
            #expect(grown.count == at)
            for _ in 0..<5 {
                let line = "INFO user=" + secrets[Int.random(in: 0..<at, using: &random)] + " other=" + secrets.randomElement(using: &random)! + " x"
                #expect(grown.scrub(line) == built.scrub(line), "\(at) secrets: \(line)")
            }
        }
    }

    @Test("the longest secret at a position wins; a line with none comes back as it was; short values are never secrets")
    func longestAndUntouched() {
        let secrets = (0..<12).map { "secret-\($0)-value" } + ["secret-1-value-longer", "abc"]
        let index = SecretIndex(secrets)
        #expect(index.scrub("a secret-1-value-longer here") == "a *** here")
        #expect(index.scrub("x=secret-3-valuesecret-4-value!") == "x=******!")
        let untouched = "INFO concierge: nothing secret here, abc stays"
        #expect(index.scrub(untouched) == untouched)
        #expect(SecretIndex([]).scrub(untouched) == untouched)
        #expect(SecretIndex(["abc"]).isEmpty)
    }
}
