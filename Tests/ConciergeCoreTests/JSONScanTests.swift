@testable import ConciergeCore
import Testing

@Suite("JSON scan (code-only envelope read)")
struct JSONScanTests {
    func scan(_ text: String, _ path: String = "code") -> JSONScan.Result {
        JSONScan.value(at: path, in: Array(text.utf8))
    }

    @Test("finds integer, string and nested codes as the full parser reads them")
    func finds() {
        #expect(scan(#"{"code":200,"msg":"ok","data":{"list":[1,2]}}"#) == .found(200))
        #expect(scan(#"{"errcode":"InvalidAuthentication"}"#, "errcode") == .found("InvalidAuthentication"))
        #expect(scan(#"{"meta":{"code":-7}}"#, "meta.code") == .found(-7))
        #expect(scan(#"[{"a":1},{"code":2.5}]"#, "1.code") == .found(.double(2.5)))
        #expect(scan(#"{"c\u006fde":801}"#) == .found(801))
        #expect(scan(#"{"code":1,"code":2}"#) == JSONScan.Result.found(JSONValue.parse(#"{"code":1,"code":2}"#)![path: "code"]!))
    }

    @Test("strings are read a word at a time, four words a loop: a quote, backslash, control or non-ASCII byte at any offset of a run of up to 80 plain bytes is found as byte by byte")
    func stringsByWords() {
        let specials: [(text: String, valid: Bool)] = [("\\\"", true), ("\\n", true), ("\\u00e9", true), ("é", true), ("中", true),
                                                        ("\u{01}", false), ("\u{1F}", false), ("\\x", false), ("~", true), (" ", true)]
        // Up to 80: past two four-word loops, with every tail of fewer than 32 and fewer than 8
        // bytes, and every landing offset inside a word.
        for length in 0..<80 {
            for offset in 0...length {
                for special in specials {
                    let plain = String(repeating: "a", count: length)
                    let inner = String(plain.prefix(offset)) + special.text + String(plain.dropFirst(offset))
                    let text = "{\"note\":\"" + inner + "\",\"code\":7}"
                    let expected: JSONScan.Result = special.valid ? .found(7) : .notJSON
                    #expect(scan(text) == expected, "\(text)")
                    #expect((JSONValue.parse(Array(text.utf8)) != nil) == special.valid, "the full parser agrees on \(text)")
                }
            }
        }
        // A string ending exactly at a word's end, and one cut inside a word.
        #expect(scan(#"{"code":"abcdefgh"}"#) == .found("abcdefgh"))
        #expect(scan(#"{"code":"abcdefghijklmno"#) == .notJSON)
    }

    @Test("valid JSON without the path is missing")
    func missing() {
        #expect(scan(#"{"msg":"ok"}"#) == .missing)
        #expect(scan(#"{"data":{"code":1}}"#) == .missing)
        #expect(scan("[]", "0") == .missing)
    }

    @Test("a cut, broken or non-JSON body is never taken for a success")
    func refuses() {
        for text in [#"{"code":200,"data":[1,2"#, #"{"code":200,}"#, #"{"code":200} x"#, "", "<html>", #"{"code":200,"x":1e400}"#,
                     #"{"code":200,"s":"\ud800"}"#, "{\"code\":200,\"s\":\"a\u{01}b\"}", "200", #"{"code":01}"#] {
            #expect(scan(text) == .notJSON, "\(text)")
        }
        #expect(JSONScan.value(at: "code", in: [0x7B, 0x22, 0x63, 0xFF, 0x22, 0x3A, 0x31, 0x7D]) == .notJSON)
    }

    @Test("deep nesting is left to the full parser")
    func depth() {
        let deep = String(repeating: "[", count: 300) + String(repeating: "]", count: 300)
        #expect(scan(deep, "0") == .notJSON)
    }

