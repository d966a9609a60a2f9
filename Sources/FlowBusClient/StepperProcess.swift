import FlowBusProtocol
import FlowBusWire
import Foundation
import Logging
import ZeroMQ

/// RxFlow's `Stepper` for a process: an initial step, then `readyToEmitSteps`.
///
/// In RxFlow a stepper's initial step is emitted when a flow contribution binds it. Across
/// processes the stepper may start before or after that moment, so ``run(initialStep:timeout:readyToEmitSteps:)``
/// first waits until flowd reports the stepper id bound (a status query), then publishes the
/// initial step, then calls `readyToEmitSteps`. A step published while unbound would be refused
/// as `unbound-stepper`; waiting avoids that race.
public final class StepperProcess {
    /// The publisher, for steps emitted later.
    public let publisher: StepPublisher
    private let control: [String]
    private let curve: CurveKeys

    /// A stepper publishing through `publisher`, which asks flowd's `controlEndpoints` whether it
    /// is bound. It sends heartbeats every `heartbeat` and logs when flowd stops answering them
    /// for `livenessIntervals` of them, and when it is back.
    public init(
        publisher: StepPublisher, controlEndpoints: [String], curve: CurveKeys = CurveKeys(),
        heartbeat: Duration = .seconds(1),
        livenessIntervals: Int = 3, logger: Logger = Logger(label: "flowbus.stepper")
    ) {
        self.publisher = publisher
        publisher.heartbeatInterval = heartbeat
        publisher.livenessIntervals = livenessIntervals
        let endpoint = describeEither(publisher.endpoints)
        publisher.onFlowdLiveness = { change in
            switch change {
            case .silent(let silentFor):
                logger.warning(
                    "flowd silent for \(silentFor.wholeMilliseconds) ms on \(endpoint): down or unreachable; steps are kept and resent when it is back"
                )
            case .back(let source):
                logger.notice("flowd heard again (\(source))")
            }
        }
        control = controlEndpoints
        self.curve = curve
    }

    /// The stepper id.
    public var stepperID: String { publisher.stepperID }

    /// Whether flowd currently binds this stepper id to a flow.
    public func isBound() throws -> Bool {
        let status = try StatusClient.fetch(endpoints: control, curve: curve)
        return status["bindings"]?.listValue?.contains { $0.mapValue?["stepper"]?.stringValue == stepperID } ?? false
    }

    /// Waits until flowd binds this stepper id, polling its status.
    /// - Returns: whether it was bound within `timeout`.
    public func waitUntilBound(
        timeout: Duration = .seconds(30), pollEvery interval: Duration = .milliseconds(50)
    ) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if (try? isBound()) == true { return true }
            Thread.sleep(forTimeInterval: Double(interval.wholeMilliseconds) / 1000)
        }
        return false
    }

    /// Waits for the binding, publishes `initialStep` (if any), then calls `readyToEmitSteps`.
    public func run(
        initialStep: CanonicalStep? = nil, timeout: Duration = .seconds(30),
        readyToEmitSteps: (StepPublisher) throws -> Void = { _ in }
    ) throws {
        guard waitUntilBound(timeout: timeout) else {
            throw ClientError(
                .notBound,
                "no flow bound stepper \(stepperID) within \(timeout): check the flow that should contribute it (flowctl status)"
            )
        }
        if let initialStep {
            try publisher.publish(initialStep)
        }
        try readyToEmitSteps(publisher)
    }
}

@available(*, unavailable, message: "a stepper process owns a socket: use it from one thread")
extension StepperProcess: Sendable {}
