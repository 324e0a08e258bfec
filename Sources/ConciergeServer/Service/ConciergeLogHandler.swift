import ConciergeCore
import Foundation
import Logging
import Synchronization

/// Where log lines go: standard output, or memory (tests).
public final class LogSink: Sendable {
    private let capturing: Bool
    private let captured = Mutex<[String]>([])

    /// Lines go to standard output.
    public static let standardOutput = LogSink(capturing: false)

    public init(capturing: Bool) {
        self.capturing = capturing
    }

    private static let stdoutLock = Mutex(())

    func write(_ line: String) {
        if capturing {
            captured.withLock { $0.append(line) }
            return
        }
        Self.stdoutLock.withLock { _ in
            var bytes = Array(line.utf8)
            bytes.append(0x0A)
            var offset = 0
            while offset < bytes.count {
                let n = bytes[offset...].withUnsafeBytes { Foundation.write(STDOUT_FILENO, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                offset += n
            }
        }
    }

    /// Lines captured so far (capturing sinks only).
    public var lines: [String] { captured.withLock { $0 } }
}

/// The literal secrets no log line may contain: the tokens in use and the values of
/// `${VAR}` expansions. Sources are added once (by the daemon); their secrets are indexed
/// (``SecretIndex``). A source with a ``SecretFeed`` (the sessions', which hold thousands of
/// tokens with `per_client`) is read whole once; after that the secrets its feed announces are
/// added to the index as they come, and it is read whole again only when the feed dropped some
/// before they were read, or the index has grown to twice what the last whole reading held
/// (so replaced tokens leave it). The other sources (a few values) are read at every line.
public final class SecretScrubber: Sendable {
    private struct Source: Sendable {
        let feed: SecretFeed?
        let literals: @Sendable () -> [String]
    }

    private struct Built: Sendable {
        /// How far each feed was read, in the order of the sources that have one.
        var feedEnds: [Int]
        var unversioned: [String]
        var index: SecretIndex
        /// Secrets in the index when it was last built from every source.
        var wholeCount: Int
    }

    private let sources = Mutex<[Source]>([])
    private let built = Mutex<Built?>(nil)

    public init() {}

    /// `feed`: announces every secret that `literals` would give from then on.
    public func addSource(feed: SecretFeed? = nil, _ literals: @escaping @Sendable () -> [String]) {
        sources.withLock { $0.append(Source(feed: feed, literals: literals)) }
        built.withLock { $0 = nil }
    }

    func scrub(_ text: String) -> String {
        index().scrub(text)
    }

    private func index() -> SecretIndex {
        let sources = sources.withLock { $0 }
        let feeds = sources.compactMap(\.feed)
        let ends = feeds.map(\.end)
        let unversioned = sources.filter { $0.feed == nil }.flatMap { $0.literals() }
        let previous = built.withLock { $0 }
        if let previous, previous.unversioned == unversioned {
            if previous.feedEnds == ends { return previous.index }
            if let next = Self.grown(previous, feeds) {
                built.withLock { $0 = next }
                return next.index
            }
        }
        // Whole: the feeds' ends are read first, so a secret appended meanwhile is read again next time.
        let all = sources.filter { $0.feed != nil }.flatMap { $0.literals() } + unversioned
        let index = SecretIndex(all)
        let next = Built(feedEnds: ends, unversioned: unversioned, index: index, wholeCount: index.count)
        built.withLock { $0 = next }
        return index
    }

    /// `built` with what the feeds announced since; `nil` when it must be built whole.
    private static func grown(_ built: Built, _ feeds: [SecretFeed]) -> Built? {
        var next = built
        var fresh: [String] = []
        for (n, feed) in feeds.enumerated() {
            guard let (secrets, end) = feed.since(built.feedEnds[n]) else { return nil }
            fresh += secrets
            next.feedEnds[n] = end
        }
        guard built.index.count + fresh.count <= max(2 * built.wholeCount, 4096) else { return nil }
        next.index.add(fresh)
        return next
    }
}

/// One line per log record, text or JSON, journald-friendly: under systemd
/// (`JOURNAL_STREAM` set) no timestamp is printed and each line starts with its syslog
/// priority (`<6>` for info), so `journalctl -p` filters work.
public struct ConciergeLogHandler: LogHandler {
    public enum Format: Sendable { case text, json }

    public var logLevel: Logger.Level
    public var metadata: Logger.Metadata = [:]
    let label: String
    let format: Format
    let journald: Bool
    let sink: LogSink
    let scrubber: SecretScrubber?

    public init(label: String, level: Logger.Level, format: Format, journald: Bool, sink: LogSink, scrubber: SecretScrubber? = nil) {
        self.scrubber = scrubber
        self.label = label
        self.logLevel = level
        self.format = format
        self.journald = journald
        self.sink = sink
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: return 7
        case .info: return 6
        case .notice: return 5
        case .warning: return 4
        case .error: return 3
        case .critical: return 2
        }
    }

    public func log(event: LogEvent) {
        var all = metadata
        if let traced = TraceLogContext.current { all.merge(TraceLogContext.metadata(of: traced.span, traced.tracer)) { $1 } }
        if let extra = event.metadata { all.merge(extra) { $1 } }
        let prefix = journald ? "<\(Self.priority(event.level))>" : ""
        switch format {
        case .text:
            var line = prefix
            if !journald { line += Self.timestamp() + " " }
            line += "\(event.level.rawValue.uppercased()) \(label): \(event.message)"
            for key in all.keys.sorted() { line += " \(key)=\(Self.quote("\(all[key]!)"))" }
            sink.write(scrubber?.scrub(line) ?? line)
        case .json:
            var object: [String: String] = ["level": event.level.rawValue, "logger": label, "message": "\(event.message)"]
            if !journald { object["time"] = Self.timestamp() }
            for (key, value) in all { object[key] = "\(value)" }
            let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
            let line = prefix + String(decoding: data, as: UTF8.self)
            sink.write(scrubber?.scrub(line) ?? line)
        }
    }

    static func quote(_ value: String) -> String {
        value.contains(where: { $0 == " " || $0 == "\"" }) ? "\"\(value.replacingOccurrences(of: "\"", with: "\\\""))\"" : value
    }

    static func timestamp() -> String {
        var tv = timeval()
        gettimeofday(&tv, nil)
        var t = time_t(tv.tv_sec)
        var parts = tm()
        gmtime_r(&t, &parts)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                      parts.tm_hour, parts.tm_min, parts.tm_sec, Int(tv.tv_usec / 1000))
    }
}
