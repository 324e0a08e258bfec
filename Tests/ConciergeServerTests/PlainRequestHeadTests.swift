import ConciergeCore
import ConciergeFuzzing
import NIOHTTP1
import Testing

/// ``PlainRequestHead`` against NIO's request decoder: a read the plain parser accepts is read
/// by the decoder as exactly that head and its end, nothing else, after which the decoder reads
/// a next request as a new one (it is between requests, as the plain path leaves it).
@Suite("Plain request heads read as NIO's decoder reads them")
struct PlainRequestHeadTests {
    /// Heads and whether they are in the plain form.
    static let heads: [(text: String, plain: Bool)] = [
        ("GET / HTTP/1.1\r\nHost: a\r\n\r\n", true),
        ("GET /api/items?limit=1&run=cg&n=5 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n", true),
        ("HEAD /x HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n", true),
        ("GET /a:b@c!$&'()*+,;=-._~%41%zz HTTP/1.1\r\nHost: a\r\nX-Empty:\r\nX-Spaces:   a  b\r\nX-Tab:\tt\tu\r\n\r\n", true),
        ("GET /x HTTP/1.1\r\n\r\n", true),
        ("GET /x HTTP/1.1\r\nconnection: Keep-Alive\r\n\r\n", true),
        ("GET /x HTTP/1.1\r\nExpect: 100-continue\r\nHost: a\r\n\r\n", true),
        ("GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\nX-Weird-Token!#$%&'*+.^_`|~: v\r\n\r\n", true),
        ("GET //x//y? HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer abc.def\r\nCookie: a=1; b=2\r\n\r\n", true),
        ("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nab", false),
        ("POST /x HTTP/1.1\r\nHost: a\r\n\r\n", false),
        ("PUT /x HTTP/1.1\r\nHost: a\r\n\r\n", false),
        ("get /x HTTP/1.1\r\nHost: a\r\n\r\n", false),
        ("GET http://a/x HTTP/1.1\r\nHost: a\r\n\r\n", false),
        ("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", false),
        ("GET /x HTTP/1.0\r\nHost: a\r\n\r\n", false),
        ("GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", false),
        ("GET /x HTTP/2.0\r\nHost: a\r\n\r\n", false),
        ("GET /x  HTTP/1.1\r\nHost: a\r\n\r\n", false),
        ("GET /caf\u{E9} HTTP/1.1\r\nHost: a\r\n\r\n", false),
        ("GET /a#f HTTP/1.1\r\nHost: a\r\n\r\n", false),
        ("GET /a\"b HTTP/1.1\r\nHost: a\r\n\r\n", false),
        ("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", false),
        ("GET /x HTTP/1.1\nHost: a\n\n", false),
        ("GET /x HTTP/1.1\r\nHost: a\n\r\n", false),
        ("GET /x HTTP/1.1\r\nX-Fold: a\r\n b\r\nHost: a\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nBad Name: x\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nX-A : x\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nX-Obs: caf\u{E9}\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nX-Trailing: a \r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nX-Ctl: a\u{01}b\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nX-Cr: a\rb\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nConnection: close\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nConnection: keep-alive, upgrade\r\nUpgrade: websocket\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nUpgrade: websocket\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nProxy-Connection: keep-alive\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nConnection: keep-alive\r\nConnection: keep-alive\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nHost: a\r\n\r\nGET /y HTTP/1.1\r\nHost: a\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nHost: a\r\n\r\nX", false),
        ("GET /x HTTP/1.1\r\nHost: a\r\n", false),
        ("GET /x HTTP/1.1\r\nHost: a\r\n\r", false),
        ("\r\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\nX-Long: \(String(repeating: "a", count: PlainRequestHead.maxBytes))\r\n\r\n", false),
        ("GET /x HTTP/1.1\r\n:novalue\r\n\r\n", false),
        ("", false),
    ]

    @Test("every head of the grid is plain or not as expected, and a plain one is the decoder's head and end, nothing else")
    func grid() {
        for (text, plain) in Self.heads {
            let bytes = Array(text.utf8)
            let parsed = bytes.withUnsafeBytes { PlainRequestHead.parse($0) }
            #expect((parsed != nil) == plain, "\(text.debugDescription)")
            if let parsed { Self.expectDecoderAgrees(bytes, parsed) }
        }
    }

    @Test("mutations of plain heads (bytes replaced, inserted, removed): whatever the plain parser still accepts, the decoder reads the same way")
    func mutations() {
        var random = HitMemoPropertyTests.SeededGenerator(state: 0x5EED_CAFE)
        let seeds = Self.heads.filter(\.plain).map { Array($0.text.utf8) }
        let interesting: [UInt8] = [0x00, 0x09, 0x0A, 0x0D, 0x20, 0x22, 0x23, 0x25, 0x2C, 0x3A, 0x3B, 0x7F, 0x80, 0xFF,
                                    UInt8(ascii: "a"), UInt8(ascii: "A"), UInt8(ascii: "/"), UInt8(ascii: "?")]
        var accepted = 0
        for round in 0..<4000 {
            var bytes = seeds[round % seeds.count]
            for _ in 0..<(1 + Int(random.next() % 3)) {
                let at = Int(random.next() % UInt64(bytes.count))
                let byte = random.next() % 4 == 0 ? UInt8(truncatingIfNeeded: random.next()) : interesting[Int(random.next() % UInt64(interesting.count))]
                switch random.next() % 3 {
                case 0: bytes[at] = byte
                case 1: bytes.insert(byte, at: at)
                default: if bytes.count > 1 { bytes.remove(at: at) }
                }
            }
            guard let parsed = bytes.withUnsafeBytes({ PlainRequestHead.parse($0) }) else { continue }
            accepted += 1
            Self.expectDecoderAgrees(bytes, parsed)
        }
        #expect(accepted > 200, "the mutations must leave some heads plain to compare: \(accepted)")
    }

    /// NIO's decoder reads `bytes` as `plain` and its end, nothing else, and then reads a next
    /// request as a new one (the fuzz target's check).
    static func expectDecoderAgrees(_ bytes: [UInt8], _ plain: HTTPRequestHead, sourceLocation: SourceLocation = #_sourceLocation) {
        let mismatch = FuzzTargets.plainRequestMismatch(reading: bytes, as: plain)
        #expect(mismatch == nil, "\(mismatch ?? "")", sourceLocation: sourceLocation)
    }
}
