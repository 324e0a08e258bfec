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
/// (``SecretIndex``) and the index kept while they stay the same: a source with a `version`
/// (the sessions', which hold thousands of tokens with `per_client`) is read again only when
/// its version moves, the others (a few values) at every line.
public final class SecretScrubber: Sendable {
    private struct Source: Sendable {
        let version: (@Sendable () -> Int)?
        let literals: @Sendable () -> [String]
    }

    private struct Built: Sendable {
        var versions: [Int]
        var versioned: [[String]]
        var unversioned: [String]
        var index: SecretIndex
    }

    private let sources = Mutex<[Source]>([])
    private let built = Mutex<Built?>(nil)

    public init() {}

    /// `version`: a number that moves whenever `literals` would give something else.
    public func addSource(version: (@Sendable () -> Int)? = nil, _ literals: @escaping @Sendable () -> [String]) {
        sources.withLock { $0.append(Source(version: version, literals: literals)) }
        built.withLock { $0 = nil }
    }

    func scrub(_ text: String) -> String {
        index().scrub(text)
    }

    private func index() -> SecretIndex {
        let sources = sources.withLock { $0 }
        let versions = sources.compactMap { $0.version?() }
        let unversioned = sources.filter { $0.version == nil }.flatMap { $0.literals() }
        let previous = built.withLock { $0 }
        if let previous, previous.versions == versions, previous.unversioned == unversioned { return previous.index }
        let versioned = previous.flatMap { $0.versions == versions ? $0.versioned : nil }
            ?? sources.filter { $0.version != nil }.map { $0.literals() }
        let next = Built(versions: versions, versioned: versioned, unversioned: unversioned,
                         index: SecretIndex(versioned.flatMap { $0 } + unversioned))
        built.withLock { $0 = next }
        return next.index
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
