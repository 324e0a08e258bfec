import ConciergeCore
import ConciergeStorage
import NIOHTTP1

/// A reply made from a stored entry (a hit, or a stale entry served): the stored headers,
/// `X-Cache`, `Cache-Status` with the freshness left, and an `Age` that adds the upstream's.
enum CachedReply {
    static func make(_ entry: CacheEntry, _ p: PreparedRequest, status: CacheStatus, now: Double, detail: String? = nil) -> ProxyAnswer {
        var headers = HTTPHeaders()
        var upstreamAge = 0
        for (name, value) in entry.headers {
            if name.lowercased() == "age" {
                upstreamAge = Int(value.trimmingCharacters(in: .whitespaces)) ?? 0
                continue
            }
            headers.add(name: name, value: value)
        }
        headers.add(name: "X-Cache", value: status.rawValue)
        headers.add(name: "Cache-Status", value: "concierge; hit; ttl=\(entry.remainingTTL(at: now))\(detail.map { "; detail=\($0)" } ?? "")")
        headers.add(name: "Age", value: String(max(0, upstreamAge) + entry.age(at: now)))
        var reply = ProxyReply(status: entry.status, headers: headers, body: .buffer(entry.body))
        var report = RequestReport(endpoint: p.endpoint.name, cache: status, succeeded: true)
        if let unwrap = p.endpoint.unwrap, !LocalReplies.unwrap(&reply, path: unwrap, config: p.config) {
            report.succeeded = false
        }
        return ProxyAnswer(reply, report)
    }
}
