import ConciergeCore
import NIOCore
import NIOHTTP1
import Testing

/// ``WireHead``: the one writer of HTTP/1.1 heads, sized by the code that writes it.
@Suite("Wire head")
struct WireHeadTests {
    @Test("a reply head: status line, fields minus the omitted ones, Content-Length, Connection: close, the empty line")
    func replyHead() {
        let head = WireHead(.status(.http1_1, 404), fields: ["Content-Type": "application/json", "content-length": "99", "Connection": "keep-alive"],
                            omitting: WireHead.lengthAndConnectionFields, contentLength: 2, closes: true)
        #expect(String(buffer: head.bytes())
            == "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n")
    }

    @Test("a request head: request line, a leading Host, fields, framing")
    func requestHead() {
        let head = WireHead(.request(method: "M-SEARCH", target: "/a?b=%FF"), leading: ("Host", "api.example:8443"),
                            fields: ["Accept": "*/*", "Transfer-Encoding": "chunked"], omitting: ["transfer-encoding", "content-length"],
                            contentLength: 0)
        #expect(String(buffer: head.bytes()) == "M-SEARCH /a?b=%FF HTTP/1.1\r\nHost: api.example:8443\r\nAccept: */*\r\nContent-Length: 0\r\n\r\n")
    }

    @Test("an open head ends after its extra lines, for the caller to append more fields")
    func openHead() {
        let head = WireHead(.status(.http1_0, 200), fields: ["Age": "5", "X-A": "1"], omitting: ["age"], extra: "X-Cache: HIT\r\n",
                            contentLength: 10, ends: false)
        #expect(String(buffer: head.bytes()) == "HTTP/1.0 200 OK\r\nX-A: 1\r\nX-Cache: HIT\r\nContent-Length: 10\r\n")
    }

    @Test("the counted size is exactly what is written, and the reserved room for a body follows it")
    func sizedExactly() {
        for fields: HTTPHeaders in [[:], ["A": ""], ["Content-Type": "text/plain; charset=utf-8", "X-Long": String(repeating: "v", count: 5000)]] {
            for length in [nil, 0, 9, 1_234_567_890] {
                let head = WireHead(.status(.http1_1, 200), fields: fields, contentLength: length)
                var count = WireByteCount()
                head.emit(into: &count)
                var buffer = head.bytes(followedBy: 100)
                #expect(buffer.readableBytes == count.count)
                #expect(buffer.writableBytes >= 100)
                buffer.moveReaderIndex(forwardBy: buffer.readableBytes)
            }
        }
    }

    @Test("the reserved size bounds what is written, for every start line, leading field, omission, extra line and framing")
    func reservedBoundsWritten() {
        let starts: [WireHead.StartLine] = [.status(.http1_1, 200), .status(.http1_0, 599), .status(HTTPVersion(major: 9, minor: 99), 100),
                                            .request(method: "GET", target: "/"), .request(method: "M-SEARCH", target: "/a?" + String(repeating: "q", count: 900))]
        let fieldSets: [HTTPHeaders] = [[:], ["A": ""], ["Content-Length": "1", "Connection": "close", "X": String(repeating: "v", count: 3000)]]
        var checked = 0
        for start in starts {
            for fields in fieldSets {
                for omitting in [[], WireHead.lengthAndConnectionFields] {
                    for leading: (name: StaticString, value: String)? in [nil, ("Host", "h:1")] {
                        for (length, closes, ends) in [(nil, false, true), (Int.max, true, false), (0, true, true)] {
                            let head = WireHead(start, leading: leading, fields: fields, omitting: omitting, extra: "X-Cache: HIT\r\n",
                                                contentLength: length, closes: closes, ends: ends)
                            var count = WireByteCount()
                            head.emit(into: &count)
                            #expect(head.maxByteCount >= count.count)
                            #expect(head.bytes().readableBytes == count.count)
                            checked += 1
                        }
                    }
                }
            }
        }
        #expect(checked == 5 * 3 * 2 * 2 * 3)
    }
}
