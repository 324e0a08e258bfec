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

    /// The definition, written plainly: every field whose name is hop-by-hop, extra, or listed
    /// by any `Connection` value is dropped.
    private func reference(_ headers: HTTPHeaders, dropping extra: [String]) -> [String] {
        let listed = headers.filter { $0.name.lowercased() == "connection" }.flatMap { FieldList.elements($0.value) }
        return headers.filter { field in
            let name = field.name.lowercased()
            return !HopByHopFields.contains(field.name) && !extra.contains(name) && !listed.contains(name)
        }.map { "\($0.name): \($0.value)" }
    }

    @Test("one pass agrees with the definition over Connection values (keep-alive, close, lists, spacing, case) and fields")
    func agreesWithDefinition() {
        let connections = [nil, "keep-alive", "Keep-Alive", "close", "CLOSE", " keep-alive", "keep-alive, x-a", "x-a,close", "te, Upgrade", ""]
        let fieldSets: [[(String, String)]] = [
            [], [("X-A", "1"), ("Close", "2"), ("Keep-Alive", "timeout=5")], [("x-a", "1"), ("Server", "s"), ("X-B", "2"), ("close", "3")],
        ]
        var checked = 0
        for first in connections {
            for second in connections {
                for fields in fieldSets {
                    var list = fields
                    if let first { list.insert(("Connection", first), at: 0) }
                    if let second { list.append(("connection", second)) }
                    let headers = HTTPHeaders(list)
                    for extra in [[], ["server"]] {
                        #expect(HopByHopFields.endToEnd(headers, dropping: extra).map { "\($0.name): \($0.value)" }
                            == reference(headers, dropping: extra), "\(list) \(extra)")
                        checked += 1
                    }
                }
            }
        }
        #expect(checked == 10 * 10 * 3 * 2)
    }
}
