import ArgumentParser
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusPrometheus
import FlowBusReactorHost
import Foundation
import Logging

#if PostgreSQL
import FlowBusPostgres

/// States shared by the host's instances (`persistence.postgres`): built with the PostgreSQL trait.
private let postgresOpener: ReactorStateStoreOpener? = PostgresReactorStore.opener
#else
private let postgresOpener: ReactorStateStoreOpener? = nil
#endif

/// A reactor host for flowbench and the integration tests, not for the demo and not shipped:
/// flowbench's `bench` reactor and the tests' `ticker`, each hosted when the `reactors:` entry
/// serves it. It runs the same ``ReactorHostService`` as `reactor-host`, with the same metrics,
/// so that what flowbench measures through it is the shipped host's path.
struct FixtureReactorsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fixture-reactors",
        abstract: "Host flowbench's bench reactor and the tests' ticker reactor on a FlowBus topology.",
        discussion:
            "Binds the actions and states endpoints of reactors.<host> in the config, which serves bench, ticker "
            + "or both. Stops cleanly on SIGTERM or SIGINT."
    )

    @Option(
        name: .shortAndLong,
        help: "The topology file (default: $\(FlowBusConfig.pathVariable), else \(FlowBusConfig.defaultPath)).")
    var config: String?

    @Option(help: "The reactor host to run: a key of the config's reactors: section.")
    var host: String

    @Option(
        help:
            "Which of the instances listed under reactors.<host>.instances this process is, from 1 (needed when it lists several; see docs/DEPLOYMENT.md)."
    )
    var instance: Int?

    @Flag(
        help:
            "Adopt the sequence of a view found ahead of the state store (its newest entries were lost), reporting how many were lost, instead of refusing its actions as journal-behind. See docs/DEPLOYMENT.md."
    )
    var acceptJournalLoss = false

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    @Option(help: "Log format: text, or json (one JSON object a line). Default: the config's logFormat, else text.")
    var logFormat: LogFormat?

    @Option(
        help: "On SIGTERM, how long in-flight actions may take to finish (states published and saved), in milliseconds."
    )
    var drainMs: Int = 2000

    func run() async throws {
        guard let level = Logger.Level(rawValue: logLevel) else {
            throw ValidationError(
                "'\(logLevel)' is not a log level: use trace, debug, info, notice, warning, error or critical")
        }
        let (host, drain, acceptJournalLoss) = (
            self.host, Duration.milliseconds(max(0, drainMs)), self.acceptJournalLoss
        )
        let options = HostOptions(config: config, logLevel: level, host: host, logFormat: logFormat)
        var topology: FlowBusConfig
        do throws(ConfigError) {
            topology = try FlowBusConfig.load(path: options.configPath)
            try topology.selectReactorInstance(instance, of: host)
        } catch {
            // Exit 64 as for a bad argument, without the usage text: the file is what is wrong.
            FileHandle.standardError.write(Data("Error: \(error.description)\n".utf8))
            throw ExitCode(64)
        }
        // Logging and metrics as every reactor host has them, after the topology is read, which may say how to log.
        FlowBusHost.bootstrapLogging(level: level, format: logFormat ?? topology.logFormat ?? .text)
        let metrics = MetricsExposition.bootstrapPrometheus()
        if acceptJournalLoss {
            Logger(label: "fixture-reactors").warning(
                "--accept-journal-loss: views found ahead of the state store have their sequences adopted; what the store lost is reported, not recovered"
            )
        }
        if let spec = topology.reactors[host], !spec.serves(BenchReactor.reactorID),
            !spec.serves(TickerReactor.reactorID), !spec.serves(TallyReactor.family + "0")
        {
            let message =
                "Error: reactors.\(host) serves none of \(BenchReactor.reactorID), \(TickerReactor.reactorID) and \(TallyReactor.family), "
                + "the reactors fixture-reactors hosts: list them under its serves:, or run reactor-host for the "
                + "demo's reactors\n"
            FileHandle.standardError.write(Data(message.utf8))
            throw ExitCode(64)
        }
        try await FlowBusHost.run(config: topology, options: options, logger: Logger(label: "fixture-reactors")) {
            topology, _, logger in
            var reactors = ReactorRegistry()
            // Only what the host serves: the host warns about a registered reactor it does not serve.
            if topology.reactors[host]?.serves(BenchReactor.reactorID) == true {
                reactors.register(BenchReactor.reactorID) { _ in BenchReactor() }
            }
            if topology.reactors[host]?.serves(TallyReactor.family + "0") == true {
                reactors.register(family: TallyReactor.family) { _ in TallyReactor() }
            }
            if topology.reactors[host]?.serves(TickerReactor.reactorID) == true {
                reactors.register(TickerReactor.reactorID) { context in
                    TickerReactor(steps: context.stepper(TickerReactor.reactorID))
                }
            }
            return [
                try ReactorHostService(
                    hostName: host, config: topology, reactors: reactors, drain: drain, metrics: metrics,
                    acceptJournalLoss: acceptJournalLoss, openStore: postgresOpener, logger: logger
                )
            ]
        }
    }
}

// Top-level code (this file is main.swift) resolves `FixtureReactorsCommand.main()` to
// ParsableCommand's synchronous entry point, which refuses async commands: parse and run here.
do {
    let command = try FixtureReactorsCommand.parse()
    try await command.run()
} catch {
    FixtureReactorsCommand.exit(withError: error)
}

extension LogFormat: ExpressibleByArgument {}
