import ConciergeCore
@testable import ConciergeServer
import NIOCore
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

/// ``ProxyPipeline/withStatus(_:_:_:)``: a reply leaves with exactly one `X-Cache` and one
/// `Cache-Status`, Concierge's, whatever the upstream sent.
@Suite("Cache status fields on a reply")
struct CacheStatusFieldsTests {
    @Test("added when the upstream sent neither; replaced, in any case, when it sent either or both, other fields kept in order")
    func replacedOrAdded() {
        let sent: [[(String, String)]] = [
            [], [("Content-Type", "application/json")], [("x-cache", "MISS from edge")], [("CACHE-STATUS", "edge; hit")],
            [("X-Cache", "a"), ("Vary", "Accept"), ("Cache-Status", "b"), ("x-CACHE", "c")], [("X-Cached", "1"), ("Cache-Statuses", "2")],
        ]
        for fields in sent {
            let answer = ProxyAnswer(ProxyReply(status: 200, headers: HTTPHeaders(fields), body: .buffer(ByteBuffer())), RequestReport())
            let headers = ProxyPipeline.withStatus(answer, .miss, "concierge; fwd=miss").reply.headers
            #expect(headers["X-Cache"] == ["MISS"], "\(fields)")
            #expect(headers["Cache-Status"] == ["concierge; fwd=miss"], "\(fields)")
            let others = fields.filter { !["x-cache", "cache-status"].contains($0.0.lowercased()) }
            #expect(headers.filter { !["x-cache", "cache-status"].contains($0.name.lowercased()) }.map { "\($0.name)=\($0.value)" }
                == others.map { "\($0.0)=\($0.1)" }, "\(fields)")
        }
    }
}
