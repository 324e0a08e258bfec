import NIOCore
import NIOHTTP1
import Testing

import ConciergeCore

/// ``WireText``: lines and fields written into reserved memory in one pass.
@Suite("Wire text")
struct WireTextTests {
    @Test("strings, static strings and decimal numbers land in order, after what the buffer held")
    func writesInOrder() {
        var buffer = ByteBuffer(string: "before|")
        WireText.append(to: &buffer, capacity: 96) { out in
            out.put("HTTP/1.1 ")
            out.put(200)
            out.put(" caf\u{e9} ")
            for n in [0, 7, 10, 1234567890, Int.max] {
                out.put(n)
                out.put(",")
            }
        }
        #expect(String(buffer: buffer) == "before|HTTP/1.1 200 caf\u{e9} 0,7,10,1234567890,\(Int.max),")
    }

    @Test("size(of:) covers every field with its separator and CRLF")
    func sizeOfFields() {
        let fields: HTTPHeaders = ["Content-Type": "application/json", "X-A": ""]
        #expect(WireText.size(of: fields) == "Content-Type: application/json\r\nX-A: \r\n".utf8.count)
        #expect(WireText.size(of: [:]) == 0)
    }
}
