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

/// The demo's reactor host: the Counter of seed 001, the api key `login` reactor (a stepper too)
/// and the `movie/<id>` family, served on the endpoints of one `reactors:` entry of the config.
/// flowbench's and the tests' reactors are in `fixture-reactors`.
struct ReactorHostCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reactor-host",
        abstract: "Host the demo reactors (counter, login, movie/<id>) on a FlowBus topology.",
        discussion:
            "Binds the actions and states endpoints of reactors.<host> in the config. Stops cleanly on SIGTERM or SIGINT."
    )

    @Option(
        name: .shortAndLong,
        help: "The topology file (default: $\(FlowBusConfig.pathVariable), else \(FlowBusConfig.defaultPath)).")
    var config: String?

    @Option(help: "The reactor host to run: a key of the config's reactors: section.")
    var host: String = "demo"

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

    @Option(help: "The counter's simulated delay, in milliseconds (seed 001: 500).")
    var counterDelayMs: Int = 500

    @Option(help: "The simulated load time of a movie's details, in milliseconds.")
    var movieDelayMs: Int = 200

    @Option(
        help: "On SIGTERM, how long in-flight actions may take to finish (states published and saved), in milliseconds."
    )
    var drainMs: Int = 2000

    func run() async throws {
        guard let level = Logger.Level(rawValue: logLevel) else {
            throw ValidationError(
                "'\(logLevel)' is not a log level: use trace, debug, info, notice, warning, error or critical")
        }
        let counterDelay = Duration.milliseconds(counterDelayMs)
        let movieDelay = Duration.milliseconds(movieDelayMs)
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
        // The same bootstrap as a user's own reactor host (FlowBusHost), plus the host's metrics; after the topology is read, which may say how to log.
        FlowBusHost.bootstrapLogging(level: level, format: logFormat ?? topology.logFormat ?? .text)
        let metrics = MetricsExposition.bootstrapPrometheus()
        if acceptJournalLoss {
            Logger(label: "reactor-host").warning(
                "--accept-journal-loss: views found ahead of the state store have their sequences adopted; what the store lost is reported, not recovered"
            )
        }
        try await FlowBusHost.run(config: topology, options: options, logger: Logger(label: "reactor-host")) {
            topology, _, logger in
            var reactors = ReactorRegistry()
            reactors.register("counter") { _ in CounterReactor(delay: counterDelay) }
            reactors.register("login") { context in LoginReactor(steps: context.stepper("apikey")) }
            reactors.register(family: "movie/") { context in
                Int(context.memberID).map { MovieDetailReactor(id: $0, loadTime: movieDelay) }
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

// Top-level code (this file is main.swift) resolves `ReactorHostCommand.main()` to
// ParsableCommand's synchronous entry point, which refuses async commands: parse and run here.
do {
    let command = try ReactorHostCommand.parse()
    try await command.run()
} catch {
    ReactorHostCommand.exit(withError: error)
}

extension LogFormat: ExpressibleByArgument {}
