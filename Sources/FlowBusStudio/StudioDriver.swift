import FlowBus
import FlowBusWire
import Foundation
import Logging
import Synchronization

/// Publishes what a page (or a Foxglove client) asks for — a step as a stepper, a deep link, an
/// action — on a thread of its own that owns the publishing sockets, and answers once flowd or
/// the reactor host acknowledged it or refused it.
///
/// Only built when the studio was started with publishing allowed.
public final class StudioDriver: Sendable {
    /// One thing to publish.
    public enum Request: Sendable, Hashable {
        case step(stepper: String, name: String, params: WireParams)
        case deepLink(name: String, params: WireParams)
        case action(reactor: String, name: String, params: WireParams)
    }

    /// How it went: `ok` when acknowledged and not refused on arrival; `text` says it in words.
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

    private func carryOut(_ request: Request, steppers: inout [String: StepPublisher], views: inout [String: ReactorView]) -> Outcome {
        do {
            switch request {
            case .step(let stepper, let name, let params):
                let publisher = try steppers[stepper] ?? StepPublisher(stepperID: stepper, config: config, contentType: .json)
                steppers[stepper] = publisher
                let sequence = try publisher.publish(name, params)
                return try acknowledged(by: publisher, sequence: sequence, what: "step \(name) as \(stepper)")
            case .deepLink(let name, let params):
                let publisher = try steppers["studio"] ?? StepPublisher(stepperID: "studio", config: config, contentType: .json)
                steppers["studio"] = publisher
                let sequence = try publisher.publishDeepLink(name, params)
                return try acknowledged(by: publisher, sequence: sequence, what: "deep link \(name)")
            case .action(let reactor, let name, let params):
                let view = try views[reactor] ?? ReactorView(reactorID: reactor, config: config, contentType: .json)
                views[reactor] = view
                let sequence = try view.send(name, params)
                guard try view.waitForAcknowledgement(timeout: .seconds(3)) else {
                    return Outcome(ok: false, text: "the reactor host did not acknowledge action \(name) within 3 s: is it running?")
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

    private func acknowledged(by publisher: StepPublisher, sequence: UInt64, what: String) throws -> Outcome {
        guard try publisher.waitForAcknowledgement(timeout: .seconds(3)) else {
            return Outcome(ok: false, text: "flowd did not acknowledge \(what) within 3 s: is it running?")
        }
        if let refusal = publisher.refusal(for: sequence) {
            return Outcome(ok: false, text: "refused: \(refusal.reason.rawValue): \(refusal.message)")
        }
        // Routing refusals (not-visible, unbound-stepper) come as diagnostics on events: the timeline shows them.
        return Outcome(ok: true, text: "\(what) acknowledged")
    }
}
