import FlowBusWire

/// A hot relay of steps, like RxFlow's `PublishRelay<Step>`: no replay, never completes.
///
/// A ``Stepper`` emits with `steps.accept(step)`. Emissions go synchronously to the current
/// subscribers (the coordinator, or a ``CompositeStepper``); a step accepted while nobody is
/// subscribed goes nowhere, exactly as in RxFlow. The coordinator subscribes *before* it calls
/// ``Stepper/readyToEmitSteps()``, so steps emitted inside `readyToEmitSteps` are never lost
/// (RxFlow issue #134).
@FlowActor
public class StepRelay {
    @FlowActor
    private struct Subscriber {
        let token: Int
        let target: Target

        /// A remote binding's subscription outlives its binding's unbinding (the coordinator does
        /// not keep the relay to unsubscribe from): once unbound, it delivers nothing.
        var isUnbound: Bool {
            if case .remoteBinding(let subscription) = target { return !subscription.binding.isActive }
            return false
        }

        func delivers(to binding: StepperBinding) -> Bool {
            if case .binding(let subscription) = target { return subscription.binding === binding }
            return false
        }
    }

    private enum Target {
        case handler(@FlowActor (any Step) -> Void)
        case binding(BindingSubscription)
        case remoteBinding(RemoteBindingSubscription)
    }

    /// Nearly every relay has one subscriber, its coordinator: kept inline, it costs no array.
    private var first: Subscriber?
    private var others: [Subscriber] = []
    /// Tokens are unique across relays: one counter, not one per relay.
    private static var nextToken = 0

    /// Creates a relay with no subscriber.
    public init() {}

    /// Emits a step to every current subscriber, in subscription order.
    public func accept(_ step: any Step) {
        if let first { deliver(step, to: first.target) }
        for subscriber in others {
            deliver(step, to: subscriber.target)
        }
    }

    private func deliver(_ step: any Step, to target: Target) {
        switch target {
        case .handler(let handler):
            handler(step)
        case .binding(let subscription):
            // The coordinator retains its bindings until it unsubscribes them: while it lives,
            // the binding does too.
            guard let coordinator = subscription.coordinator else { return }
            coordinator.stepperEmitted(step, binding: subscription.binding)
        case .remoteBinding(let subscription):
            // An unbound binding's steps go nowhere: `stepperEmitted` ignores them.
            guard let coordinator = subscription.coordinator else { return }
            coordinator.stepperEmitted(step, binding: subscription.binding)
        }
    }

    /// Whether anybody listens.
    public var hasSubscribers: Bool {
        first.map { !$0.isUnbound } == true || others.contains { !$0.isUnbound }
    }

    /// Registers a handler; returns the token that ``unsubscribe(_:)`` takes.
    @discardableResult
    public func subscribe(_ handler: @escaping @FlowActor (any Step) -> Void) -> Int {
        add(.handler(handler))
    }

    /// Registers a coordinator's binding without a closure or a weak reference to the binding:
    /// a coordinator holds a hundred thousand of them, and each would cost two allocations.
    func subscribe(_ binding: StepperBinding, of coordinator: FlowCoordinator) {
        if binding.isRemote {
            add(.remoteBinding(RemoteBindingSubscription(coordinator: coordinator, binding: binding)))
        } else {
            add(.binding(BindingSubscription(coordinator: coordinator, binding: binding)))
        }
    }

    @discardableResult
    private func add(_ target: Target) -> Int {
        remove { $0.isUnbound }
        Self.nextToken += 1
        let token = Self.nextToken
        if first == nil && others.isEmpty {
            first = Subscriber(token: token, target: target)
        } else {
            others.append(Subscriber(token: token, target: target))
        }
        return token
    }

    /// Removes a handler registered with ``subscribe(_:)``.
    public func unsubscribe(_ token: Int) {
        remove { $0.token == token }
    }

    /// Removes an in-process binding's subscription.
    func unsubscribe(_ binding: StepperBinding) {
        remove { $0.delivers(to: binding) }
    }

    private func remove(where shouldBeRemoved: (Subscriber) -> Bool) {
        others.removeAll(where: shouldBeRemoved)
        if let first, shouldBeRemoved(first) {
            // The next oldest takes its place, so that emission order stays subscription order.
            self.first = others.isEmpty ? nil : others.removeFirst()
        }
    }
}

/// An in-process binding's subscription to its stepper's relay. `unowned` is safe: the
/// coordinator keeps the binding until ``FlowCoordinator`` unbinds it, which unsubscribes it
/// first, and the binding is only reached while the coordinator lives. (The binding holds its
/// stepper, which holds the relay: a strong reference back would be a cycle.)
@FlowActor
struct BindingSubscription {
    weak var coordinator: FlowCoordinator?
    unowned let binding: StepperBinding
}

/// A remote binding's subscription to the relay of its stand-in (a ``RemoteStepper``). The
/// binding does not keep its stand-in, whose steps come by id, so the relay holds the binding;
/// nothing holds the relay back, and a stand-in nobody else keeps goes once it is bound.
@FlowActor
struct RemoteBindingSubscription {
    weak var coordinator: FlowCoordinator?
    let binding: StepperBinding
}

