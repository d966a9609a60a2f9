import FlowBusClient
import FlowBusConfiguration
import FlowBusTools
import Foundation

/// A topology written in code rather than in a config file: flows, reactor hosts and `launch:`
/// entries, with every endpoint an ipc socket in the test's own directory.
///
/// ```swift
/// let builder = try TopologyBuilder()
///     .flows(yaml: """
///         Main:
///           steps:
///             start:
///               - setRoot: { screen: home, stepper: home }
///             open:
///               - push: { screen: "item/{id}" }
///         """)
///     .coordinator(flow: "Main", step: "start")
///     .reactorHost("app", serves: ["counter"])
///     .launchFlowd()
///     .launch("reactors", ["reactor-host", "--config", "${FLOWBUS_CONFIG}", "--host", "app"], ready: .init(heartbeat: "app"), after: ["flowd"])
/// try withTopology(builder) { topology in … }
/// ```
/// ``yaml()`` writes the config as JSON, which YAML reads as is; `${FLOWBUS_RUN_DIR}` and
/// `${FLOWBUS_CONFIG}` in it are the test's directory and the written file.
public struct TopologyBuilder: Sendable {
    /// The config being built; change any part of it directly.
    public var config: FlowBusConfig

    /// flowd's three endpoints in the test's directory, and a heartbeat of `heartbeat` (short,
    /// so that traces connect and settle quickly).
    public init(heartbeat: Duration = .milliseconds(50)) {
        config = FlowBusConfig(
            endpoints: .init(
                ingress: Self.endpoint("ingress"), events: Self.endpoint("events"), control: Self.endpoint("control")),
            heartbeatMilliseconds: Int(wholeMilliseconds(heartbeat)))
    }

    /// An `ipc://` endpoint named `name` in the test's directory.
    public static func endpoint(_ name: String) -> String {
        "ipc://${FLOWBUS_RUN_DIR}/\(name).sock"
    }

    /// Adds the flows written in YAML, as under a config file's `flows:` key. Flows they start
    /// (`present`, `tabs`) must be among them.
    public func flows(yaml: String) throws -> Self {
        let indented = yaml.split(separator: "\n", omittingEmptySubsequences: false).map { "  " + $0 }.joined(
            separator: "\n")
        let wrapper =
            "endpoints: { ingress: \"ipc://x\", events: \"ipc://y\", control: \"ipc://z\" }\nflows:\n" + indented + "\n"
        let parsed: FlowBusConfig
        do {
            parsed = try FlowBusConfig.parse(yaml: wrapper, source: "TopologyBuilder.flows(yaml:)", environment: [:])
        } catch {
            throw HarnessError(.invalidConfig, error.description)
        }
        var copy = self
        copy.config.flows.merge(parsed.flows) { _, new in new }
        return copy
    }

    /// Adds (or replaces) one flow.
    public func flow(_ name: String, _ spec: DeclaredFlowSpec) -> Self {
        var copy = self
        copy.config.flows[name] = spec
        return copy
    }

    /// The flow flowd starts with, and its first step.
    public func coordinator(flow: String, step: String) -> Self {
        var copy = self
        copy.config.coordinator = .init(flow: flow, step: step)
        return copy
    }

    /// Declares reactor host `name`, serving these reactor ids (a trailing `/` serves a
    /// family), with its endpoints in the test's directory.
    public func reactorHost(_ name: String, serves: [String]) -> Self {
        var copy = self
        copy.config.reactors[name] = .init(
            actions: Self.endpoint("reactors-\(name)-actions"), states: Self.endpoint("reactors-\(name)-states"),
            serves: serves)
        return copy
    }

    /// Adds an entry to the `launch:` section (see `LaunchSpec`), started by ``TestTopology/launch(only:)``.
    public func launch(
        _ name: String, _ command: [String], ready: LaunchSpec.Readiness? = nil, after: [String] = [],
        oneShot: Bool = false,
        env: [String: String] = [:]
    ) -> Self {
        var copy = self
        copy.config.launch =
            (config.launch ?? []) + [
                LaunchSpec(name: name, command: command, ready: ready, after: after, oneShot: oneShot, env: env)
            ]
        return copy
    }

    /// Adds `flowd` on this topology to the `launch:` section, ready once it answers.
    public func launchFlowd(arguments: [String] = []) -> Self {
        launch("flowd", ["flowd", "--config", "${FLOWBUS_CONFIG}"] + arguments, ready: .init(control: true))
    }

    /// The config file's text.
    public func yaml() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        do {
            return String(decoding: try encoder.encode(config), as: UTF8.self) + "\n"
        } catch {
            throw HarnessError(.invalidConfig, "the built topology cannot be written: \(error)")
        }
    }
}
