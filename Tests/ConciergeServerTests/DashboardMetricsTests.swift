import ConciergeTestSupport
import Foundation
import Testing

/// The shipped Grafana dashboard and Prometheus alerting rules name only metrics that a running
/// daemon exposes: a node of a fleet (so the fleet's metrics are registered) is scraped after a
/// miss, a hit and an invalidation, and every `concierge_*` name in the two files is looked up in
/// its `/metrics` (a histogram's `_bucket`, `_sum` and `_count` by the histogram's name).
extension FleetTests {
    @Test("the Grafana dashboard and the alerting rules reference only metrics that /metrics exposes")
    func dashboardAndAlertsReferenceExposedMetrics() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let files = ["packaging/grafana/concierge.json", "packaging/prometheus/concierge-alerts.yaml"]
        var referenced: [String: Set<String>] = [:]
        for file in files {
            let text = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
            referenced[file] = Self.metricNames(in: text)
            #expect(referenced[file]?.count ?? 0 >= 10, "\(file): \(referenced[file] ?? [])")
        }
        try await Self.withFleet(nodes: 1) { rigs, _, _ in
            let rig = rigs[0]
            #expect(try await rig.get("/cgi-bin/items?dashboard=1").status == 200)
            #expect(try await rig.get("/cgi-bin/items?dashboard=1").status == 200)
            // 202 when PostgreSQL answered slower than `fleet.timeout` (a loaded machine): applied
            // here, the fleet's log pending; either way the invalidation's metrics are registered.
            let invalidation = try await rig.admin(.POST, "/cache/invalidate", json: ["pattern": .string("dashboard")])
            #expect([200, 202].contains(invalidation.status), "\(invalidation.status) \(invalidation.text)")
            let metrics = try await rig.admin(.GET, "/metrics").text
            let exposed = Self.exposedNames(in: metrics)
            for (file, names) in referenced {
                let missing = names.filter { !exposed.contains($0) }
                #expect(missing.isEmpty, "\(file) names metrics that /metrics does not expose: \(missing.sorted())")
            }
        }
    }

    /// Every `concierge_…` name in a file, a histogram's series suffix removed.
    static func metricNames(in text: String) -> Set<String> {
        var names: Set<String> = []
        var current = ""
        func flush() {
            defer { current = "" }
            guard current.hasPrefix("concierge_") else { return }
            var name = current
            for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
                name.removeLast(suffix.count)
            }
            names.insert(name)
        }
        for ch in text.unicodeScalars {
            if ch.properties.isLowercase || ch == "_" || ("0"..."9").contains(ch) {
                current.unicodeScalars.append(ch)
            } else {
                flush()
            }
        }
        flush()
        return names
    }

    /// The metric names of a Prometheus text exposition (its `# TYPE` lines).
    static func exposedNames(in text: String) -> Set<String> {
        Set(text.split(separator: "\n").compactMap { line -> String? in
            let words = line.split(separator: " ")
            guard words.count >= 4, words[0] == "#", words[1] == "TYPE" else { return nil }
            return String(words[2])
        })
    }
}
