import ArgumentParser
import ConciergeCore
import ConciergeSampleAPI
import ConciergeServer
import Foundation

/// `concierge demo`: the sample business API plus the proxy in front of it.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "demo",
                                                    abstract: "Start the sample API and the proxy in front of it (Config/demo.yaml).")

    @Option(help: "Demo configuration file.")
    var config: String = "Config/demo.yaml"

    func run() async throws {
        let loaded = try ConfigSource.loadOrExit(config)
        guard let upstream = loaded.upstream(named: loaded.environment) else { throw ExitCode(78) }
        let api = try await SampleAPI.start(host: upstream.host, port: upstream.port,
                                             configuration: SampleAPIConfiguration(accessTokenTTL: .seconds(60)))
        guard case .tcp(let host, let port) = loaded.listen.proxy else { throw ExitCode(78) }
        let admin = "\(loaded.listen.admin)"
        let token = (try? ConciergeDaemon.adminToken(loaded)) ?? nil
        let banner = """
            Concierge demo
              sample API   http://\(upstream.host):\(api.port)   (access tokens expire after 60 s, then answer 801)
              proxy        http://\(host):\(port)
              admin        http://\(admin)   (token: \(token ?? "-"))

            Try, in another terminal:
              curl -i http://\(host):\(port)/api/items                      # MISS, then run it again: HIT
              curl -i 'http://\(host):\(port)/api/items?offset=10&limit=5'
              curl -i http://\(host):\(port)/api/user/info                  # 401: not logged in (answered locally)
              curl -i -X POST -d 'username=alice&password=secret' http://\(host):\(port)/api/login
              curl -i http://\(host):\(port)/api/user/info                  # token injected by Concierge
              curl -s -X POST http://\(host):\(port)/_concierge/batch -H 'Content-Type: application/json' \\
                   -d '{"requests":[{"id":"a","path":"/api/items?limit=2"},{"id":"b","path":"/api/items/7"}]}'
              curl -s -H 'Authorization: Bearer \(token ?? "TOKEN")' http://\(admin)/stats
              curl -s -X POST -H 'Authorization: Bearer \(token ?? "TOKEN")' -d '{"all":true}' http://\(admin)/cache/invalidate

            Ctrl-C stops both.

            """
        FileHandle.standardOutput.write(Data((banner + "\n").utf8))
        defer { Task { await api.shutdown() } }
        try await ServeCommand.runDaemon(loaded, path: config)
        await api.shutdown()
    }
}
