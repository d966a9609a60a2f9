import FlowBusWire

/// The global actor on which every part of the ``Flows`` engine runs.
///
/// RxFlow runs everything on the main thread; FlowBus runs the whole engine — flows,
/// steppers, the navigation tree and the ``FlowCoordinator`` — on this one serial executor.
/// Types conforming to ``Flow``, ``Stepper`` or ``Presentable`` inherit this isolation, so a
/// flow may keep mutable state without locks, and `navigate(to:)` always runs on the
/// coordinator's own serial context (RXFLOW.md rule 5).
///
/// Its executor is ``FlowLoop/shared``: one thread of its own, which a daemon can also use to
/// read its sockets (``FlowLoopDriver``), so that a step is received, applied and published on
/// one thread without a hop into Swift concurrency.
@globalActor
public actor FlowActor {
    /// The one shared instance.
    public static let shared = FlowActor()

    /// ``FlowLoop/shared``.
    public nonisolated var unownedExecutor: UnownedSerialExecutor {
        FlowLoop.shared.asUnownedSerialExecutor()
    }
}

extension FlowActor {
    /// Runs `operation` as part of ``FlowActor`` from synchronous code that runs on the loop
    /// thread between jobs (a ``FlowLoopDriver``'s turn); traps anywhere else.
    public static func assumeIsolated<T>(_ operation: @FlowActor () throws -> T) rethrows -> T {
        typealias Unisolated = () throws -> T
        shared.preconditionIsolated("FlowActor.assumeIsolated called off the FlowActor loop thread")
        // Safe: the check above proves the caller has the actor's exclusive access.
        return try withoutActuallyEscaping(operation) { isolated in
            try unsafeBitCast(isolated, to: Unisolated.self)()
        }
    }
}
