@testable import ConciergeCore
import NIOHTTP1
import Testing

@Suite("Stored header lists read without the JSON parser")
struct JSONPairListTests {
    /// The full parser's reading of a pair list: what the reader must match whenever it answers.
    static func parsed(_ bytes: [UInt8]) -> [(String, String)]? {
        guard case .array(let items)? = JSONValue.parse(bytes) else { return nil }
        var pairs: [(String, String)] = []
        for item in items {
            guard case .array(let parts) = item, parts.count == 2, let name = parts[0].stringValue,
                  let value = parts[1].stringValue else { return nil }
            pairs.append((name, value))
        }
        return pairs
    }

    static func same(_ a: [(String, String)]?, _ b: [(String, String)]?) -> Bool {
        guard let a, let b else { return a == nil && b == nil }
        return a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
    }

    @Test("what the writer writes reads back pair for pair, escapes and non-ASCII text included")
    func roundTrip() {
        let texts = ["", "a", "application/json", "max-age=60", "\"quoted\"", "back\\slash", "tab\there", "line\r\nbreak",
                     "\u{01}\u{1F}\u{7F}", "é", "中文", "😀 emoji", "\\u0041", "/slash/", "end\\"]
        var random = SystemRandomNumberGenerator()
        for round in 0..<400 {
            var headers = HTTPHeaders()
            for _ in 0..<(round % 6) {
                let name = texts.randomElement(using: &random)! + String(round)
                let value = (0..<Int.random(in: 0...3, using: &random)).map { _ in texts.randomElement(using: &random)! }.joined()
                headers.add(name: name.unicodeScalars.allSatisfy(\.isASCII) ? name : "x-\(round)", value: value)
            }
            let bytes = JSONValue.serializedPairBytes(headers)
            let read = JSONPairList.read(bytes)
            #expect(read != nil, "the writer's own text: \(String(decoding: bytes, as: UTF8.self))")
            #expect(Self.same(read, headers.map { ($0.name, $0.value) }))
            #expect(Self.same(read, Self.parsed(bytes)))
        }
    }

    @Test("texts outside the subset are left to the full parser; whatever is read, the full parser reads alike")
    func subset() {
        let cases: [(text: String, read: Bool)] = [
            (#"[]"#, true),
            (#"[["a","b"]]"#, true),
            (#"[["a","b"],["c","d"]]"#, true),
            (#"[["a\/b","\u0041\u007f\u0000"]]"#, true),
            (#"[["a","\b\f\n\r\t\"\\"]]"#, true),
            (#"[ ["a","b"] ]"#, false),          // whitespace: the full parser's
            (#"[["a","b"],]"#, false),
            (#"[["a","b","c"]]"#, false),
            (#"[["a",1]]"#, false),
            (#"[["a","\u00e9"]]"#, false),        // a non-ASCII escape: the full parser's
            (#"[["a","\ud83d\ude00"]]"#, false),
            (#"[["a","\x"]]"#, false),
            (#"[["a","\u12"]]"#, false),
            (#"[["a","b"]]x"#, false),
            (#"[["a","b"]"#, false),
            (#"[["a","b]]"#, false),
            (#"{"a":"b"}"#, false),
            ("[[\"a\",\"\u{01}\"]]", false),         // a raw control byte: not JSON
            ("", false),
        ]
        for (text, read) in cases {
            let bytes = Array(text.utf8)
            let pairs = JSONPairList.read(bytes)
            #expect((pairs != nil) == read, "\(text)")
            if pairs != nil { #expect(Self.same(pairs, Self.parsed(bytes)), "\(text)") }
        }
        // Invalid UTF-8 inside a string, raw or after an escape: never read as text here.
        for bad: [UInt8] in [[0xFF], [0xC3], [0xE4, 0xB8], [0xED, 0xA0, 0x80]] {
            let plain = Array(#"[["a",""#.utf8) + bad + Array(#""]]"#.utf8)
            let escaped = Array(#"[["a","\n"#.utf8) + bad + Array(#""]]"#.utf8)
            #expect(JSONPairList.read(plain) == nil)
            #expect(JSONPairList.read(escaped) == nil)
        }
    }
}
