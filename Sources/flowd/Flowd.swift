import ArgumentParser
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusDaemon
import FlowBusPrometheus
import Foundation
import Logging

#if PostgreSQL
import FlowBusPostgres

/// A shared PostgreSQL journal (`persistence.postgres`): built with the PostgreSQL trait.
private let postgresOpener: CoordinatorService.JournalOpener? = PostgresJournal.opener
#else
private let postgresOpener: CoordinatorService.JournalOpener? = nil
#endif

/// The coordinator daemon: routes steps from stepper processes to the flows of a config file.
@main
struct Flowd: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "flowd",
        abstract: "The FlowBus coordinator: routes steps from stepper processes to flows.",
        discussion:
            "Binds the endpoints of the config, runs its flows, and publishes navigation events, commands and diagnostics. Stops cleanly on SIGTERM or SIGINT."
    )

    @Option(
        name: .shortAndLong,
        help: "The topology file (default: $\(FlowBusConfig.pathVariable), else \(FlowBusConfig.defaultPath)).")
    var config: String?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .info

    @Option(help: "Log format: text, or json (one JSON object a line). Default: the config's logFormat, else text.")
    var logFormat: LogFormat?

    @Option(
        help:
            "Which of the instances listed under the config's endpoints this flowd is, from 1 (needed when it lists several; see docs/DEPLOYMENT.md)."
    )
    var instance: Int?

    @Flag(
        help:
            "Adopt the sequence of a stepper found ahead of the journal (its newest entries were lost), reporting how many were lost, instead of refusing its steps as journal-behind. See docs/DEPLOYMENT.md."
    )
    var acceptJournalLoss = false

    func run() async throws {
        let options = HostOptions(config: config, logLevel: logLevel, logFormat: logFormat)
        var topology: FlowBusConfig
        do throws(ConfigError) {
            topology = try FlowBusConfig.load(path: options.configPath)
            if let instance {
                try topology.selectInstance(instance)
            } else if topology.flowdInstances.count > 1 {
                throw ConfigError(
                    .invalid,
                    "\(options.configPath): endpoints lists \(topology.flowdInstances.count) flowd instances: say which this one is with --instance 1…\(topology.flowdInstances.count)"
                )
            }
        } catch {
            // Exit 64 as for a bad argument, without the usage text: the file is what is wrong.
            FileHandle.standardError.write(Data("Error: \(error.description)\n".utf8))
            throw ExitCode(64)
        }
        // The same bootstrap as a user's own coordinator (FlowBusHost), plus flowd's metrics; after
        // the topology is read, which may say how to log.
        FlowBusHost.bootstrapLogging(level: logLevel, format: logFormat ?? topology.logFormat ?? .text)
        let metrics = MetricsExposition.bootstrapPrometheus()
        let logger = Logger(label: "flowd")
        if acceptJournalLoss {
            logger.warning(
                "--accept-journal-loss: steppers found ahead of the journal have their sequences adopted; what the journal lost is reported, not recovered"
            )
        }
        try await FlowBusHost.run(config: topology, options: options, logger: logger) { topology, _, logger in
            [
                CoordinatorService.declared(
                    config: topology, logger: logger, metrics: metrics, acceptJournalLoss: acceptJournalLoss,
                    openJournal: postgresOpener)
            ]
        }
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
extension LogFormat: ExpressibleByArgument {}
