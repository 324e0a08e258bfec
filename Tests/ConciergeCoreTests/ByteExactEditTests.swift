@testable import ConciergeCore
import Testing

/// Concierge's additions to a query or a body are inserted into the client's text; every
/// other byte stays as written.
@Suite("Byte-exact edits")
struct ByteExactEditTests {
    @Test("an untouched query is forwarded exactly as received, empty pieces and lower-case escapes included")
    func untouchedQuery() {
        let request = ProxyRequest(method: "GET", target: "/s?q=%d6%d0&&x=a+b&flag&=v")
        #expect(request.target == "/s?q=%d6%d0&&x=a+b&flag&=v")
    }

    @Test("an added param follows the client's pairs, each in its written form")
    func addedParamKeepsWrittenPairs() {
        var request = ProxyRequest(method: "GET", target: "/s?q=%D6%D0%CE%C4&x=%ff&sp=a+b&t=a:b")
        CommonParamsStep(common: ConciergeConfig.Common(headers: [:], params: [("platform", "linux os")])).apply(to: &request)
        #expect(request.target == "/s?q=%D6%D0%CE%C4&x=%ff&sp=a+b&t=a:b&platform=linux%20os")
    }

    @Test("a replaced token changes only its own pair")
    func replacedTokenChangesOnlyItsPair() {
        var request = ProxyRequest(method: "GET", target: "/s?x=%ff&accessToken=client&y=%2f")
        TokenInjector(points: [.query(name: "accessToken")]).inject("tok", into: &request)
        #expect(request.target == "/s?x=%ff&y=%2f&accessToken=tok")
    }

    @Test("JSON members are found with their literals: numbers as written, strings decoded, duplicates kept")
    func jsonMembers() throws {
        let text = #"{"n":12345678901234567891,"d":123456789012345678.12,"s":"\u00e9","n":1,"o":{"k":[1.0]}}"#
        let object = try #require(JSONObjectText(Array(text.utf8)))
        #expect(object.members.map(\.name) == ["n", "d", "s", "n", "o"])
        #expect(object.params == [Param("n", "12345678901234567891"), Param("d", "123456789012345678.12"), Param("s", "é"),
                                  Param("n", "1"), Param("o", #"{"k":[1.0]}"#)])
        #expect(object.value(of: "s") == .string("é"))
    }

    @Test("an added member goes after the last one; a replaced one changes every duplicate's value only")
    func jsonEdits() throws {
        var object = try #require(JSONObjectText(Array(#"{ "a" : 1.50 , "t":"x", "t" : "y" }"#.utf8)))
        object.set("p", .string("linux"), onlyIfAbsent: true)
        #expect(String(decoding: object.bytes, as: UTF8.self) == #"{ "a" : 1.50 , "t":"x", "t" : "y","p":"linux" }"#)
        object.set("a", .string("kept"), onlyIfAbsent: true)
        object.set("t", .string("tok"))
        #expect(String(decoding: object.bytes, as: UTF8.self) == #"{ "a" : 1.50 , "t":"tok", "t" : "tok","p":"linux" }"#)
        var empty = try #require(JSONObjectText(Array("{ }".utf8)))
        empty.set("p", .int(1))
        #expect(String(decoding: empty.bytes, as: UTF8.self) == #"{ "p":1}"#)
    }

    @Test("texts that are not one JSON object are not read as one: a BOM, an array, trailing bytes, a cut text")
    func notAnObject() {
        for text in ["\u{FEFF}{}", "[1]", "{} x", #"{"a":1"#, #"{"a":01}"#, "", "{\"a\":\"\u{01}\"}"] {
            #expect(JSONObjectText(Array(text.utf8)) == nil, "\(text)")
            if case .json = RequestBody.parse(Array(text.utf8), contentType: "application/json") {
                Issue.record("\(text) parsed as an object")
            }
        }
    }

    @Test("a form body gains its added pair at the end, bytes as sent; a form that is not UTF-8 is opaque")
    func formEdits() {
        var body = RequestBody.parse(Array("q=%D6%D0&&b=a+b".utf8), contentType: "application/x-www-form-urlencoded")
        body.set("platform", .string("linux"), onlyIfAbsent: true)
        #expect(String(decoding: body.bytes, as: UTF8.self) == "q=%D6%D0&&b=a+b&platform=linux")
        let gbk: [UInt8] = Array("q=".utf8) + [0xD6, 0xD0]
        guard case .opaque(let bytes) = RequestBody.parse(gbk, contentType: "application/x-www-form-urlencoded") else {
            Issue.record("a non-UTF-8 form should stay opaque")
            return
        }
        #expect(bytes == gbk)
    }
}
