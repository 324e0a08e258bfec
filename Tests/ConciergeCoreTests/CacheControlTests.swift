import ConciergeCore
import Testing

/// `Cache-Control` by its grammar (RFC 9111 §5.2): never a substring search.
@Suite("Cache-Control")
struct CacheControlTests {
    @Test("directives over several lines, names without case, values as tokens or quoted strings")
    func parsesTheGrammar() {
        let cc = CacheControl(["public, Max-Age=60", "s-maxage=\"120\", stale-while-revalidate=30,no-transform"])
        #expect(cc.isPublic && cc.maxAge == 60 && cc.sMaxAge == 120 && cc.staleWhileRevalidate == 30 && cc.has("no-transform"))
        #expect(!cc.noStore && !cc.isPrivate && !cc.noCache)
        #expect(cc.directives.map(\.name) == ["public", "max-age", "s-maxage", "stale-while-revalidate", "no-transform"])
    }

    @Test("a word inside another directive or a quoted string is not that directive")
    func noSubstringMatches() {
        #expect(!CacheControl(["x-no-store-please=1"]).noStore)
        #expect(!CacheControl(["community=\"private, no-store\""]).isPrivate)
        #expect(!CacheControl(["community=\"private, no-store\""]).noStore)
        #expect(CacheControl(["community=\"a,b\", private"]).isPrivate)
        #expect(CacheControl(["private=\"Set-Cookie, X-User\""]).value("private") == "Set-Cookie, X-User")
        #expect(CacheControl(["no-cache=\"a\\\"b\""]).value("no-cache") == "a\"b")
    }

    @Test("bad values: a malformed freshness limit makes the reply stale; the first of duplicates counts; huge values are capped")
    func badValues() {
        #expect(CacheControl(["max-age=abc"]).maxAge == 0)
        #expect(CacheControl(["max-age=-1"]).maxAge == 0)
        #expect(CacheControl(["max-age"]).maxAge == 0)
        #expect(CacheControl(["max-age=\"\""]).maxAge == 0)
        #expect(CacheControl(["max-age=10, max-age=20"]).maxAge == 10)
        #expect(CacheControl(["max-age=99999999999999999999"]).maxAge == CacheControl.maxDeltaSeconds)
        #expect(CacheControl(["max-age=007"]).maxAge == 7)
        #expect(CacheControl([String]()).maxAge == nil)
    }

    @Test("junk is skipped member by member: empty members, stray separators, an unterminated quote")
    func junk() {
        #expect(CacheControl([" , ,no-store,, "]).noStore)
        #expect(CacheControl(["max-age=60 junk, no-store"]).directives.map(\.name) == ["no-store"])
        #expect(CacheControl(["=5, private"]).isPrivate)
        #expect(CacheControl(["no-cache, x=\"open"]).directives.map(\.name) == ["no-cache"])
        #expect(CacheControl(["ＭＡＸ-age=5, no-store"]).noStore)
    }

    @Test("the [String] initializer parses as the generic one does")
    func arrayInitializer() {
        let lines = ["Max-Age=60, No-Store", "private=\"set-cookie\", s-maxage = 5", "no-cache=\"a\\\"b\", x"]
        #expect(CacheControl(lines) == CacheControl(lines[...]))
        #expect(CacheControl(lines).seconds("max-age") == 60)
        #expect(CacheControl(lines).noStore)
    }
}
