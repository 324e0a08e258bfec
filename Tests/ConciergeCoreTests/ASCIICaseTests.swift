import ConciergeCore
import Testing

@Suite("ASCII case")
struct ASCIICaseTests {
    @Test("equals folds A–Z only: other bytes, and lengths, must match")
    func equals() {
        #expect(ASCIICase.equals("Cache-CONTROL", lowercase: "cache-control"))
        #expect(!ASCIICase.equals("Serv\u{e9}r", lowercase: "server"))
        #expect(!ASCIICase.equals("Te_", lowercase: "te-"))
        #expect(!ASCIICase.equals("[e", lowercase: "{e"), "'[' lowered is not '{'")
        #expect(!ASCIICase.equals("servers", lowercase: "server"))
        #expect(ASCIICase.equals("", lowercase: ""))
    }

    @Test("contains finds the needle at the start, the middle and the end, in any case")
    func contains() {
        #expect(ASCIICase.contains("NO-CACHE", lowercase: "no-cache"))
        #expect(ASCIICase.contains("max-age=0, No-Cache", lowercase: "no-cache"))
        #expect(ASCIICase.contains("private, no-cache, must-revalidate", lowercase: "no-cache"))
        #expect(!ASCIICase.contains("no-cach", lowercase: "no-cache"))
        #expect(!ASCIICase.contains("no_cache", lowercase: "no-cache"))
        #expect(ASCIICase.contains("anything", lowercase: ""))
    }
}

@Suite("Field lists")
struct FieldListTests {
    @Test("elements are split on commas, trimmed and lowercased")
    func elements() {
        #expect(FieldList.elements("Keep-Alive, CLOSE") == ["keep-alive", "close"])
        #expect(FieldList.elements("gzip,,chunked") == ["gzip", "chunked"])
        #expect(FieldList.elements("a, ,b") == ["a", "", "b"])
        #expect(FieldList.elements("").isEmpty)
    }
}