    @Test("the envelope judged without a tree: the outcome and code of the whole reply; non-JSON is notJSON")
    func envelopeWithoutTree() {
        var envelope = ConciergeConfig.Envelope(
            codePath: "meta.code", messagePath: "msg", successCodes: [200], refreshCodes: [801], logoutCodes: [802],
            unavailable: CannedReply(status: 502, body: ["code": -1]), invalid: CannedReply(status: 502, body: ["code": -2]),
            warningCodes: [:])
        envelope.refreshTextCodes = ["InvalidAuthentication"]
        let reader = EnvelopeReader(envelope: envelope)
        let text = #"{"meta":{"code":"InvalidAuthentication","x":[1,2]},"data":{}}"#
        #expect(reader.judge(Array(text.utf8)) == (.refresh(code: .text("InvalidAuthentication")), .text("InvalidAuthentication")))
        #expect(reader.judge(Array(#"{"meta":{"code":200}}"#.utf8), status: 200) == (.success(code: 200), 200))
        #expect(reader.judge(Array(#"{"meta":{"code":200}}"#.utf8), status: 404) == (.failure(code: 200), 200))
        #expect(reader.judge(Array(#"{"msg":"x"}"#.utf8)) == (.failure(code: nil), nil))
        #expect(reader.judge(Array("<html>".utf8)) == (.notJSON, nil))
        // Refused by the scan (too deep), accepted by the full parser: the full parser decides.
        let deep = #"{"meta":{"code":801},"d":"# + String(repeating: "[", count: 300) + String(repeating: "]", count: 300) + "}"
        #expect(JSONScan.value(at: "meta.code", in: Array(deep.utf8)) == .notJSON)
        #expect(reader.judge(Array(deep.utf8)) == (.refresh(code: 801), 801))
        #expect(reader.judge(Array(deep.utf8)) == (reader.classify(JSONValue.parse(deep)), reader.code(in: JSONValue.parse(deep))))
    }
}

@Suite("JSON scan: strings read a word at a time")
struct JSONScanBlockTests {
    @Test("the lowest flagged byte of a word is its first special byte, whatever the plain bytes before it and any bytes after it")
    func landing() {
        let specials = (UInt8.min...UInt8.max).filter { $0 < 0x20 || $0 >= 0x80 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }
        let plains: [UInt8] = [0x20, 0x21, 0x23, 0x5B, 0x5D, 0x61, 0x7E, 0x7F]
        // After the first special byte: bytes whose tests borrow (0x00, 0x01, the neighbours of
        // the quote and the backslash) as well as plain and special ones.
        let after: [UInt8] = [0x00, 0x01, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x5B, 0x5C, 0x5D, 0x7F, 0x80, 0xFF]
        var wrong = 0
        for position in 0..<8 {
            for special in specials {
                for plain in plains {
                    for rest in after {
                        var bytes = [UInt8](repeating: plain, count: 8)
                        bytes[position] = special
                        for i in (position + 1)..<8 { bytes[i] = rest }
                        let word = bytes.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
                        if JSONScan.Scanner.specialBytes(word).trailingZeroBitCount / 8 != position { wrong += 1 }
                    }
                }
            }
        }
        #expect(wrong == 0)
    }

    @Test("a word is special exactly when one of its bytes is a control, non-ASCII, a quote or a backslash, at any position")
    func wordTest() {
        let plain = UInt64(0x6161_6161_6161_6161)
        #expect(!JSONScan.Scanner.hasSpecialByte(plain))
        for byte in UInt8.min...UInt8.max {
            let special = byte < 0x20 || byte >= 0x80 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
            for position in 0..<8 {
                let word = plain & ~(UInt64(0xFF) << (8 * position)) | UInt64(byte) << (8 * position)
                #expect(JSONScan.Scanner.hasSpecialByte(word) == special, "byte \(byte) at \(position)")
            }
        }
    }

    @Test("strings of 0–48 bytes with an escape, a UTF-8 character, a control or a cut at every position scan as the parser reads them")
    func everyPosition() {
        let insertions = ["\\n", "\\u00e9", "é", "\\\"", "\u{01}", "\\x"]
        for length in 0...48 {
            for position in 0...length {
                for insertion in insertions {
                    var text = String(repeating: "p", count: length)
                    text.insert(contentsOf: insertion, at: text.index(text.startIndex, offsetBy: position))
                    let json = "{\"code\":\"\(text)\",\"n\":1}"
                    let expected = JSONValue.parse(Array(json.utf8))?[path: "code"]
                    switch JSONScan.value(at: "code", in: Array(json.utf8)) {
                    case .found(let value): #expect(value == expected, "\(json)")
                    case .missing: Issue.record("missing in \(json)")
                    case .notJSON: #expect(expected == nil, "\(json)")
                    }
                }
            }
        }
    }
}
