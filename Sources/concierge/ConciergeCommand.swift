import ArgumentParser
import ConciergeCore

/// `concierge`: the daemon and its command-line clients.
@main
struct ConciergeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "concierge",
        abstract: "A local caching reverse proxy for business JSON APIs.",
        version: ConciergeVersion.current,
        subcommands: [ServeCommand.self, DemoCommand.self, CheckConfigCommand.self, InvalidateCommand.self, StatsCommand.self,
                      EntriesCommand.self, SessionCommand.self, EnvCommand.self, FleetCommand.self]
    )
}
