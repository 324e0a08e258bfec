import ArgumentParser

/// `concierge`: the daemon and its command-line clients.
@main
struct ConciergeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "concierge",
        abstract: "A local caching reverse proxy for business JSON APIs.",
        subcommands: [ServeCommand.self, DemoCommand.self, CheckConfigCommand.self, InvalidateCommand.self, StatsCommand.self,
                      EntriesCommand.self, SessionCommand.self, EnvCommand.self]
    )
}
