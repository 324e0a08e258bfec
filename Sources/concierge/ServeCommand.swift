import ArgumentParser
import ConciergeCore
import ConciergeServer
import ConciergeStorage
import Foundation

/// `concierge serve`: runs the daemon until SIGTERM/SIGINT; SIGHUP reloads.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "serve", abstract: "Run the daemon.")

    @Option(help: "Configuration file (default: /etc/concierge/concierge.yaml if present, else built-in defaults).")
    var config: String?

    @Option(help: "Upstream base URL for the built-in default configuration (used without a config file).")
    var upstream: String?

    func run() async throws {
        let (loaded, path) = try ConfigSource.load(config, upstream: upstream)
        try await Self.runDaemon(loaded, path: path)
    }

    static func runDaemon(_ config: ConciergeConfig, path: String?) async throws {
        let daemon: ConciergeDaemon
        do {
            daemon = try ConciergeDaemon(config: config, configPath: path)
        } catch let error as StorageError {
            printError("concierge: \(error)")
            throw ExitCode(73)  // EX_CANTCREAT
        } catch let error as ConfigError {
            var error = error
            error.file = path
            printError(error.description)
            throw ExitCode(ConfigError.exitCode)
        }
        do {
            try await daemon.run()
        } catch {
            printError("concierge: \(error)")
            throw ExitCode(70)  // EX_SOFTWARE
        }
    }
}

/// Finds and loads the configuration the way `serve` and the admin clients do.
enum ConfigSource {
    static let systemPath = "/etc/concierge/concierge.yaml"

    /// Loads a file, or prints every error and exits 78.
    static func loadOrExit(_ path: String) throws -> ConciergeConfig {
        do {
            return try ConfigLoader.load(path: path)
        } catch {
            printError(error.description)
            throw ExitCode(ConfigError.exitCode)
        }
    }

    static func load(_ explicit: String?, upstream: String? = nil) throws -> (ConciergeConfig, String?) {
        do {
            if let explicit { return (try ConfigLoader.load(path: explicit), explicit) }
            if upstream == nil, FileManager.default.fileExists(atPath: systemPath) {
                return (try ConfigLoader.load(path: systemPath), systemPath)
            }
            guard let upstream else {
                printError("concierge: no configuration: pass --config PATH, create \(systemPath), or give --upstream URL")
                throw ExitCode(Int32(ConfigError.exitCode))
            }
            return (try ConfigLoader.embeddedDefault(upstream: upstream), nil)
        } catch let error as ConfigError {
            printError(error.description)
            throw ExitCode(ConfigError.exitCode)
        }
    }
}

func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}
