import ArgumentParser
import ConciergeCore
import Foundation
import NIOHTTP1

/// `concierge session`: list, show, set and log out sessions through the admin API.
struct SessionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "session", abstract: "List, show, set or log out sessions.",
                                                    subcommands: [List.self, Show.self, Set.self, Clear.self, Logout.self],
                                                    defaultSubcommand: Show.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List every session: name, kind, state, user, expiry, instances.")
        @OptionGroup var options: AdminOptions
        func run() async throws {
            let reply = try await AdminClient(options).send(.GET, "/sessions")
            if options.json { printJSON(reply); return }
            guard case .array(let sessions)? = reply[path: "sessions"] else { return }
            for s in sessions { print(describe(s)) }
        }
    }

    struct Logout: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Log a session out (with per_client: every instance).")
        @OptionGroup var options: AdminOptions
        @Argument(help: "The session's name.") var name: String
        func run() async throws {
            let reply = try await AdminClient(options).send(.DELETE, "/sessions/\(name)")
            if options.json { printJSON(reply) } else { print("\(name): \(reply[path: "logged_out"]?.parameterText ?? "0") logged out") }
        }
    }

    /// One line of `session list` and `session show NAME`.
    static func describe(_ s: JSONValue) -> String {
        func text(_ path: String) -> String { s[path: path].flatMap { $0 == .null ? nil : $0.parameterText } ?? "-" }
        var line = "\(text("name")) (\(text("kind"))): \(text("state")), user \(text("user")), expires \(text("expires_at")), last refresh \(text("last_refresh"))"
        if case .object? = s[path: "instances"] { line += ", instances \(text("instances.live"))/\(text("instances.max"))" }
        return line
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show a session (default: the session named default; tokens masked).")
        @OptionGroup var options: AdminOptions
        @Argument(help: "The session's name.") var name: String?
        func run() async throws {
            if let name {
                let reply = try await AdminClient(options).send(.GET, "/sessions/\(name)")
                if options.json { printJSON(reply) } else { print(SessionCommand.describe(reply)) }
                return
            }
            let reply = try await AdminClient(options).send(.GET, "/session")
            if options.json { printJSON(reply); return }
            if reply[path: "logged_in"] == .bool(true) {
                print("logged in as \(reply[path: "user_id"]?.parameterText ?? "?") since \(reply[path: "set_at"]?.parameterText ?? "?") (access token \(reply[path: "access_token"]?.parameterText ?? "-"))")
            } else {
                print("not logged in")
            }
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set tokens by hand.")
        @OptionGroup var options: AdminOptions
        @Option(help: "Access token.") var accessToken: String
        @Option(help: "Refresh token.") var refreshToken: String?
        @Option(help: "User id.") var userId: String?
        func run() async throws {
            var body: [String: JSONValue] = ["access_token": .string(accessToken)]
            if let refreshToken { body["refresh_token"] = .string(refreshToken) }
            if let userId { body["user_id"] = .string(userId) }
            let reply = try await AdminClient(options).send(.PUT, "/session", body: .object(body))
            if options.json { printJSON(reply) } else { print("session set for \(reply[path: "user_id"]?.parameterText ?? "?")") }
        }
    }

    struct Clear: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Log out.")
        @OptionGroup var options: AdminOptions
        func run() async throws {
            let reply = try await AdminClient(options).send(.DELETE, "/session")
            if options.json { printJSON(reply) } else { print(reply[path: "logged_out"] == .bool(true) ? "logged out" : "there was no session") }
        }
    }
}

