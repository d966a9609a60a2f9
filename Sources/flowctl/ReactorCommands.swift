import ArgumentParser
import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusDaemon
import FlowBusTools
import FlowBusWire
import Foundation

// Reactor subcommands of flowctl: register `ReactorActionCommand`, `ReactorStateCommand` and
// `ReactorEchoStateCommand` in `Flowctl.configuration.subcommands`.

/// The host serving `reactorID`, or a validation error saying how to declare one.
private func view(of reactorID: String, options: ConfigOptions, json: Bool = false) throws -> ReactorView {
    let config = try options.load()
    guard config.reactorHost(for: reactorID) != nil else {
        let hosts = config.reactors.sorted { $0.key < $1.key }.map {
            "\($0.key): \($0.value.serves.joined(separator: ", "))"
        }
        throw ClientError(
            .failed,
            "no reactor host of the config serves \(reactorID) (\(hosts.isEmpty ? "the config has no reactors: section" : hosts.joined(separator: "; "))): list it, or its family such as movie/, under reactors.<host>.serves"
        )
    }
    return try ReactorView(reactorID: reactorID, config: config, contentType: json ? .json : .fbv)
}

private func seconds(_ value: Double) -> Duration { .milliseconds(Int(value * 1000)) }

/// `flowctl action REACTOR_ID NAME [key=value ...]`: sends an action and waits for the ack.
struct ReactorActionCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "action", abstract: "Send an action to a reactor and say whether its host applied or refused it.",
        discussion: """
            A reactor host refuses an action it cannot map (bad-action: no such action, or a \
            parameter of the wrong type) or a reactor it does not serve (unknown-reactor) before \
            acknowledging it, so the acknowledgement is the outcome.

            """ + paramsHelp + "\n\n" + OutcomeExit.table)

    @OptionGroup var options: ConfigOptions
    @Argument(help: "The reactor id, e.g. counter or movie/42.") var reactorID: String
    @Argument(help: "The action's name, e.g. increase.") var name: String
    @Argument(help: "The action's parameters as key=value or key:=JSON, e.g. apiKey=secret.") var params: [String] = []
    @Flag(help: "Encode params as JSON instead of the binary form.") var json = false
    @Option(help: "Seconds to wait for the reactor host's acknowledgement.") var timeout: Double = 5

    func run() throws {
        let parsed = try parseParams(params)
        let view = try view(of: reactorID, options: options, json: json)
        let sequence = try CommandTracing.send(.action, topic: Topic.action(reactorID), config: try options.load()) {
            trace in
            let sequence = try view.send(name, parsed, traceContext: trace)
            guard try view.waitForAcknowledgement(timeout: seconds(timeout)) else {
                throw noAnswer(
                    "the reactor host did not acknowledge within \(timeout) s on \(view.actionsEndpoint): is it running? Start it with `reactor-host --config FILE --host NAME`"
                )
            }
            return sequence
        }
        if let refusal = view.refusal(for: sequence) {
            note(
                "action \(MessageFormatter.step(name, parsed)) refused by \(reactorID)'s host: \(refusal.reason): \(refusal.message)"
            )
            throw ExitCode(OutcomeExit(refusal: refusal.reason).rawValue)
        }
        print("action \(MessageFormatter.step(name, parsed)) sent to \(reactorID), acknowledged")
    }
}

/// `flowctl state REACTOR_ID [--json]`: prints the reactor's current state (its snapshot).
struct ReactorStateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "state", abstract: "Print a reactor's current state (a snapshot).", discussion: queryExitStatus)

    @OptionGroup var options: ConfigOptions
    @Argument(help: "The reactor id, e.g. counter or movie/42.") var reactorID: String
    @Flag(help: "Print one JSON object.") var json = false
    @Option(help: "Seconds to wait for the reactor host.") var timeout: Double = 5

    func run() throws {
        let view = try view(of: reactorID, options: options)
        guard let snapshot = try view.next(timeout: seconds(timeout)) else {
            throw noAnswer(
                "no snapshot of \(reactorID) within \(timeout) s from \(view.statesEndpoint) / \(view.actionsEndpoint): is the reactor host running? Start it with `reactor-host --config FILE --host NAME`"
            )
        }
        emit(json ? MessageFormatter.json(snapshot.message) : MessageFormatter.line(snapshot.message))
    }
}

/// `flowctl echo state REACTOR_ID [--count N] [--json]` (also spelt `echo-state`): the snapshot,
/// then every live state.
struct ReactorEchoStateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "echo-state", abstract: "Another spelling of `flowctl echo state REACTOR_ID`.",
        shouldDisplay: false)

    @OptionGroup var options: ConfigOptions
    @Argument(help: "The reactor id, e.g. counter or movie/42.") var reactorID: String
    @Option(help: "Stop after this many states (the snapshot included).") var count: Int?
    @Option(help: "Stop with an error after this many seconds without a state.") var idleTimeout: Double?
    @Option(help: "Seconds to wait for the snapshot.") var timeout: Double = 5
    @Flag(help: "Print one JSON object per line.") var json = false

    func run() throws {
        let view = try view(of: reactorID, options: options)
        var printed = 0
        while count.map({ printed < $0 }) ?? true {
            let wait = printed == 0 ? seconds(timeout) : idleTimeout.map(seconds)
            guard let state = try view.next(timeout: wait) else {
                if printed == 0 {
                    throw noAnswer(
                        "no snapshot of \(reactorID) within \(timeout) s from \(view.statesEndpoint): is the reactor host running? Start it with `reactor-host --config FILE --host NAME`"
                    )
                }
                throw noAnswer("no state of \(reactorID) for \(idleTimeout ?? 0) s")
            }
            emit(json ? MessageFormatter.json(state.message) : MessageFormatter.line(state.message))
            printed += 1
        }
    }
}
