import FlowBusWire
/// The global actor on which every part of the ``Flows`` engine runs.
///
/// RxFlow runs everything on the main thread; FlowBus runs the whole engine — flows,
/// steppers, the navigation tree and the ``FlowCoordinator`` — on this one serial executor.
/// Types conforming to ``Flow``, ``Stepper`` or ``Presentable`` inherit this isolation, so a
/// flow may keep mutable state without locks, and `navigate(to:)` always runs on the
/// coordinator's own serial context (RXFLOW.md rule 5).
@globalActor
public actor FlowActor {
    /// The one shared instance.
    public static let shared = FlowActor()
}