/// Something that emits steps: RxFlow's `Stepper`.
///
/// The coordinator binds a stepper in this order (RXFLOW.md rules 2 and 3): it takes
/// ``initialStep``, subscribes to ``steps``, then calls ``readyToEmitSteps()``.
/// ``NoneStep`` emissions are filtered out.
///
/// A stepper living in another process is represented by a ``RemoteStepper``: its steps come
/// through ``FlowCoordinator/receive(_:from:)`` under its ``stepperID``.
@FlowActor
public protocol Stepper: AnyObject, Sendable {
    /// The stepper's identity on the bus: the id remote processes send steps under, the key
    /// of bindings and counters. Defaults to a unique `TypeName@address` string.
    var stepperID: String { get }
    /// The relay the stepper emits on (declare `let steps = StepRelay()`).
    var steps: StepRelay { get }
    /// The first step, taken before subscribing; ``NoneStep`` by default.
    var initialStep: any Step { get }
    /// Called once the coordinator listens to ``steps``; a no-op by default.
    func readyToEmitSteps()
}

extension Stepper {
    /// A unique id for in-process steppers: `TypeName@0x…`.
    public var stepperID: String {
        let address = UInt(bitPattern: ObjectIdentifier(self).hashValue)
        return "\(type(of: self))@0x" + String(address, radix: 16)
    }

    /// ``NoneStep``.
    public var initialStep: any Step { NoneStep() }

    /// Does nothing.
    public func readyToEmitSteps() {}
}

/// Marks a stepper whose steps arrive from another process through
/// ``FlowCoordinator/receive(_:from:)``. Only bindings of such steppers accept remote steps:
/// a remote process cannot impersonate an in-process stepper.
@FlowActor
public protocol RemoteSteppable: Stepper {}

/// A stepper that is a process elsewhere on the bus, identified by its stepper id
/// (`RemoteStepper(id: "movie/23452")`). Its initial step is ``NoneStep``; its steps are the
/// ones the runtime hands to ``FlowCoordinator/receive(_:from:)``.
///
/// A coordinator does not keep it once bound (the binding is known by the id): a screen bound
/// to a remote stepper costs no stand-in object. Steps accepted on one somebody keeps still reach
/// its bindings. It is its own relay, so that making one costs one allocation, not two.
public final class RemoteStepper: StepRelay, RemoteSteppable {
    /// The id the remote process publishes under.
    public nonisolated let stepperID: String
    /// Also usable in-process (tests, bridges): steps accepted here go through the same gate.
    public var steps: StepRelay { self }

    /// Creates the stand-in for a remote stepper.
    /// - Parameter id: the stepper id the remote process uses.
    public init(id: String) {
        self.stepperID = id
        super.init()
    }
}

/// Emits one step, as its initial step, and nothing else.
public final class OneStepper: Stepper {
    /// The relay (never used: the only step is the initial one).
    public let steps = StepRelay()
    /// The single step.
    public let initialStep: any Step

    /// Creates a stepper emitting exactly `singleStep`.
    public init(withSingleStep singleStep: any Step) {
        self.initialStep = singleStep
    }
}

/// A ``OneStepper`` emitting `CanonicalStep/home`: what `coordinate(flow:)` uses by default.
/// (RxFlow's `DefaultStepper` emits `RxFlowStep.home`; the FlowBus home step is canonical so
/// declared flows see it by name and typed flows decode it like any bus step.)
public final class DefaultStepper: Stepper {
    /// The relay (never used).
    public let steps = StepRelay()
    /// `CanonicalStep/home`.
    public var initialStep: any Step { CanonicalStep.home }

    /// Creates the default stepper.
    public init() {}
}

/// A stepper that never emits.
public final class NoneStepper: Stepper {
    /// The relay (never used).
    public let steps = StepRelay()

    /// Creates a silent stepper.
    public init() {}
}

/// Combines steppers, in RxFlow's exact order: when the coordinator calls its
/// ``readyToEmitSteps()``, it emits every inner ``Stepper/initialStep`` in array order, then
/// subscribes to all inner relays (merged), then calls each inner `readyToEmitSteps()` in
/// array order. Its own ``initialStep`` is ``NoneStep``.
public final class CompositeStepper: Stepper {
    /// The merged relay.
    public let steps = StepRelay()
    private let innerSteppers: [any Stepper]
    private var started = false

    /// Creates a composite of `steppers`.
    public init(steppers: [any Stepper]) {
        self.innerSteppers = steppers
    }

    /// Emits the inner initial steps, merges the inner relays, readies the inner steppers.
    /// Only the first call has an effect.
    public func readyToEmitSteps() {
        guard !started else { return }
        started = true
        for stepper in innerSteppers {
            steps.accept(stepper.initialStep)
        }
        for stepper in innerSteppers {
            stepper.steps.subscribe { [weak self] step in self?.steps.accept(step) }
        }
        for stepper in innerSteppers {
            stepper.readyToEmitSteps()
        }
    }
}
