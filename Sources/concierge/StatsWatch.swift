import ConciergeCore
import Foundation

/// `concierge stats --watch`: polls `/stats` and shows every counter with its rate over the
/// last interval and the hit ratio, like `varnishstat`.
///
/// On a terminal the screen is redrawn in place (ANSI home + clear); otherwise each sample is
/// one plain `key=value` line, flushed at once so a pipe or a log sees it live. Ctrl-C (the
/// default SIGINT action) leaves; an unreachable daemon ends it with the client's exit code.
struct StatsWatch {
    let client: AdminClient
    let interval: Double

    /// Counts that only grow; `entries` and `bytes` are levels and get no rate.
    static let gauges: Set<String> = ["entries", "bytes"]
    /// The order a reader expects; keys the daemon adds later follow, sorted.
    static let preferredOrder = ["requests", "hits", "misses", "stale", "bypass", "refreshes", "replays", "logouts",
                                 "upstream_errors", "token_request_failures", "loop_guard_trips", "invalidations", "entries", "bytes"]

    struct Sample {
        var values: [String: Int]
        var at: ContinuousClock.Instant
    }

    func run() async throws {
        let onTerminal = isatty(STDOUT_FILENO) == 1
        var previous: Sample? = nil
        while true {
            let reply = try await client.send(.GET, "/stats")
            var values: [String: Int] = [:]
            if case .object(let members) = reply {
                for (key, value) in members { if let v = value.intValue { values[key] = v } }
            }
            let sample = Sample(values: values, at: .now)
            let text = onTerminal ? Self.screen(sample, previous, address: client.baseURL, interval: interval)
                                  : Self.line(sample, previous)
            FileHandle.standardOutput.write(Data(text.utf8))
            previous = sample
            try await Task.sleep(for: .milliseconds(Int(interval * 1000)))
        }
    }

    static func keys(_ values: [String: Int]) -> [String] {
        preferredOrder.filter { values[$0] != nil } + values.keys.filter { !preferredOrder.contains($0) }.sorted()
    }

    /// Per-second rate of `key` since `previous`, or nil on the first sample and for gauges.
    static func rate(_ key: String, _ sample: Sample, _ previous: Sample?) -> Double? {
        guard let previous, !gauges.contains(key), let now = sample.values[key], let then = previous.values[key] else { return nil }
        let seconds = Double((sample.at - previous.at).components.attoseconds) / 1e18 + Double((sample.at - previous.at).components.seconds)
        return seconds > 0 ? Double(now - then) / seconds : nil
    }

    /// (hits + stale) / (hits + stale + misses + bypass), over `values`; nil when nothing was looked up.
    static func hitRatio(_ values: [String: Int]) -> Double? {
        let hits = (values["hits"] ?? 0) + (values["stale"] ?? 0)
        let lookups = hits + (values["misses"] ?? 0) + (values["bypass"] ?? 0)
        return lookups == 0 ? nil : Double(hits) / Double(lookups)
    }

    /// The hit ratio of the last interval alone.
    static func intervalHitRatio(_ sample: Sample, _ previous: Sample?) -> Double? {
        guard let previous else { return nil }
        var delta: [String: Int] = [:]
        for key in ["hits", "stale", "misses", "bypass"] { delta[key] = (sample.values[key] ?? 0) - (previous.values[key] ?? 0) }
        return hitRatio(delta)
    }

    static func percent(_ ratio: Double?) -> String {
        ratio.map { String(format: "%.1f%%", $0 * 100) } ?? "-"
    }

    /// One plain line: `time=… hit_ratio=…% interval_hit_ratio=…% requests=N requests_per_s=R …`.
    static func line(_ sample: Sample, _ previous: Sample?) -> String {
        var parts = ["time=\(ISO8601DateFormatter().string(from: Date()))",
                     "hit_ratio=\(percent(hitRatio(sample.values)))",
                     "interval_hit_ratio=\(percent(intervalHitRatio(sample, previous)))"]
        for key in keys(sample.values) {
            parts.append("\(key)=\(sample.values[key]!)")
            if !gauges.contains(key) { parts.append("\(key)_per_s=\(rate(key, sample, previous).map { String(format: "%.1f", $0) } ?? "-")") }
        }
        return parts.joined(separator: " ") + "\n"
    }

    /// A full screen: cursor home, clear, a header and one row per counter.
    static func screen(_ sample: Sample, _ previous: Sample?, address: String, interval: Double) -> String {
        let pad = { (s: String, n: Int) in String(repeating: " ", count: max(0, n - s.count)) + s }
        var out = "\u{1B}[H\u{1B}[2J"
        out += "concierge stats  \(address)  every \(String(format: "%g", interval))s  \(ISO8601DateFormatter().string(from: Date()))  (Ctrl-C to leave)\n\n"
        out += "hit ratio  \(percent(hitRatio(sample.values))) overall, \(percent(intervalHitRatio(sample, previous))) in the last interval\n\n"
        out += "counter".padding(toLength: 18, withPad: " ", startingAt: 0) + pad("total", 14) + pad("per second", 14) + "\n"
        for key in keys(sample.values) {
            let rate = rate(key, sample, previous).map { String(format: "%.1f", $0) } ?? (gauges.contains(key) ? "" : "-")
            out += key.padding(toLength: 18, withPad: " ", startingAt: 0) + pad("\(sample.values[key]!)", 14) + pad(rate, 14) + "\n"
        }
        return out
    }
}
