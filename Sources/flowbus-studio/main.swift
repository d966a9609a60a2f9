import ArgumentParser
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusTracing
import Foundation
import Logging
import ServiceLifecycle

#if Studio
import FlowBusStudio
#endif

/// FlowBus Studio: the live topology in a browser (docs/STUDIO.md).
@main
struct FlowBusStudioCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "flowbus-studio",
        abstract: "See and drive a live FlowBus topology in a browser.")

    @Option(
        name: .shortAndLong,
        help: "The topology file (default: $\(FlowBusConfig.pathVariable), else \(FlowBusConfig.defaultPath)).")
    var config: String?
    @Option(help: "The port to serve on (0: any free port).") var port = 8089
    @Option(help: "The address to bind; anything but loopback needs --token.") var bind = "127.0.0.1"
    @Option(help: "A secret every page and WebSocket must give as ?token=.") var token: String?
    @Flag(help: "Let pages and Foxglove clients publish steps, deep links and actions.") var allowPublish = false
    @Option(help: "Log format: text, or json (one JSON object a line). Default: the config's logFormat, else text.")
    var logFormat: LogFormat?

    func run() async throws {
        #if !Studio
        throw ValidationError(
            "flowbus-studio was built without the Studio trait: build it with `swift build --traits Studio --product flowbus-studio` (docs/STUDIO.md)"
        )
        #else
        let path = FlowBusConfig.resolvePath(config)
        let topology: FlowBusConfig
        do {
            topology = try FlowBusConfig.load(path: path)
        } catch {
            throw ValidationError(error.description)
        }
        FlowBusHost.bootstrapLogging(
            level: ProcessInfo.processInfo.environment["FLOWBUS_LOG"].flatMap { Logger.Level(rawValue: $0) } ?? .info,
            format: logFormat ?? topology.logFormat ?? .text)
        var options = StudioServer.Options()
        options.host = bind
        options.port = port
        options.token = token
        options.allowPublish = allowPublish
        let server: StudioServer
        do {
            server = try StudioServer(
                config: topology, configPath: path, options: options, logger: Logger(label: "flowbus-studio"))
        } catch {
            throw ValidationError("\(error)")
        }
        // The page's own steps and actions are traced when tracing: or OTEL_* ask (docs/TRACING.md);
        // spans still held are sent once the server stops.
        let logger = Logger(label: "flowbus-studio")
        let exporter: ServiceGroup?
        do {
            exporter = try TraceExport.bootstrap(
                config: topology.tracing, serviceName: "flowbus-studio", logger: logger
            )
            .map { ServiceGroup(services: [$0], logger: logger) }
        } catch {
            throw ValidationError("\(error)")
        }
        let exporting = Task { try await exporter?.run() }
        let host = bind.contains(":") ? "[\(bind)]" : bind
        try await server.run { port in
            let query = token.map { "?token=\($0)" } ?? ""
            FileHandle.standardOutput.write(Data("studio: http://\(host):\(port)/\(query)\n".utf8))
        }
        await exporter?.triggerGracefulShutdown()
        try? await exporting.value
        #endif
    }
}

extension LogFormat: ExpressibleByArgument {}
