import Foundation
import Hummingbird
import Logging

/// The sample business API speaking the JSON envelope `{"code", "msg", "data"}`.
public enum SampleAPI {
    /// Errors raised while starting the server.
    public enum StartError: Error, CustomStringConvertible {
        case serverStoppedBeforeListening

        public var description: String { "sample API stopped before it was listening" }
    }

    /// Starts the API in the background and returns once it listens.
    /// - Parameters:
    ///   - port: port to bind; 0 lets the OS choose (see `RunningSampleAPI.port`).
    ///   - logger: defaults to a logger that only reports warnings and above.
    public static func start(
        host: String = "127.0.0.1",
        port: Int = 0,
        configuration: SampleAPIConfiguration = .init(),
        logger: Logger? = nil
    ) async throws -> RunningSampleAPI {
        let state = SampleAPIState()
        let muteSwitch = ShutdownMutingLogHandler.Switch()
        let (boundPorts, boundPortContinuation) = AsyncStream.makeStream(of: Int.self)
        let application = makeApplication(
            host: host,
            port: port,
            state: state,
            configuration: configuration,
            logger: ShutdownMutingLogHandler.logger(wrapping: logger ?? quietLogger(), muteSwitch: muteSwitch),
            onListening: { boundPort in
                boundPortContinuation.yield(boundPort)
                boundPortContinuation.finish()
            }
        )
        // Unstructured because `start` returns while the server runs on: the handle it returns
        // (`RunningSampleAPI.shutdown()`) cancels and awaits this task.
        let serverTask = Task {
            defer { boundPortContinuation.finish() }
            try await application.run()
        }
        guard let boundPort = await boundPorts.first(where: { _ in true }) else {
            serverTask.cancel()
            try await serverTask.value  // rethrows the bind error, if any
            throw StartError.serverStoppedBeforeListening
        }
        return RunningSampleAPI(port: boundPort, state: state, serverTask: serverTask, logMuteSwitch: muteSwitch)
    }

    /// Runs the API in the foreground until SIGINT or SIGTERM.
    public static func run(
        host: String = "127.0.0.1",
        port: Int = 9000,
        configuration: SampleAPIConfiguration = .init()
    ) async throws {
        var logger = Logger(label: "concierge-sample-api")
        logger.logLevel = .info
        let application = makeApplication(
            host: host,
            port: port,
            state: SampleAPIState(),
            configuration: configuration,
            logger: logger,
            onListening: { boundPort in
                FileHandle.standardOutput.write(Data("sample API listening on http://\(host):\(boundPort)\n".utf8))
            }
        )
        try await application.runService()
    }

    private static func makeApplication(
        host: String,
        port: Int,
        state: SampleAPIState,
        configuration: SampleAPIConfiguration,
        logger: Logger,
        onListening: @escaping @Sendable (Int) -> Void
    ) -> some ApplicationProtocol {
        let routes = SampleAPIRoutes(state: state, configuration: configuration)
        return Application(
            router: routes.makeRouter(),
            configuration: .init(address: .hostname(host, port: port), serverName: "concierge-sample-api"),
            onServerRunning: { channel in onListening(channel.localAddress?.port ?? port) },
            logger: logger
        )
    }

    private static func quietLogger() -> Logger {
        var logger = Logger(label: "concierge-sample-api")
        logger.logLevel = .warning
        return logger
    }
}
