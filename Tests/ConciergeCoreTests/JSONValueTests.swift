@testable import ConciergeCore
import Foundation
import NIOHTTP1
import Testing

@Suite("JSONValue")
struct JSONValueTests {
    // MARK: Parsing

    @Test("parse reads every JSON kind")
    func parseKinds() {
        #expect(JSONValue.parse("null") == .null)
        #expect(JSONValue.parse("true") == .bool(true))
        #expect(JSONValue.parse("false") == .bool(false))
        #expect(JSONValue.parse("42") == .int(42))
        #expect(JSONValue.parse("-7") == .int(-7))
        #expect(JSONValue.parse("1.5") == .double(1.5))
        #expect(JSONValue.parse(#""hi""#) == .string("hi"))
        #expect(JSONValue.parse("[1,\"a\",null]") == .array([.int(1), .string("a"), .null]))
        #expect(JSONValue.parse(#"{"a":{"b":[true]}}"#) == .object(["a": .object(["b": .array([.bool(true)])])]))
    }

    @Test("0 and 1 are numbers, not booleans")
    func numbersAreNotBools() {
        #expect(JSONValue.parse("1") == .int(1))
        #expect(JSONValue.parse("0") == .int(0))
        #expect(JSONValue.parse(#"{"code":1}"#)?[path: "code"] == .int(1))
    }

    @Test("large integers keep every digit")
    func largeIntegers() {
        #expect(JSONValue.parse("9007199254740993") == .int(9_007_199_254_740_993))
        #expect(JSONValue.parse("-9223372036854775808") == .int(Int64.min))
    }

    @Test("parse returns nil for empty or malformed input")
    func parseInvalid() {
        #expect(JSONValue.parse("") == nil)
        #expect(JSONValue.parse([UInt8]()) == nil)
        #expect(JSONValue.parse("{") == nil)
        #expect(JSONValue.parse("<html>") == nil)
        #expect(JSONValue.parse("{'a':1}") == nil)
    }

    @Test("parse decodes escapes and UTF-8 in strings")
    func parseEscapes() {
        #expect(JSONValue.parse(#""a\"b\\c\nd\u00e9""#) == .string("a\"b\\c\nd\u{e9}"))
        #expect(JSONValue.parse(Array(#""Grüße""#.utf8)) == .string("Grüße"))
    }

    // MARK: Path lookup

    private let doc = JSONValue.parse("""
        {"code":200,"msg":"ok","data":{"result":{"id":7,"user":{"name":"Ada"}},"list":[{"id":1},{"id":2,"tags":["x","y"]}],
         "0":"zero-key","empty":{}}}
        """)!

    @Test("a dotted path walks objects")
    func pathObjects() {
        #expect(doc[path: "code"] == .int(200))
        #expect(doc[path: "data.result.id"] == .int(7))
        #expect(doc[path: "data.result.user.name"] == .string("Ada"))
        #expect(doc[path: "data.empty"] == .object([:]))
    }

    @Test("array elements are reached by index")
    func pathArrayIndex() {
        #expect(doc[path: "data.list.0.id"] == .int(1))
        #expect(doc[path: "data.list.1.id"] == .int(2))
        #expect(doc[path: "data.list.1.tags.1"] == .string("y"))
    }

    @Test("an out-of-range or non-numeric index is nil")
    func pathBadIndex() {
        #expect(doc[path: "data.list.2"] == nil)
        #expect(doc[path: "data.list.-1"] == nil)
        #expect(doc[path: "data.list.first"] == nil)
    }

    @Test("a numeric component on an object is a key")
    func numericKeyOnObject() {
        #expect(doc[path: "data.0"] == .string("zero-key"))
    }

    @Test("missing keys, paths through scalars and empty components are nil")
    func pathMissing() {
        #expect(doc[path: "data.nope"] == nil)
        #expect(doc[path: "code.value"] == nil)
        #expect(doc[path: "data..result"] == nil)
        #expect(doc[path: "data.result."] == nil)
    }

    @Test("the empty path is the whole value")
    func emptyPath() {
        #expect(doc[path: ""] == doc)
        #expect(JSONValue.int(3)[path: ""] == .int(3))
    }

    // MARK: Serialization

    @Test("objects serialize compactly with sorted keys, at every level")
    func serializationSortedKeys() {
        let value: JSONValue = ["b": 1, "a": ["d": true, "c": nil], "C": "x"]
        #expect(value.serialized == #"{"C":"x","a":{"c":null,"d":true},"b":1}"#)
    }

