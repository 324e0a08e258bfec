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

    func log(_ incoming: IncomingRequest, _ reply: ProxyReply, total: Duration, config: RuntimeConfig) {
        guard config.config.log.requests else { return }
        let masked = config.tokenParamNames.union(config.config.cache.volatileParams.intersection([config.config.signing?.param ?? "signature"]))
        let target = TokenMask.maskQuery(incoming.target, names: masked)
        let upstream = reply.upstreamTime.map { String(format: "%.1f", $0.seconds * 1000) } ?? "-"
        let totalMs = String(format: "%.2f", total.seconds * 1000)
        logger.info("\(incoming.method) \(target) \(reply.status)", metadata: [
            "method": "\(incoming.method)",
            "path": "\(target)",
            "status": "\(reply.status)",
            "code": "\(reply.businessCode.map(String.init) ?? "-")",
            "cache": "\(reply.cacheStatus.isEmpty ? "-" : reply.cacheStatus)",
            "endpoint": "\(reply.endpoint)",
            "upstream_ms": "\(upstream)",
            "total_ms": "\(totalMs)",
            "replays": "\(reply.replays)",
        ])
        if logger.logLevel <= .debug {
            logger.debug("\(curlLine(incoming, target: target, config: config))")
        }
    }

    func curlLine(_ incoming: IncomingRequest, target: String, config: RuntimeConfig) -> String {
        var parts = ["curl", "-X", incoming.method]
        let secretHeaders = Set(config.injector.headerNames.map { $0.lowercased() } + ["authorization", "cookie"])
        for (name, value) in incoming.headers where name.lowercased() != "host" && name.lowercased() != "content-length" {
            let shown = secretHeaders.contains(name.lowercased()) ? "***" : value
            parts.append("-H '\(name): \(shown)'")
        }
        if case .buffered(let body) = incoming.body, body.readableBytes > 0 {
            var text = String(decoding: body.readableBytesView.prefix(2048), as: UTF8.self)
            for name in config.tokenParamNames {
                text = text.replacingOccurrences(of: #"("\#(name)"\s*:\s*")[^"]*""#, with: "$1***\"", options: .regularExpression)
                text = text.replacingOccurrences(of: #"(^|&)(\#(name)=)[^&]*"#, with: "$1$2***", options: .regularExpression)
            }
            parts.append("--data '\(text.replacingOccurrences(of: "'", with: "'\\''"))'")
        }
        parts.append("'http://127.0.0.1\(target)'")
        return parts.joined(separator: " ")
    }
}
