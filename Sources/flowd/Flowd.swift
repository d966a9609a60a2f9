import ArgumentParser
import FlowBus
import FlowBusPrometheus
import Foundation
import Logging
import ServiceLifecycle
import UnixSignals

/// The coordinator daemon: routes steps from stepper processes to the flows of a config file.
@main
struct Flowd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "flowd",
        abstract: "The FlowBus coordinator: routes steps from stepper processes to flows.",
        discussion: "Binds the endpoints of the config, runs its flows, and publishes navigation events, commands and diagnostics. Stops cleanly on SIGTERM or SIGINT."
    )

    @Option(name: .shortAndLong, help: "The topology file (default: $\(FlowBusConfig.pathVariable), else \(FlowBusConfig.defaultPath)).")
    var config: String?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .info

    @Flag(help: "Adopt the sequence of a stepper found ahead of the journal (its newest entries were lost), reporting how many were lost, instead of refusing its steps as journal-behind. See docs/DEPLOYMENT.md.")
    var acceptJournalLoss = false

    func run() async throws {
        let level = logLevel
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let metrics = MetricsExposition.bootstrapPrometheus()
        let logger = Logger(label: "flowd")
        let path = FlowBusConfig.resolvePath(config)
        let topology: FlowBusConfig
        do {
            topology = try FlowBusConfig.load(path: path)
        } catch {
            // Exit 64 as for a bad argument, without the usage text: the file is what is wrong.
            FileHandle.standardError.write(Data("Error: \(error.description)\n".utf8))
            throw ExitCode(64)
        }
        if acceptJournalLoss {
            logger.warning("--accept-journal-loss: steppers found ahead of the journal have their sequences adopted; what the journal lost is reported, not recovered")
        }
        let service = CoordinatorService.declared(config: topology, logger: logger, metrics: metrics, acceptJournalLoss: acceptJournalLoss)
        let group = ServiceGroup(
            configuration: .init(services: [.init(service: service)], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