    @Test("the same object always serializes to the same bytes")
    func serializationDeterministic() {
        let a = JSONValue.parse(#"{"z":1,"y":2,"x":{"b":1,"a":2}}"#)!
        let b = JSONValue.parse(#"{"x":{"a":2,"b":1},"y":2,"z":1}"#)!
        #expect(a.serialized == b.serialized)
        #expect(a.serializedBytes == Array(a.serialized.utf8))
    }

    @Test("arrays keep their order")
    func serializationArrays() {
        #expect(JSONValue.array([3, 1, 2]).serialized == "[3,1,2]")
        #expect(JSONValue.array([]).serialized == "[]")
        #expect(JSONValue.object([:]).serialized == "{}")
    }

    @Test("strings escape quote, backslash and control characters; other UTF-8 is kept")
    func serializationEscaping() {
        #expect(JSONValue.string("a\"b").serialized == #""a\"b""#)
        #expect(JSONValue.string("a\\b").serialized == #""a\\b""#)
        #expect(JSONValue.string("l1\nl2\r\tx").serialized == #""l1\nl2\r\tx""#)
        #expect(JSONValue.string("\u{01}\u{1f}").serialized == #""\u0001\u001f""#)
        #expect(JSONValue.string("é日本😀").serialized == "\"é日本😀\"")
        #expect(JSONValue.string("a/b").serialized == #""a/b""#)
        #expect(JSONValue.object(["k\"ey": "v"]).serialized == #"{"k\"ey":"v"}"#)
    }

    @Test("numbers: integers as digits, integral doubles without a fraction, non-finite as null")
    func serializationNumbers() {
        #expect(JSONValue.int(-12).serialized == "-12")
        #expect(JSONValue.int(Int64.max).serialized == "9223372036854775807")
        #expect(JSONValue.double(1.5).serialized == "1.5")
        #expect(JSONValue.double(2.0).serialized == "2")
        #expect(JSONValue.double(-0.25).serialized == "-0.25")
        #expect(JSONValue.double(.nan).serialized == "null")
        #expect(JSONValue.double(.infinity).serialized == "null")
        #expect(JSONValue.parse(JSONValue.double(1e20).serialized) == .double(1e20))
    }

    @Test("serialize then parse round-trips")
    func roundTrip() {
        let value: JSONValue = ["s": "line\n\"q\"\\ \u{02} é", "n": -3, "d": .double(0.5), "b": false, "z": nil, "a": [1, ["k": "v"]]]
        #expect(JSONValue.parse(value.serialized) == value)
        #expect(JSONValue.parse(doc.serialized) == doc)
    }

    @Test("serialization is valid JSON for Foundation's parser")
    func foundationAccepts() throws {
        let value: JSONValue = ["text": "tab\there \u{07}", "list": [1, .double(2.5), true, nil]]
        let object = try JSONSerialization.jsonObject(with: Data(value.serializedBytes)) as? [String: Any]
        #expect(object?["text"] as? String == "tab\there \u{07}")
    }

    // MARK: Accessors

    @Test("intValue reads numbers and numeric strings")
    func intValue() {
        #expect(JSONValue.int(801).intValue == 801)
        #expect(JSONValue.double(801).intValue == 801)
        #expect(JSONValue.double(1.5).intValue == nil)
        #expect(JSONValue.string("802").intValue == 802)
        #expect(JSONValue.string("x").intValue == nil)
        #expect(JSONValue.bool(true).intValue == nil)
        #expect(JSONValue.null.intValue == nil)
    }

    @Test("stringValue only for strings; parameterText is JSON for the rest")
    func textAccessors() {
        #expect(JSONValue.string("a").stringValue == "a")
        #expect(JSONValue.int(1).stringValue == nil)
        #expect(JSONValue.string("a b").parameterText == "a b")
        #expect(JSONValue.int(5).parameterText == "5")
        #expect(JSONValue.bool(true).parameterText == "true")
        #expect(JSONValue.null.parameterText == "null")
        #expect(JSONValue.object(["b": 1, "a": 2]).parameterText == #"{"a":2,"b":1}"#)
    }

    @Test("typeName names the validation type")
    func typeNames() {
        #expect(JSONValue.null.typeName == "null")
        #expect(JSONValue.bool(true).typeName == "bool")
        #expect(JSONValue.int(1).typeName == "number")
        #expect(JSONValue.double(1.5).typeName == "number")
        #expect(JSONValue.string("").typeName == "string")
        #expect(JSONValue.array([]).typeName == "array")
        #expect(JSONValue.object([:]).typeName == "object")
    }

    @Test("Codable encodes to equivalent JSON")
    func codable() throws {
        let value: JSONValue = ["a": [1, "x", nil], "b": true]
        let data = try JSONEncoder().encode(value)
        #expect(JSONValue.parse(Array(data)) == value)
        #expect(try JSONDecoder().decode(JSONValue.self, from: data) == value)
    }

    @Test("serializedPairs writes what an array of two-string arrays serializes to")
    func serializedPairs() {
        let pairs = HTTPHeaders([("Content-Type", "application/json"), ("X-Quote", #"a "b" \ c"#),
                                 ("X-Ctl", "tab\there\u{1}"), ("X-Utf8", "caf\u{e9}")])
        let tree = JSONValue.array(pairs.map { [.string($0.name), .string($0.value)] })
        #expect(JSONValue.serializedPairs(pairs) == tree.serialized)
        #expect(JSONValue.parse(JSONValue.serializedPairs(pairs)) == tree)
        #expect(JSONValue.serializedPairs(HTTPHeaders()) == "[]")
    }
}

/// Nesting: Foundation's decoder traps while reporting a text nested past its limit (512), so
/// such a text is refused before it gets there.
@Suite("JSON nesting limit")
struct JSONNestingTests {
    @Test("512 levels parse; 513 (the fuzzer's find), and far more, are not JSON rather than a crash")
    func nestingLimit() {
        #expect(JSONValue.parse(String(repeating: "[", count: 512) + String(repeating: "]", count: 512)) != nil)
        #expect(JSONValue.parse(String(repeating: "[", count: 513) + String(repeating: "]", count: 513)) == nil)
        #expect(JSONValue.parse(String(repeating: "[", count: 513)) == nil)
        #expect(JSONValue.parse(String(repeating: "{\"a\":", count: 100_000)) == nil)
        // Brackets inside strings do not count.
        let quoted = "[\"" + String(repeating: "[", count: 600) + "\\\"]\"]"
        #expect(JSONValue.parse(quoted) == .array([.string(String(repeating: "[", count: 600) + "\"]")]))
    }

    @Test("a batch body nested 513 deep is a 400, not a crash", arguments: [513, 5_000])
    func deepBatchBody(depth: Int) {
        let body = "{\"requests\": " + String(repeating: "[", count: depth) + String(repeating: "]", count: depth) + "}"
        #expect(throws: (any Error).self) { try SubRequestList.parse(Array(body.utf8), listKey: "requests") }
    }
}
