import ConciergeCore
import NIOHTTP1
import Testing

@testable import ConciergeServer

/// ``HopByHopFields/endToEnd(_:dropping:)``: what a proxy forwards of a header block (RFC 9110 §7.6.1).
@Suite("End-to-end headers")
struct EndToEndHeadersTests {
    @Test("hop-by-hop fields are dropped in any case; the others keep their order, spelling and repeats")
    func hopByHop() {
        let headers: HTTPHeaders = [
            "Content-Type": "application/json", "CONNECTION": "keep-alive", "Keep-Alive": "timeout=5", "te": "trailers",
            "Transfer-Encoding": "chunked", "Upgrade": "h2c", "Proxy-Authorization": "Basic x", "X-Trace": "1", "x-trace": "2",
        ]
        let out = HopByHopFields.endToEnd(headers)
        #expect(out.map { "\($0.name): \($0.value)" } == ["Content-Type: application/json", "X-Trace: 1", "x-trace: 2"])
    }

    @Test("fields named by Connection are dropped, whatever their case and the list's spacing")
    func namedByConnection() {
        let headers: HTTPHeaders = ["Connection": "X-Secret ,  x-other", "x-secret": "a", "X-OTHER": "b", "X-Kept": "c"]
        #expect(HopByHopFields.endToEnd(headers).map(\.name) == ["X-Kept"])
    }

    @Test("extra names (lowercase) are dropped ignoring case; a longer or shorter name is kept")
    func extra() {
        let headers: HTTPHeaders = ["Server": "nginx", "Content-Length": "3", "Servers": "x", "Serve": "y", "Date": "now"]
        let out = HopByHopFields.endToEnd(headers, dropping: ["content-length", "server"])
        #expect(out.map(\.name) == ["Servers", "Serve", "Date"])
    }
}
