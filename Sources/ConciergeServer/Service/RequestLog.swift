import ConciergeCore
import Foundation
import Logging

/// One line per request (docs/operations.md): method, path with tokens masked, status, business code,
/// cache status, upstream and total milliseconds, replays; the request as a `curl` line at
/// debug level.
public struct RequestLog: Sendable {
    let logger: Logger

    public init(logger: Logger) {
        self.logger = logger
    }

    func log(_ incoming: IncomingRequest, _ answer: ProxyAnswer, total: Duration, config: RuntimeConfig) {
        guard config.settings.log.requests else { return }
        let reply = answer.reply, report = answer.report
        let target = config.redactor.redactTarget(incoming.target)
        let upstream = report.upstreamTime.map { String(format: "%.1f", $0.seconds * 1000) } ?? "-"
        let totalMs = String(format: "%.2f", total.seconds * 1000)
        var metadata: Logger.Metadata = [
            "method": "\(incoming.method)",
            "path": "\(target)",
            "status": "\(reply.status)",
            "code": "\(report.businessCode.map(\.description) ?? "-")",
            "cache": "\(report.cache?.rawValue ?? "-")",
            "endpoint": "\(report.endpoint)",
            "upstream_ms": "\(upstream)",
            "total_ms": "\(totalMs)",
            "replays": "\(report.replays)",
        ]
        if let trace = incoming.trace { metadata.merge(trace.logMetadata) { $1 } }
        logger.info("\(incoming.method) \(target) \(reply.status)", metadata: metadata)
        if logger.logLevel <= .debug {
            logger.debug("\(curlLine(incoming, target: target, endpoint: report.endpoint, config: config))")
        }
    }

    /// The request as a `curl` command, credentials masked by the config's ``SecretRedactor``,
    /// a `per_client` instance id as ``TokenMask`` masks it (first 4 characters and the length);
    /// the capture endpoint's body (a login form) is never shown.
    func curlLine(_ incoming: IncomingRequest, target: String, endpoint: String, config: RuntimeConfig) -> String {
        var parts = ["curl", "-X", incoming.method]
        let redactor = config.redactor
        let sessions = [config.settings.session] + Array(config.settings.sessions.values)
        let instanceHeaders = Set(sessions.compactMap { $0.perClient?.header.lowercased() })
        for (name, value) in incoming.headers where name.lowercased() != "host" && name.lowercased() != "content-length" {
            let lowered = name.lowercased()
            let shown = redactor.names.contains(lowered) ? SecretRedactor.mask : instanceHeaders.contains(lowered) ? TokenMask.mask(value) : value
            parts.append("-H '\(name): \(shown)'")
        }
        if case .buffered(let body) = incoming.body, body.readableBytes > 0 {
            let text: String
            if config.settings.session.capture?.endpoint == endpoint {
                text = "<\(body.readableBytes) bytes of the capture endpoint, not shown>"
            } else {
                text = redactor.redactBody(body.readableBytesView.prefix(4096), contentType: incoming.headers.first(name: "content-type"))
            }
            parts.append("--data '\(text.replacingOccurrences(of: "'", with: "'\\''"))'")
        }
        parts.append("'http://127.0.0.1\(target)'")
        return parts.joined(separator: " ")
    }
}
