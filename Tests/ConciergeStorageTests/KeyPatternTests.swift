@testable import ConciergeStorage
import Testing

/// Invalidation patterns: PCRE2 syntax, an unanchored search, and a bounded cost per key.
@Suite("Key patterns")
struct KeyPatternTests {
    static let keys = [
        "GET https://api.example.com/api/items?limit=10&offset=0 v=1",
        "GET https://api.example.com/api/items?limit=20 v=1",
        "GET https://api.example.com/api/user/info user=42 v=1",
        "POST https://api.example.com/api/search?q=%E4%B8%AD v=1",
        "GET https://api.example.com/api/tags?name=中文 v=1",
    ]

    static func matched(_ source: String) throws -> [Int] {
        let matcher = try KeyPattern(source).matcher()
        return try keys.indices.filter { try matcher.matches(keys[$0]) }
    }

    @Test("ordinary patterns select the keys they did before: anchored, unanchored, escapes, classes, UTF-8")
    func ordinaryPatterns() throws {
        #expect(try Self.matched(#"^GET https://api\.example\.com/api/items"#) == [0, 1])
        #expect(try Self.matched(#"items\?.*limit=10"#) == [0])
        #expect(try Self.matched("user=42") == [2])
        #expect(try Self.matched(#"limit=\d{2}&"#) == [0])
        #expect(try Self.matched("^POST ") == [3])
        #expect(try Self.matched("name=中.$|name=中文 ") == [4])
        #expect(try Self.matched("(?i)^get .*USER") == [2])
        #expect(try Self.matched("") == [0, 1, 2, 3, 4])
    }

    @Test("a pattern that backtracks without end stops at the match limit on the first such key")
    func runawayPatternHitsTheMatchLimit() throws {
        let matcher = try KeyPattern("(?:a+)+$").matcher()
        let key = "GET https://api.example.com/api/items?q=" + String(repeating: "a", count: 30) + "! v=1"
        #expect(throws: KeyPatternError.limitExceeded("the match limit (1000000 steps)")) { try matcher.matches(key) }
        // The same pattern on a key where it cannot run away answers normally.
        #expect(try matcher.matches("GET https://api.example.com/api/items?q=aaa"))
    }

    @Test("the limits are the pattern's: a lower match limit stops sooner, a lower heap limit names the heap")
    func limitsAreConfigurable() throws {
        let tight = try KeyPattern("(?:a+)+$", limits: .init(match: 1_000)).matcher()
        #expect(throws: KeyPatternError.limitExceeded("the match limit (1000 steps)")) { try tight.matches(String(repeating: "a", count: 20) + "!") }
        let deep = try KeyPattern("^(a|b)*$", limits: .init(heapKiB: 1)).matcher()
        #expect(throws: KeyPatternError.limitExceeded("the heap limit (1 KiB)")) { try deep.matches(String(repeating: "ab", count: 5_000)) }
    }

    @Test("an invalid or oversized pattern is refused with PCRE2's message and offset")
    func invalidPatterns() {
        #expect(throws: KeyPatternError.invalid("missing closing parenthesis at offset 2")) { try KeyPattern("(a") }
        #expect(throws: KeyPatternError.invalid("regular expression is too large at offset 26")) { try KeyPattern("((a{1,100}){1,100}){1,100}") }
        #expect(throws: KeyPatternError.invalid("the pattern is longer than 4096 bytes")) { try KeyPattern(String(repeating: "a", count: 4_097)) }
    }
}
