import ArgumentParser
import AsyncHTTPClient
import ConciergeCore
import Foundation
import NIOCore
import NIOHTTP1

/// Options every admin client shares: where the daemon's admin API is and its token.
struct AdminOptions: ParsableArguments {
    @Option(help: "Configuration file to read the admin address and token from (default: /etc/concierge/concierge.yaml).")
    var config: String?

    @Option(help: "Admin address, overriding the config (host:port or unix:/path).")
    var admin: String?

    @Option(help: "Admin token, overriding the config (or set CONCIERGE_ADMIN_TOKEN).")
    var token: String?

    @Flag(help: "Print the raw JSON reply.")
    var json = false
}

/// A small client of the admin API used by the CLI subcommands.
struct AdminClient {
    let baseURL: String
    let token: String?

    init(_ options: AdminOptions) throws {
        var address = options.admin
        var token = options.token ?? ProcessInfo.processInfo.environment["CONCIERGE_ADMIN_TOKEN"]
        let path = options.config ?? (FileManager.default.fileExists(atPath: ConfigSource.systemPath) ? ConfigSource.systemPath : nil)
        if let path {
            do {
                let config = try ConfigLoader.load(path: path)
                if address == nil { address = "\(config.listen.admin)" }
                if token == nil {
                    token = config.admin.token
                    if token == nil, let file = config.admin.tokenFile {
                        token = (try? String(contentsOfFile: file, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
                        if token == nil { printError("concierge: cannot read admin token file \(file) (run as root or pass --token)") }
                    }
                }
            } catch {
                printError(error.description)
                throw ExitCode(ConfigError.exitCode)
            }
        }
        let spec = SocketAddressSpec.parse(address ?? "127.0.0.1:8081") ?? .tcp(host: "127.0.0.1", port: 8081)
        switch spec {
        case .tcp(let host, let port): baseURL = "http://\(host.contains(":") ? "[\(host)]" : host):\(port)"
        case .unix(let path): baseURL = "http+unix://\(path.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? path)"
        }
        self.token = token
    }

    /// Sends a request; exits 69 (unavailable) when the daemon is down, 77 on a bad token.
    func send(_ method: HTTPMethod, _ path: String, body: JSONValue? = nil) async throws -> JSONValue {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body.serializedBytes))
        }
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        defer { _ = client.shutdown() }
        let response: HTTPClientResponse
        let bytes: ByteBuffer
        do {
            response = try await client.execute(request, timeout: .seconds(30))
            bytes = try await response.body.collect(upTo: 64 << 20)
        } catch {
            try? await client.shutdown()
            printError("concierge: cannot reach the admin API at \(baseURL): \(error)")
            throw ExitCode(69)  // EX_UNAVAILABLE
        }
        try? await client.shutdown()
        let json = JSONValue.parse(bytes.readableBytesView) ?? .string(String(buffer: bytes))
        if response.status == .unauthorized {
            printError("concierge: the admin API refused the token (401); check admin.token / --token")
            throw ExitCode(77)  // EX_NOPERM
        }
        if response.status.code >= 400 {
            printError("concierge: \(json[path: "error"]?.parameterText ?? json.serialized) (HTTP \(response.status.code))")
            throw ExitCode(1)
        }
        return json
    }
}

func printJSON(_ value: JSONValue) {
    print(value.serialized)
}

struct InvalidateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "invalidate", abstract: "Remove cached entries (or, with --soft, mark them stale).")
    @OptionGroup var options: AdminOptions
    @Option(help: "Regular expression searched in the cache keys.") var pattern: String?
    @Option(help: "Endpoint name whose entries to remove.") var endpoint: String?
    @Option(name: .customLong("tag"), help: "A tag (cache.tags); repeat for several: entries with any of them go.") var tags: [String] = []
    @Flag(help: "Remove every entry.") var all = false
    @Flag(help: "Mark the entries stale instead: served only as their stale windows allow, refreshed from the upstream.") var soft = false
    @Flag(name: .customLong("wait-fleet"), help: "In a fleet: answer once every node has applied it (up to 5 s).") var waitFleet = false

    func validate() throws {
        let given = [pattern != nil, endpoint != nil, !tags.isEmpty, all].filter { $0 }.count
        guard given == 1 else { throw ValidationError("give exactly one of --pattern, --endpoint, --tag or --all") }
    }

    func run() async throws {
        var body: [String: JSONValue] = pattern.map { ["pattern": .string($0)] } ?? endpoint.map { ["endpoint": .string($0)] }
            ?? (tags.isEmpty ? ["all": true] : ["tags": .array(tags.map(JSONValue.string))])
        if soft { body["soft"] = true }
        let reply = try await AdminClient(options).send(.POST, waitFleet ? "/cache/invalidate?wait=fleet" : "/cache/invalidate", body: .object(body))
        if options.json { printJSON(reply); return }
        if soft {
            print("marked \(reply[path: "marked"]?.parameterText ?? "?") entries stale")
        } else {
            print("removed \(reply[path: "removed"]?.parameterText ?? "?") entries")
        }
        if reply[path: "fleet"] == "pending" {
            print("fleet: pending (PostgreSQL does not answer; delivered once it does)")
        } else if let seq = reply[path: "fleet.seq"]?.parameterText {
            let lagging = reply[path: "fleet.lagging"]?.arrayValue?.compactMap(\.stringValue)
            print("fleet: logged as \(seq)" + (lagging.map { $0.isEmpty ? ", applied by every node" : ", not yet applied by \($0.joined(separator: ", "))" } ?? ""))
        }
    }
}

