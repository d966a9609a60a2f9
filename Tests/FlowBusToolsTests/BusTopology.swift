import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTools
import FlowBusWire
import Foundation
import Logging
import Reactors

/// Runs blocking work (sockets, bounded waits) on its own thread, so that it never holds one of
/// the few threads of Swift's cooperative pool, which the services in this process need.
func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.start()
    }
}

/// A fresh directory for ipc endpoints and recordings, deleted by ``remove()``.
struct ScratchDirectory: Sendable {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "fbtools-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func file(_ name: String) -> String { "\(path)/\(name)" }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// A topology whose flow `TickFlow` binds stepper `ticker` at its root and takes its `tick`
/// steps (changing nothing), with a reactor host `test` serving the `ticker` reactor. `limits`:
/// the config's `limits:` map, e.g. `{ highWaterMark: 50 }`.
func tickConfig(in directory: ScratchDirectory, limits: String = "{}") throws -> FlowBusConfig {
    let run = directory.path
    return try FlowBusConfig.parse(
        yaml: """
            endpoints:
              ingress: ipc://\(run)/ingress.sock
              events: ipc://\(run)/events.sock
              control: ipc://\(run)/control.sock
            heartbeatMilliseconds: 50
            limits: \(limits)
            coordinator: { flow: TickFlow, step: start }
            flows:
              TickFlow:
                root: stack
                id: ticks
                steps:
                  start:
                    - setRoot: { screen: home, stepper: ticker, allowStepWhenNotPresented: true }
                  tick: [none]
            reactors:
              test:
                actions: ipc://\(run)/actions.sock
                states: ipc://\(run)/states.sock
                serves: [ticker]
            """, environment: [:])
}

private let quiet = Logger(label: "flowbus-tools-test") { _ in SwiftLogNoOpLogHandler() }

/// Runs flowd's coordinator on ``tickConfig(in:)`` in this process, and the reactor host `test`
/// with ``EchoStepReactor`` when `withReactorHost`; runs `body` on a thread with the config and
/// the directory, then stops them. Assert on what `body` returns (in the test's task).
func withTickTopology<T: Sendable>(
    withReactorHost: Bool = false, limits: String = "{}",
    body: @escaping @Sendable (FlowBusConfig, ScratchDirectory) throws -> T
) async throws -> T {
    let directory = try ScratchDirectory()
    defer { directory.remove() }
    let config = try tickConfig(in: directory, limits: limits)
    let coordinator = CoordinatorService.declared(config: config, logger: quiet)
    var tasks = [Task { try await coordinator.run() }]
    func stopAll() async throws {
        for task in tasks.reversed() {
            task.cancel()
            try await task.value
        }
    }
    let result: T
    do {
        await coordinator.waitUntilReady()
        if withReactorHost {
            var reactors = ReactorRegistry()
            reactors.register(EchoStepReactor.reactorID) { context in
                EchoStepReactor(steps: context.stepper(EchoStepReactor.reactorID))
            }
            let host = try ReactorHostService(hostName: "test", config: config, reactors: reactors, logger: quiet)
            tasks.append(Task { try await host.run() })
            try await host.waitUntilReady()
        }
        result = try await onThread { try body(config, directory) }
    } catch {
        try? await stopAll()
        throw error
    }
    try await stopAll()
    return result
}

/// A reactor that is a stepper: `tick(n: N)` with N > 0 publishes step `tick(n: N)` as stepper
/// `ticker` while it is applied; every tick makes the state `{n: N}`.
final class EchoStepReactor: Reactor {
    enum Action: Decodable, Sendable {
        case tick(n: Int)
    }

    enum Mutation: Sendable {
        case ticked(Int)
    }

    struct State: Encodable, Sendable {
        var n = 0
    }

    static let reactorID = "ticker"

    let initialState = State()
    private let steps: ReactorStepper

    init(steps: ReactorStepper) {
        self.steps = steps
    }

    func mutate(action: Action) -> Mutations<Mutation> {
        switch action {
        case .tick(let n):
            if n > 0 { steps.emit("tick", ["n": .int(Int64(n))]) }
            return .just(.ticked(n))
        }
    }

    func reduce(state: State, mutation: Mutation) -> State {
        switch mutation {
        case .ticked(let n): State(n: n)
        }
    }
}

/// One message as a publisher sends it, recorded at `time` ms on `endpoint`.
func recorded(
    _ message: some WireMessageEncodable, atMilliseconds time: Int64 = 0, on endpoint: String = "events"
) throws -> BusRecording.Message {
    var frames = FrameBuffer()
    try message.encode(into: &frames)
    return BusRecording.Message(time: time * 1_000_000, endpoint: endpoint, frames: frames)
}

/// A tick of stepper `ticker` as a process with source `source` published it.
func tickStep(_ n: Int, source: String, contentType: ContentType = .fbv) -> StepMessage {
    StepMessage(
        stepperID: "ticker", envelope: Envelope(kind: .step, contentType: contentType, sequence: 1, source: source),
        name: "tick", params: ["n": .int(Int64(n))])
}

/// An action `name(n: N)` for the `ticker` reactor, as a view sent it.
func tickAction(_ n: Int, name: String = "tick") -> ActionMessage {
    ActionMessage(
        reactorID: "ticker",
        envelope: Envelope(kind: .action, contentType: .fbv, sequence: 1, source: "view:ticker#v1"),
        name: name, params: ["n": .int(Int64(n))])
}

/// A recording at `path` of `messages`, with `hosts` noted as heard.
func writeRecording(
    _ path: String, hosts: [BusRecording.ReactorHost] = [], _ messages: [BusRecording.Message]
) throws {
    let recording = try BusRecording.create(
        path: path,
        metadata: BusRecording.Metadata(
            recorder: "test", configPath: nil,
            endpoints: [
                BusRecording.Endpoint(name: "events", address: "ipc:///e"),
                BusRecording.Endpoint(name: "reactors.test.states", address: "ipc:///s"),
            ], topics: []))
    for host in hosts { try recording.noteReactorHost(host) }
    try recording.append(messages)
    try recording.finish(duration: .milliseconds(5))
    recording.close()
}

/// The playlist of the recording at `path`.
func playlist(at path: String) throws -> BusPlayer.Playlist {
    let recording = try BusRecording.open(path: path)
    defer { recording.close() }
    return try BusPlayer.Playlist(recording: recording)
}

/// The steps flowd re-publishes, as `name(n) from source`.
final class StepWatch {
    private let subscriber: BusSubscriber

    init(_ config: FlowBusConfig) throws {
        subscriber = try BusSubscriber(endpoints: config.eventsEndpoints, topics: ["step/"], curve: config.curve)
        guard try subscriber.waitUntilConnected(timeout: .seconds(10)) else {
            throw ClientError(.noAnswer, "no heartbeat from flowd's events endpoint")
        }
    }

    /// Up to `count` steps, waiting at most `timeout` for each.
    func take(_ count: Int, timeout: Duration = .seconds(5)) throws -> [StepMessage] {
        var steps: [StepMessage] = []
        while steps.count < count, let received = try subscriber.next(timeout: timeout) {
            if case .message(.step(let step)) = received { steps.append(step) }
        }
        return steps
    }
}
