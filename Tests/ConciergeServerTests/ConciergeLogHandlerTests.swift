import ConciergeServer
import Logging
import Testing

/// Log lines for journald and for JSON consumers.
@Suite("Log handler")
struct ConciergeLogHandlerTests {
    @Test("under journald lines carry a syslog priority prefix and no timestamp")
    func journaldPrefixes() {
        let sink = LogSink(capturing: true)
        let logger = Logger(label: "t") { ConciergeLogHandler(label: $0, level: .debug, format: .text, journald: true, sink: sink) }
        logger.info("hello", metadata: ["k": "v"])
        logger.warning("careful")
        logger.error("broken")
        #expect(sink.lines == ["<6>INFO t: hello k=v", "<4>WARNING t: careful", "<3>ERROR t: broken"])
    }

    @Test("without journald text lines start with an ISO timestamp; JSON lines are objects; levels filter")
    func textAndJSON() {
        let sink = LogSink(capturing: true)
        let text = Logger(label: "t") { ConciergeLogHandler(label: $0, level: .info, format: .text, journald: false, sink: sink) }
        text.debug("hidden")
        text.info("shown")
        #expect(sink.lines.count == 1)
        #expect(sink.lines[0].hasSuffix("Z INFO t: shown"))
        let json = LogSink(capturing: true)
        let jsonLogger = Logger(label: "j") { ConciergeLogHandler(label: $0, level: .info, format: .json, journald: false, sink: json) }
        jsonLogger.info("x", metadata: ["status": "200"])
        #expect(json.lines[0].hasPrefix("{"))
        #expect(json.lines[0].contains(#""status":"200""#))
        #expect(json.lines[0].contains(#""message":"x""#))
    }
}
