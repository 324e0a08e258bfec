@testable import ConciergeStorage
import Testing

/// The invalidation matcher: POSIX fast path only where it means the same as ICU.
@Suite("KeyMatcher")
struct KeyMatcherTests {
    @Test("portable patterns use regexec; ICU-only constructs fall back", arguments: [
        ("limit=[0-2]&", true), ("^GET .*/api/items\\?", true), ("user=(alice|bob) ", true), ("n=1[0-9]*5 ", true),
        ("a{2,3}", true), ("\\d+", false), ("(?i)items", false), ("a+?", false), ("[\\w]", false), ("[[:digit:]]", false),
("é", false), ("\\bitems", false),
    ])
    func portability(pattern: String, portable: Bool) throws {
        #expect(KeyMatcher.isPortable(pattern) == portable)
        #expect(try KeyMatcher(pattern).usesPOSIX == portable)
    }

    @Test("both engines agree on unanchored search", arguments: [
        "limit=[0-2]&", "^GET ", "v=1$", "user=(alice|bob) ", "\\d{2}", "(?i)API/ITEMS", "items\\?a", "x*",
    ])
    func agreement(pattern: String) throws {
        let keys = ["GET https://api.example.com/api/items?a=1&limit=1& v=1", "GET https://x/api/user/info user=alice v=1",
                    "POST https://x/api/items?limit=22 user=bob v=2", "GET https://x/other v=1"]
        let matcher = try KeyMatcher(pattern)
        let icu = try ConciergeCore.RegexBox(pattern)
        for key in keys {
            #expect(matcher.matches(key) == icu.firstMatch(in: key), "\(pattern) on \(key)")
            #expect(key.withCString { matcher.matches(cString: $0) } == icu.firstMatch(in: key))
        }
    }
}

import ConciergeCore
