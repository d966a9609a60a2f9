import FlowBusClient
@_exported public import FlowBusConfiguration
import FlowBusProtocol
import FlowBusTracing
import FlowBusWire
import Foundation
import Logging
import ServiceLifecycle
import UnixSignals
import ZeroMQ

/// What a FlowBus daemon takes on its command line: the topology file, a log level and, for a
/// reactor host, which `reactors:` entry it serves.
///
/// The file is found as every tool finds it: `--config FILE`, else `$FLOWBUS_CONFIG`, else
/// `config/flowbus.yaml` — so `flowctl launch` and `FlowBusTesting` (which set
/// `FLOWBUS_CONFIG`) start a user's executable on the right file without arguments.
public struct HostOptions: Sendable, Hashable {
    /// `--config FILE`, if given.
    public var config: String?
    /// `--log-level LEVEL` (default `info`).
    public var logLevel: Logger.Level
    /// `--host NAME`, a key of the config's `reactors:` section, if given.
    public var host: String?
    /// `--log-format text|json`, if given (else the config's `logFormat`, else text).
    public var logFormat: LogFormat?

    public init(config: String? = nil, logLevel: Logger.Level = .info, host: String? = nil, logFormat: LogFormat? = nil)
    {
        self.config = config
        self.logLevel = logLevel
        self.host = host
        self.logFormat = logFormat
    }

    /// The topology file to load.
    public var configPath: String { FlowBusConfig.resolvePath(config) }

    /// The usage text of ``parse(_:)``.
    public static let usage = """
        options:
          -c, --config FILE     the topology file (default: $\(FlowBusConfig.pathVariable), else \(FlowBusConfig.defaultPath))
          --host NAME           the reactors: entry to serve (reactor hosts)
          --log-level LEVEL     trace, debug, info, notice, warning, error or critical (default: info)
          --log-format FORMAT   text, or json: one JSON object a line (default: the config's logFormat, else text)
          -h, --help            this text
        """

    /// Reads `--config`/`-c`, `--host`, `--log-level` and `--log-format` (also written `--name=value`).
    /// - Returns: nil for `--help`.
    /// - Throws: ``HostUsageError`` naming an argument it does not know or a missing value.
    public static func parse(_ arguments: [String]) throws(HostUsageError) -> HostOptions? {
        var options = HostOptions()
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            if argument == "-h" || argument == "--help" { return nil }
            var name = argument
            var value: String?
            if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
                name = String(argument[..<equals])
                value = String(argument[argument.index(after: equals)...])
            }
            guard ["-c", "--config", "--host", "--log-level", "--log-format"].contains(name) else {
                throw HostUsageError(.unknownArgument, "unknown argument '\(argument)'")
            }
            guard let given = value ?? rest.popFirst() else {
                throw HostUsageError(.missingValue, "\(name) needs a value")
            }
            switch name {
            case "--host": options.host = given
            case "--log-level":
                guard let level = Logger.Level(rawValue: given) else {
                    throw HostUsageError(
                        .invalidValue,
                        "'\(given)' is not a log level: use trace, debug, info, notice, warning, error or critical")
                }
                options.logLevel = level
            case "--log-format":
                guard let format = LogFormat(rawValue: given) else {
                    throw HostUsageError(.invalidValue, "'\(given)' is not a log format: use text or json")
                }
                options.logFormat = format
            default: options.config = given
            }
        }
        return options
    }
}

/// A command-line argument a host does not take.
///
/// ``code`` says what is wrong, so that a caller can match it (`error.code == .unknownArgument`);
/// ``description`` says it for a person, naming the argument. New codes do not break callers.
public struct HostUsageError: Error, CustomStringConvertible, Sendable, Hashable {
    /// What is wrong with the command line.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String {
            case unknownArgument = "unknown-argument"
            case missingValue = "missing-value"
            case invalidValue = "invalid-value"
        }

        private let value: Value

        private init(_ value: Value) {
            self.value = value
        }

        /// An argument that is not one of the host's options (a typo, or another tool's option).
        public static let unknownArgument = Code(.unknownArgument)
        /// An option that takes a value is the last argument, without one.
        public static let missingValue = Code(.missingValue)
        /// An option's value is not one it takes (e.g. a log level that does not exist).
        public static let invalidValue = Code(.invalidValue)

        public var description: String { value.rawValue }
    }

    /// What is wrong, to match.
    public var code: Code
    /// What is wrong, naming the argument, in words.
    public var description: String

    public init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}

