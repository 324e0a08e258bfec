import ArgumentParser
import ConciergeSampleAPI

/// Runs the sample business API in the foreground (demo, integration tests, benchmarks).
struct SampleAPICommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "concierge-sample-api",
        abstract: "Run the sample business JSON API that Concierge can sit in front of."
    )

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "Port to listen on (0 lets the OS choose).")
    var port = 9000

    @Option(help: "Seconds an access token stays valid before it answers code 801.")
    var accessTokenTTL = 3600

    @Option(help: "Milliseconds to wait before answering a token refresh.")
    var refreshDelayMs = 0

    @Option(help: "Secret that /api/signed verifies signatures with (unset: accept all).")
    var signingSecret: String?

    @Option(help: "API style: envelope (default), oauth2, wechat or dingtalk.")
    var dialect = "envelope"

    @Option(help: "OAuth2 client id, WeChat appid, DingTalk appKey.")
    var clientID = SampleAPIConfiguration.defaultClientID

    @Option(help: "OAuth2 client secret, WeChat secret, DingTalk appSecret.")
    var clientSecret = SampleAPIConfiguration.defaultClientSecret

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be between 0 and 65535") }
        guard accessTokenTTL > 0 else { throw ValidationError("--access-token-ttl must be positive") }
        guard refreshDelayMs >= 0 else { throw ValidationError("--refresh-delay-ms must not be negative") }
        guard SampleDialect(rawValue: dialect) != nil else {
            throw ValidationError("--dialect must be one of \(SampleDialect.allCases.map(\.rawValue).joined(separator: ", "))")
        }
    }

    func run() async throws {
        var configuration = SampleAPIConfiguration(
            accessTokenTTL: .seconds(accessTokenTTL),
            refreshDelay: .milliseconds(refreshDelayMs),
            signingSecret: signingSecret,
            dialect: SampleDialect(rawValue: dialect) ?? .envelope
        )
        configuration.clientID = clientID
        configuration.clientSecret = clientSecret
        try await SampleAPI.run(host: host, port: port, configuration: configuration)
    }
}

// In top-level code `SampleAPICommand.main()` resolves to the synchronous
// `ParsableCommand.main()` overload; inside an async function the async one is chosen.
func runSampleAPICommand() async {
    await SampleAPICommand.main()
}

await runSampleAPICommand()
