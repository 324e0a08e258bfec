import ConciergeCore
@testable import ConciergeServer
import NIOHTTP1
import Testing

/// ``UpstreamExchange/noStore(_:)``: the byte pre-check before the grammar's parse decides
/// exactly what the parse alone decides.
@Suite("Storable replies: Cache-Control no-store and private")
struct StorableReplyTests {
    static let lines = [
        "max-age=60", "no-store", "NO-STORE", "Private", "private=\"set-cookie\"", "public, max-age=5",
        "x-no-store-please=1", "community=\"private, no-store\"", "no-cache=\"no-store\"", "max-age=60 no-store",
        " , ,no-store,, ", "no-store=", "privat", "no-stor", "s-maxage=1, PRIVATE", "nostore", "\"no-store\"",
        "ＭＡＸ-age=5, no-store", "max-age=\"no-store", "",
    ]

    @Test("over single lines, pairs of lines, and no line: the same answer as parsing every line")
    func agreesWithTheParse() {
        var cases: [[String]] = [[]]
        for a in Self.lines {
            cases.append([a])
            for b in Self.lines.prefix(8) { cases.append([a, b]) }
        }
        for values in cases {
            var headers = HTTPHeaders([("Content-Type", "application/json")])
            for value in values { headers.add(name: "Cache-Control", value: value) }
            let parsed = CacheControl(headers["cache-control"])
            #expect(UpstreamExchange.noStore(headers) == (parsed.noStore || parsed.isPrivate), "\(values)")
        }
        var other = HTTPHeaders([("X-Cache-Control", "no-store")])
        other.add(name: "Cache-Controls", value: "private")
        #expect(!UpstreamExchange.noStore(other), "only the Cache-Control field counts")
    }
}
