import FlowBusWire

/// The identity of one coordinated flow: its name (e.g. `WishlistFlow`) and an instance
/// number, counted per name from 1 by the coordinator, so two instances of one flow type are
/// told apart (`WishlistFlow#1`, `WishlistFlow#2`). Events and snapshots carry `FlowID`s, never
/// flow objects, so publishing an event never keeps a flow alive.
public struct FlowID: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The flow's name (``Flow/flowName``).
    public var name: String
    /// The instance number among the flows of that name in one coordinator.
    public var instance: Int

    /// Creates a flow id.
    public init(name: String, instance: Int) {
        self.name = name
        self.instance = instance
    }

    /// `WishlistFlow#1`.
    public var description: String { "\(name)#\(instance)" }

    /// Orders by name, then instance.
    public static func < (lhs: FlowID, rhs: FlowID) -> Bool {
        (lhs.name, lhs.instance) < (rhs.name, rhs.instance)
    }
}

/// A navigation area, as in RxFlow: it reacts to steps by changing the navigation tree and
/// telling the coordinator what produces the next steps.
///
/// ```swift
/// final class WishlistFlow: Flow {
///     let stack = NavigationStack(id: "wishlist")
///     var root: any Presentable { stack }
///
///     func navigate(to step: any Step) -> FlowContributors {
///         guard let step = step as? AppStep else { return .none }
///         switch step {
///         case .moviePicked(let id):
///             let screen = Screen(id: "wishlist/movie/\(id)")
///             stack.push(screen)
///             return .one(flowContributor: .contribute(withNextPresentable: screen,
///                                                      withNextStepper: RemoteStepper(id: screen.presentableID)))
///         default: return .none
///         }
///     }
/// }
/// ```
///
/// A conforming class is isolated to ``FlowActor`` (inferred from the protocol), so it may hold
/// mutable state. A declared (table-driven) flow works on ``CanonicalStep`` directly: its
/// `navigate` looks the step's `CanonicalStep/name` up in a table.
@FlowActor
public protocol Flow: Presentable {
    /// The flow's root presentable. Must return the same instance every time.
    var root: any Presentable { get }

    /// Reacts to a step: changes the tree, returns what contributes next steps.
    func navigate(to step: any Step) -> FlowContributors

    /// Transforms a step before navigation (default: identity). A thrown error turns the step
    /// into ``NoneStep`` (RXFLOW.md rule 5) and is reported as a `flow-error` diagnostic.
    /// FlowBus runs adapts strictly one at a time in arrival order (no overtaking).
    func adapt(step: any Step) async throws -> any Step

    /// Whether ``adapt(step:)`` may do more than return its step. The default, true, keeps this
    /// flow's steps on the coordinator's asynchronous path. A flow whose `adapt` is the identity
    /// (the default implementation) returns false: the coordinator skips `adapt` and processes
    /// its steps synchronously, on the thread that received them (flowd's fast path).
    var adaptsSteps: Bool { get }

    /// The name used in ``FlowID``s and events; defaults to the type's name.
    var flowName: String { get }

    /// Decodes a step from the bus for this flow; `nil` if the flow does not know it (reported
    /// as `unknown-step`). The default returns the canonical step itself, which is what a
    /// declared flow wants. A decoder registered with
    /// ``FlowCoordinator/setStepDecoder(_:forFlowNamed:)`` takes precedence.
    func step(from canonical: CanonicalStep) -> (any Step)?
}

extension Flow {
    /// The root's node: a flow's visibility is its root's.
    public var navigationNode: NavigationNode { root.navigationNode }

    /// Identity.
    public func adapt(step: any Step) async throws -> any Step { step }

    /// True: `adapt(step:)` is awaited for every step unless the flow says otherwise.
    public var adaptsSteps: Bool { true }

    /// The type's name.
    public var flowName: String { String(describing: type(of: self)) }

    /// The canonical step itself.
    public func step(from canonical: CanonicalStep) -> (any Step)? { canonical }
}
