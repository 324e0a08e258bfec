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

    @Test("white space is space and tab (RFC 9110 OWS); only ASCII letters are lowered")
    func byteRules() {
        #expect(FieldList.elements("\tclose \t,  Upgrade") == ["close", "upgrade"])
        #expect(FieldList.elements(Substring("x-a, X-B")) == ["x-a", "x-b"])
        // A token is ASCII: a no-break space is not trimmed, and the Kelvin sign is no `k`.
        #expect(FieldList.elements("\u{A0}close") == ["\u{A0}close"])
        #expect(FieldList.elements("\u{212A}eep-alive") != ["keep-alive"])
        #expect(FieldList.elements("ÉTÉ") == ["ÉtÉ"])
    }

    @Test("lists(_:in:) agrees with elements(_:): an element equal to the token, ASCII case ignored, white space trimmed")
    func lists() {
        let values = ["Keep-Alive, X-Foo", "x-foo", " \tX-FOO\t ", "a,,b", "a, ,b", "", ",", "x-fooo, x-fo", "close,X-Foo ,", "\u{212A}eep-alive"]
        let tokens = ["x-foo", "X-Foo", "keep-alive", "Keep-Alive", "a", "b", "", "x-fo", "close", "foo"]
        for value in values {
            for token in tokens where !token.isEmpty {
                let expected = FieldList.elements(value).contains(String(decoding: token.utf8.map(ASCIICase.lowered), as: UTF8.self))
                #expect(FieldList.lists(token, in: value) == expected, "\(token) in \(value)")
            }
        }
        #expect(FieldList.lists("X-Foo", in: "keep-alive, x-foo"))
        #expect(!FieldList.lists("x-fo", in: "x-foo"))
    }
}

@Suite("Token characters")
struct TokenCharacterTests {
    @Test("the tchar masks hold exactly RFC 9110's tchar among all 256 byte values")
    func masks() {
        let tchar = Set(Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~".utf8))
        for byte in UInt8.min...UInt8.max {
            #expect(HTTPFieldSyntax.isTokenCharacter(byte) == tchar.contains(byte), "byte \(byte)")
        }
        #expect(HTTPFieldSyntax.isToken("X-Custom_Header.1"))
        #expect(!HTTPFieldSyntax.isToken("Bad Name"))
        #expect(!HTTPFieldSyntax.isToken(""))
    }
}
