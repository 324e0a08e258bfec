import ArgumentParser
import ConciergeCore
import ConciergeSampleAPI
import ConciergeServer
import Foundation

/// `concierge demo`: the sample business API plus the proxy in front of it.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "demo",
                                                    abstract: "Start the sample API and the proxy in front of it (Config/demo.yaml).")

    @Option(help: "Demo configuration file (default: Config/demo.yaml, or Config/examples/DIALECT.yaml with --dialect).")
    var config: String?

    @Option(help: "API style of the sample API: envelope (default), oauth2, wechat or dingtalk.")
    var dialect: String = "envelope"

    /// The `${VAR}` credentials each example config reads, defaulted to the sample API's.
    static let credentialVariables: [SampleDialect: [String: String]] = [
        .oauth2: ["OAUTH_CLIENT_ID": SampleAPIConfiguration.defaultClientID, "OAUTH_CLIENT_SECRET": SampleAPIConfiguration.defaultClientSecret],
        .wechat: ["WECHAT_APPID": SampleAPIConfiguration.defaultClientID, "WECHAT_SECRET": SampleAPIConfiguration.defaultClientSecret],
        .dingtalk: ["DINGTALK_KEY": SampleAPIConfiguration.defaultClientID, "DINGTALK_SECRET": SampleAPIConfiguration.defaultClientSecret],
    ]

    func validate() throws {
        guard SampleDialect(rawValue: dialect) != nil else {
            throw ValidationError("--dialect must be one of \(SampleDialect.allCases.map(\.rawValue).joined(separator: ", "))")
        }
    }

    func run() async throws {
        let style = SampleDialect(rawValue: dialect) ?? .envelope
        let path = config ?? (style == .envelope ? "Config/demo.yaml" : "Config/examples/\(style.rawValue).yaml")
        var sampleConfiguration = SampleAPIConfiguration(accessTokenTTL: .seconds(60), dialect: style)
        for (name, fallback) in Self.credentialVariables[style] ?? [:] {
            // The sample API accepts what the config will send: the variable's value if set.
            let value = ProcessInfo.processInfo.environment[name].flatMap { $0.isEmpty ? nil : $0 } ?? fallback
            setenv(name, value, 0)
            if name.hasSuffix("_ID") || name.hasSuffix("APPID") || name.hasSuffix("_KEY") {
                sampleConfiguration.clientID = value
            } else {
                sampleConfiguration.clientSecret = value
            }
        }
        let loaded = try ConfigSource.loadOrExit(path)
        guard let upstream = loaded.upstream(named: loaded.environment) else { throw ExitCode(78) }
        let api = try await SampleAPI.start(host: upstream.host, port: upstream.port, configuration: sampleConfiguration)
        guard case .tcp(let host, let port) = loaded.listen.proxy else { throw ExitCode(78) }
        let admin = "\(loaded.listen.admin)"
        let token = (try? ConciergeDaemon.adminToken(loaded)) ?? nil
        let proxy = "http://\(host):\(port)"
        let banner = """
            Concierge demo (\(style.rawValue) dialect, \(path))
              sample API   http://\(upstream.host):\(api.port)   (access tokens expire after 60 s)
              proxy        \(proxy)
              admin        http://\(admin)   (token: \(token ?? "-"))

            Try, in another terminal:
            \(Self.tryLines(style, proxy: proxy))
              curl -s -H 'Authorization: Bearer \(token ?? "TOKEN")' http://\(admin)/session
              curl -s -H 'Authorization: Bearer \(token ?? "TOKEN")' http://\(admin)/stats

            Ctrl-C stops both.

            """
        FileHandle.standardOutput.write(Data((banner + "\n").utf8))
        do {
            try await ServeCommand.runDaemon(loaded, path: path)
        } catch {
            await api.shutdown()
            throw error
        }
        await api.shutdown()
    }

    static func tryLines(_ style: SampleDialect, proxy: String) -> String {
        let lines: [String]
        switch style {
        case .envelope:
            lines = [
                "curl -i \(proxy)/api/items                      # MISS, then run it again: HIT",
                "curl -i '\(proxy)/api/items?offset=10&limit=5'",
                "curl -i \(proxy)/api/user/info                  # 401: not logged in (answered locally)",
                "curl -i -X POST -d 'username=alice&password=secret' \(proxy)/api/login",
                "curl -i \(proxy)/api/user/info                  # token injected by Concierge",
                "curl -s -X POST \(proxy)/_concierge/batch -H 'Content-Type: application/json' \\",
                "     -d '{\"requests\":[{\"id\":\"a\",\"path\":\"/api/items?limit=2\"},{\"id\":\"b\",\"path\":\"/api/items/7\"}]}'",
            ]
        case .oauth2:
            let id = ProcessInfo.processInfo.environment["OAUTH_CLIENT_ID"] ?? SampleAPIConfiguration.defaultClientID
            lines = [
                "curl -i \(proxy)/api/me                         # 401 not_logged_in (answered locally)",
                "curl -s -d grant_type=password -d username=alice -d password=pw -d client_id=\(id) \\",
                "     -d client_secret=\"$OAUTH_CLIENT_SECRET\" \(proxy)/oauth/token   # tokens kept by Concierge, removed from the reply",
                "curl -i \(proxy)/api/me                         # Bearer token added; after 60 s renewed ahead of expiry",
                "curl -i \(proxy)/api/forbidden                  # 403 passed on, never cached",
            ]
        case .wechat:
            lines = [
                "curl -i \(proxy)/cgi-bin/user/info              # app token fetched on first need, ?access_token= added",
                "curl -i \(proxy)/cgi-bin/items                  # MISS, then HIT (shared entries)",
                "curl -i \(proxy)/cgi-bin/forbidden              # errcode 45009: passed on, never cached",
            ]
        case .dingtalk:
            lines = [
                "curl -i \(proxy)/v1.0/contact/users/me          # app token fetched, sent as x-acs-dingtalk-access-token",
                "curl -i \(proxy)/v1.0/items                     # a 200 without a code: cached",
                "curl -i \(proxy)/v1.0/forbidden                 # 403 Forbidden.AccessDenied: passed on, never cached",
            ]
        }
        return lines.map { "  " + $0 }.joined(separator: "\n")
    }
}