struct StatsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats", abstract: "Show request and cache counters.",
        usage: "concierge stats [--json] [--watch [<seconds>]] [<options>]",
        discussion: """
            With --watch, a live view like varnishstat: every counter with its rate per second and the hit ratio, \
            refreshed in place every SECONDS (default 1) until Ctrl-C. When stdout is not a terminal it prints \
            one plain line per refresh instead.
            """)
    @OptionGroup var options: AdminOptions
    @Flag(help: "Refresh until Ctrl-C (every <seconds>, default 1).") var watch = false
    @Argument(help: ArgumentHelp("Refresh interval for --watch.", valueName: "seconds")) var seconds: Double?

    func validate() throws {
        if seconds != nil, !watch { throw ValidationError("an interval needs --watch (concierge stats --watch 2)") }
        if let seconds, !(0.05...3600).contains(seconds) { throw ValidationError("the interval must be between 0.05 and 3600 seconds") }
    }

    func run() async throws {
        if watch {
            try await StatsWatch(client: AdminClient(options), interval: seconds ?? 1).run()
            return
        }
        let reply = try await AdminClient(options).send(.GET, "/stats")
        if options.json { printJSON(reply); return }
        guard case .object(let members) = reply else { printJSON(reply); return }
        for key in members.keys.sorted() { print("\(key.padding(toLength: 16, withPad: " ", startingAt: 0)) \(members[key]!.parameterText)") }
    }
}

struct EntriesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "entries", abstract: "List cached entries.")
    @OptionGroup var options: AdminOptions
    @Option(help: "Only keys matching this regular expression.") var pattern: String?
    @Option(help: "Entries per page.") var limit = 50
    @Option(help: "Continue after this cursor (printed at the end of a page).") var cursor: String?

    func run() async throws {
        var query = "limit=\(limit)"
        if let pattern { query += "&pattern=\(QueryString.percentEncode(pattern))" }
        if let cursor { query += "&cursor=\(QueryString.percentEncode(cursor))" }
        let reply = try await AdminClient(options).send(.GET, "/cache/entries?\(query)")
        if options.json { printJSON(reply); return }
        if case .array(let entries)? = reply[path: "entries"] {
            for e in entries {
                print("\(e[path: "key"]?.parameterText ?? "")  endpoint=\(e[path: "endpoint"]?.parameterText ?? "-") size=\(e[path: "size"]?.parameterText ?? "-") age=\(e[path: "age"]?.parameterText ?? "-")s ttl=\(e[path: "ttl"]?.parameterText ?? "-")s")
            }
            print("\(entries.count) entries")
        }
        if let next = reply[path: "next"]?.stringValue { print("more: --cursor '\(next)'") }
    }
}

struct FleetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "fleet", abstract: "Show this daemon's place in its fleet.")
    @OptionGroup var options: AdminOptions

    func run() async throws {
        let reply = try await AdminClient(options).send(.GET, "/fleet")
        if options.json { printJSON(reply); return }
        guard reply[path: "state"] != .string("off") else {
            print("not in a fleet (no fleet: section)")
            return
        }
        func text(_ path: String) -> String { reply[path: path]?.parameterText ?? "-" }
        print("fleet \(text("name")), node \(text("node")): \(text("state"))")
        print("session version \(text("session_version")), invalidations applied up to \(text("applied_seq")), token requests \(text("token_requests"))")
        for node in reply[path: "nodes"]?.arrayValue ?? [] {
            func field(_ key: String) -> String { node[path: key]?.parameterText ?? "-" }
            print("  \(field("node"))  \(field("state"))  applied \(field("applied_seq"))  last seen \(field("last_seen"))")
        }
        if case .object = reply[path: "apply_delay_ms"] {
            print("invalidation delay (ms): p50 \(text("apply_delay_ms.p50")), p99 \(text("apply_delay_ms.p99")), max \(text("apply_delay_ms.max"))")
        }
    }
}

struct EnvCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "env", abstract: "Show or switch the upstream environment.",
                                                    subcommands: [Show.self, Set.self], defaultSubcommand: Show.self)

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show the current environment.")
        @OptionGroup var options: AdminOptions
        func run() async throws {
            let reply = try await AdminClient(options).send(.GET, "/environment")
            if options.json { printJSON(reply) } else { print(reply[path: "environment"]?.parameterText ?? "?") }
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Switch the environment (an upstream name).")
        @OptionGroup var options: AdminOptions
        @Argument(help: "Upstream name, e.g. debug or release.") var name: String
        func run() async throws {
            let reply = try await AdminClient(options).send(.PUT, "/environment", body: ["environment": .string(name)])
            if options.json { printJSON(reply) } else { print("environment: \(reply[path: "environment"]?.parameterText ?? "?")") }
        }
    }
}