/// Runs a FlowBus daemon — `flowd`, `reactor-host`, or a user's own coordinator or reactor host —
/// in a few lines:
///
/// ```swift
/// @main
/// struct AppCoordinator {
///     static func main() async {
///         await FlowBusHost.main(label: "app-coordinator") { config, _, logger in
///             [CoordinatorService(config: config, logger: logger) { (flow: AppFlow(), stepper: OneStepper(withSingleStep: AppStep.start)) }]
///         }
///     }
/// }
/// ```
///
/// It reads ``HostOptions`` from the command line, sends logs to standard error at the asked
/// level, loads the topology file (a file that does not load exits 64, as a bad argument),
/// builds the services and runs them in a `ServiceGroup` that stops them gracefully on SIGTERM
/// or SIGINT (a service that fails exits 1).
public enum FlowBusHost {
    /// Sends every logger's output to standard error at `level`, as text or one JSON object a
    /// line (``JSONLogHandler``). Call once, before any logger is made.
    public static func bootstrapLogging(level: Logger.Level, format: LogFormat = .text) {
        LoggingSystem.bootstrap { label in
            var handler: any LogHandler =
                format == .json
                ? JSONLogHandler.standardError(label: label) : StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }

    /// Builds the services for `config` and runs them until SIGTERM or SIGINT. Logging is not
    /// bootstrapped here (``main(label:arguments:services:)`` does it).
    /// - Throws: what building or running the services throws (an endpoint another process
    ///   serves, say).
    public static func run(
        config: FlowBusConfig, options: HostOptions, logger: Logger,
        services: @Sendable (FlowBusConfig, HostOptions, Logger) throws -> [any Service]
    ) async throws {
        limitMallocArenas()
        // Spans are exported by a service listed first, so that it stops last and sends every span.
        let serviceName = options.host.map { "\(logger.label)-\($0)" } ?? logger.label
        let exporter = try TraceExport.bootstrap(config: config.tracing, serviceName: serviceName, logger: logger)
        let built = (exporter.map { [$0] } ?? []) + (try services(config, options, logger))
        let group = ServiceGroup(
            configuration: .init(
                services: built.map { .init(service: $0) }, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger
            ))
        try await group.run()
    }

    /// The whole `main` of a daemon: options from `arguments`, logging, the topology, the services,
    /// a clean stop on SIGTERM or SIGINT. A usage or config error is printed and exits 64, as a
    /// bad argument does; a failing service exits 1.
    public static func main(
        label: String, arguments: [String] = Array(CommandLine.arguments.dropFirst()),
        services: @Sendable (FlowBusConfig, HostOptions, Logger) throws -> [any Service]
    ) async {
        let options: HostOptions
        do {
            guard let parsed = try HostOptions.parse(arguments) else {
                print("usage: \(label) [options]\n\(HostOptions.usage)")
                exit(0)
            }
            options = parsed
        } catch {
            fail("\(label): \(error.description)\n\(HostOptions.usage)", status: 64)
        }
        let config: FlowBusConfig
        do {
            config = try FlowBusConfig.load(path: options.configPath)
        } catch {
            fail("\(label): \(error.description)", status: 64)
        }
        // After the topology is read: it may say how to log.
        bootstrapLogging(level: options.logLevel, format: options.logFormat ?? config.logFormat ?? .text)
        do {
            try await run(config: config, options: options, logger: Logger(label: label), services: services)
        } catch {
            fail("\(label): \(error)", status: 1)
        }
    }

    /// Caps glibc's malloc at two arenas, unless `MALLOC_ARENA_MAX` or `GLIBC_TUNABLES` says
    /// otherwise. A daemon allocates on its loop thread; by default glibc gives each thread that
    /// allocates an arena of its own, whose freed pages stay resident (about 11 MB of flowd's
    /// 137 MB peak with 110,000 bindings).
    static func limitMallocArenas() {
        #if canImport(Glibc)
        let environment = ProcessInfo.processInfo.environment
        guard environment["MALLOC_ARENA_MAX"] == nil, environment["GLIBC_TUNABLES"]?.contains("arena_max") != true
        else { return }
        // mallopt is declared in <malloc.h>, which the Glibc module does not include.
        typealias MallocOption = @convention(c) (Int32, Int32) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt") else { return }
        let mallopt = unsafeBitCast(symbol, to: MallocOption.self)
        let arenaMax: Int32 = -8  // M_ARENA_MAX in <malloc.h>
        _ = mallopt(arenaMax, 2)
        #endif
    }

    private static func fail(_ message: String, status: Int32) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        exit(status)
    }
}
