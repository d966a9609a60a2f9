#if Studio
import FlowBusClient
import FlowBusConfiguration
import FlowBusTools
import FlowBusTracing
import FlowBusWire
import Foundation
import Logging
import Synchronization

/// Publishes what a page (or a Foxglove client) asks for — a step as a stepper, a deep link, an
/// action — on a thread of its own that owns the publishing sockets, and answers with what became
/// of it: a step or deep link applied or refused by flowd, an action acknowledged or refused.
///
/// Only built when the studio was started with publishing allowed.
public final class StudioDriver: Sendable {
    /// One thing to publish.
    public enum Request: Sendable, Hashable {
        case step(stepper: String, name: String, params: WireParams)
        case deepLink(name: String, params: WireParams)
        case action(reactor: String, name: String, params: WireParams)
    }

    /// How it went: `ok` when applied (an action: acknowledged and not refused); `text` says it in words.
    public struct Outcome: Sendable, Hashable {
        public var ok: Bool
        public var text: String
    }

    private struct Pending: Sendable {
        var request: Request
        var reply: @Sendable (Outcome) -> Void
    }

    /// Publishers kept per stepper id (a page clicks on a few screens): past this, all are closed.
    static let maxPublishers = 64

    private let config: FlowBusConfig
    private let logger: Logger
    private let queue = Mutex<[Pending]>([])
    private let wake = DispatchSemaphore(value: 0)
    private let stopped = Atomic<Bool>(false)

    public init(config: FlowBusConfig, logger: Logger) {
        self.config = config
        self.logger = logger
        let thread = Thread { [self] in run() }
        thread.name = "studio-driver"
        thread.start()
    }

    /// Publishes `request` and returns how it went; waits without holding a thread of the pool.
    public func perform(_ request: Request) async -> Outcome {
        await withCheckedContinuation { continuation in
            queue.withLock { $0.append(Pending(request: request, reply: { continuation.resume(returning: $0) })) }
            wake.signal()
        }
    }

    /// Stops the thread once it is idle.
    public func stop() {
        stopped.store(true, ordering: .relaxed)
        wake.signal()
    }

    private func run() {
        var steppers: [String: StepPublisher] = [:]
        var views: [String: ReactorView] = [:]
        while !stopped.load(ordering: .relaxed) {
            _ = wake.wait(timeout: .now() + .milliseconds(500))
            let work = queue.withLock { queue in
                defer { queue.removeAll() }
                return queue
            }
            for item in work {
                item.reply(carryOut(item.request, steppers: &steppers, views: &views))
            }
            if steppers.count > Self.maxPublishers { steppers.removeAll() }
            if views.count > Self.maxPublishers { views.removeAll() }
        }
    }

    private func carryOut(
        _ request: Request, steppers: inout [String: StepPublisher], views: inout [String: ReactorView]
    ) -> Outcome {
        do {
            switch request {
            case .step(let stepper, let name, let params):
                let publisher =
                    try steppers[stepper] ?? StepPublisher(stepperID: stepper, config: config, contentType: .json)
                steppers[stepper] = publisher
                // Subscribed before publishing, so that a refusal while routing is not missed.
                let watcher = try OutcomeWatcher(stepperID: stepper, config: config, timeout: Self.outcomeTimeout)
                // The studio's own `send step` span, when it traces (docs/TRACING.md).
                let sequence = try BusTracing.send(.step, topic: Topic.step(stepper), parent: nil) {
                    try publisher.publish(name, params, traceContext: $0)
                }
                return try outcome(of: sequence, from: publisher, watcher: watcher, what: "step \(name) as \(stepper)")
            case .deepLink(let name, let params):
                let publisher =
                    try steppers["studio"] ?? StepPublisher(stepperID: "studio", config: config, contentType: .json)
                steppers["studio"] = publisher
                let watcher = try OutcomeWatcher(stepperID: "studio", config: config, timeout: Self.outcomeTimeout)
                let sequence = try BusTracing.send(.deepLink, topic: Topic.deepLink(name), parent: nil) {
                    try publisher.publishDeepLink(name, params, traceContext: $0)
                }
                return try outcome(of: sequence, from: publisher, watcher: watcher, what: "deep link \(name)")
            case .action(let reactor, let name, let params):
                let view = try views[reactor] ?? ReactorView(reactorID: reactor, config: config, contentType: .json)
                views[reactor] = view
                let sequence = try BusTracing.send(.action, topic: Topic.action(reactor), parent: nil) {
                    try view.send(name, params, traceContext: $0)
                }
                guard try view.waitForAcknowledgement(timeout: .seconds(3)) else {
                    return Outcome(
                        ok: false,
                        text: "the reactor host did not acknowledge action \(name) within 3 s: is it running?")
                }
                if let refusal = view.refusal(for: sequence) {
                    return Outcome(ok: false, text: "refused: \(refusal.reason.rawValue): \(refusal.message)")
                }
                return Outcome(ok: true, text: "action \(name) to \(reactor) acknowledged")
            }
        } catch {
            logger.warning("studio: publishing failed", metadata: ["error": "\(error)"])
            return Outcome(ok: false, text: "\(error)")
        }
    }

    /// How long the page waits for what became of its step or deep link.
    static let outcomeTimeout: Duration = .seconds(3)

    /// What flowd did with the message: applied, or refused (on arrival or while routing it).
    private func outcome(
        of sequence: UInt64, from publisher: StepPublisher, watcher: OutcomeWatcher, what: String
    ) throws -> Outcome {
        switch try watcher.outcome(of: sequence, from: publisher, timeout: Self.outcomeTimeout) {
        case nil:
            return Outcome(ok: false, text: "flowd did not acknowledge \(what) within 3 s: is it running?")
        case .refused(let diagnostic):
            return Outcome(ok: false, text: "\(what) refused: \(diagnostic.reason.rawValue): \(diagnostic.message)")
        case .applied, .noNavigation:
            return Outcome(ok: true, text: "\(what) applied")
        }
    }
}
#endif
