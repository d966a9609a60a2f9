import Dispatch
import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusTracing
import FlowBusWire
import Logging
import Reactors
import ZeroMQ

/// The reactors a ``ReactorHostService`` hosts: exact reactor ids (`counter`) and id families
/// (`movie/`, instantiated per id on first use).
///
/// A hosted reactor's `Action` must be `Decodable` (an action arrives as a name and params, the
/// canonical form of a Swift enum: `submit(apiKey: "k")` is name `submit`, params
/// `{apiKey: "k"}`) and its `State` must be `Encodable` (it is published as a wire value).
///
/// ```swift
/// var reactors = ReactorRegistry()
/// reactors.register("counter") { _ in CounterReactor() }
/// reactors.register(family: "movie/") { context in
///     Int(context.memberID).map { MovieDetailReactor(id: $0) }   // nil: no such reactor
/// }
/// reactors.register("login") { context in LoginReactor(steps: context.stepper("apikey")) }
/// ```
public struct ReactorRegistry: Sendable {
    /// A reactor id or a family of them.
    @usableFromInline
    package enum Match: Sendable, Hashable {
        case exact(String)
        case family(String)
    }

    @usableFromInline
    package struct Registration: Sendable {
        package let match: Match
        /// Whether its state can be restored (its `State` is `Decodable`), so it can be persisted.
        package let isRestorable: Bool
        /// Builds the instance, resuming from a saved state when one is given (and restorable).
        package let make: @Sendable (ReactorContext, PersistedReactorState?) -> HostedReactor?

        @usableFromInline
        init(
            match: Match, isRestorable: Bool,
            make: @escaping @Sendable (ReactorContext, PersistedReactorState?) -> HostedReactor?
        ) {
            self.match = match
            self.isRestorable = isRestorable
            self.make = make
        }
    }

    // `register` is inlinable so that the reactor's store and its hosting are specialized in the
    // module that knows the reactor's type.
    @usableFromInline var registrations: [Registration] = []

    /// An empty registry.
    public init() {}

    /// Hosts one reactor under the exact id `reactorID`. The host creates it when it starts, so
    /// its state is current (and answerable by snapshot) before any view asks.
    ///
    /// Its state cannot be persisted (`State` is not `Decodable`): listing it under the host's
    /// `persistence.reactors` is an error at start.
    ///
    /// - Parameters:
    ///   - reactorID: The reactor id, e.g. `counter` (no trailing `/`).
    ///   - make: Builds the reactor; called once, on the host's I/O thread.
    @inlinable
    public mutating func register<R: Reactor>(_ reactorID: String, _ make: @escaping @Sendable (ReactorContext) -> R)
    where R.Action: Decodable, R.State: Encodable {
        precondition(
            !reactorID.isEmpty && !reactorID.hasSuffix("/"),
            "an exact reactor id is not empty and has no trailing '/': use register(family:) for \(reactorID)")
        registrations.append(
            Registration(match: .exact(reactorID), isRestorable: false) { context, _ in
                HostedReactor(make(context), context: context, restoring: nil)
            })
    }

    /// Hosts one reactor whose `State` is `Codable` under the exact id `reactorID`: when the host
    /// persists it (`persistence.reactors` in the config), it resumes from its saved state and
    /// sequence after a restart.
    ///
    /// - Parameters:
    ///   - reactorID: The reactor id, e.g. `counter` (no trailing `/`).
    ///   - make: Builds the reactor; called once, on the host's I/O thread.
    @inlinable
    public mutating func register<R: Reactor>(_ reactorID: String, _ make: @escaping @Sendable (ReactorContext) -> R)
    where R.Action: Decodable, R.State: Codable {
        precondition(
            !reactorID.isEmpty && !reactorID.hasSuffix("/"),
            "an exact reactor id is not empty and has no trailing '/': use register(family:) for \(reactorID)")
        registrations.append(
            Registration(match: .exact(reactorID), isRestorable: true) { context, saved in
                let reactor = make(context)
                return HostedReactor(
                    reactor, context: context, restoring: Self.restore(saved, of: reactor, context: context))
            })
    }

    /// Hosts a family of reactors: every id starting with `prefix` (e.g. `movie/` for `movie/42`).
    /// A member is created on the first action or snapshot request for its id.
    ///
    /// - Parameters:
    ///   - prefix: The family prefix, ending with `/`.
    ///   - make: Builds the member for ``ReactorContext/reactorID``; returns nil when there is no
    ///     such reactor (the request is refused with `unknown-reactor`). Called on the host's I/O
    ///     thread.
    @inlinable
    public mutating func register<R: Reactor>(family prefix: String, _ make: @escaping @Sendable (ReactorContext) -> R?)
    where R.Action: Decodable, R.State: Encodable {
        precondition(prefix.hasSuffix("/") && prefix.count > 1, "a family prefix ends with '/', e.g. movie/")
        registrations.append(
            Registration(match: .family(prefix), isRestorable: false) { context, _ in
                make(context).map { HostedReactor($0, context: context, restoring: nil) }
            })
    }

    /// Hosts a family of reactors whose `State` is `Codable`: when the host persists the family
    /// (`persistence.reactors`), each member resumes from its saved state when it is created again.
    ///
    /// - Parameters:
    ///   - prefix: The family prefix, ending with `/`.
    ///   - make: Builds the member, or returns nil when there is no such reactor.
    @inlinable
    public mutating func register<R: Reactor>(family prefix: String, _ make: @escaping @Sendable (ReactorContext) -> R?)
    where R.Action: Decodable, R.State: Codable {
        precondition(prefix.hasSuffix("/") && prefix.count > 1, "a family prefix ends with '/', e.g. movie/")
        registrations.append(
            Registration(match: .family(prefix), isRestorable: true) { context, saved in
                make(context).map {
                    HostedReactor($0, context: context, restoring: Self.restore(saved, of: $0, context: context))
                }
            })
    }

    /// The snapshot a restored store starts from: the saved state and sequence; or, when the saved
    /// state no longer decodes as `State` (its type changed), the initial state with the next
    /// sequence (logged), so that views never take it for a state they already have.
    @usableFromInline
    static func restore<R: Reactor>(
        _ saved: PersistedReactorState?, of reactor: R, context: ReactorContext
    ) -> StateSnapshot<R.State>?
    where R.State: Decodable {
        guard let saved else { return nil }
        var problem = saved.problem ?? "unreadable"
        if let value = saved.state {
            do {
                return StateSnapshot(
                    sequence: saved.sequence, state: try WireValueDecoder().decode(R.State.self, from: value))
            } catch {
                problem = "\(error)"
            }
        }
        context.logger.error(
            "the saved state of \(context.reactorID) (sequence \(saved.sequence)) cannot be restored (\(problem)): starting from its initial state as sequence \(saved.sequence + 1)"
        )
        return StateSnapshot(sequence: saved.sequence + 1, state: reactor.transform(state: reactor.initialState))
    }

    /// The exact ids registered, in registration order.
    public var exactIDs: [String] {
        registrations.compactMap { if case .exact(let id) = $0.match { id } else { nil } }
    }

    /// The family prefixes registered, in registration order.
    public var familyPrefixes: [String] {
        registrations.compactMap { if case .family(let prefix) = $0.match { prefix } else { nil } }
    }

    /// The registration for `reactorID`: an exact id first, else the longest matching family.
    package func registration(for reactorID: String) -> (Registration, familyPrefix: String?)? {
        if let exact = registrations.first(where: { $0.match == .exact(reactorID) }) { return (exact, nil) }
        var best: (Registration, String)?
        for registration in registrations {
            guard case .family(let prefix) = registration.match, reactorID.hasPrefix(prefix),
                reactorID.count > prefix.count
            else { continue }
            if best.map({ prefix.count > $0.1.count }) ?? true { best = (registration, prefix) }
        }
        return best.map { ($0.0, $0.1) }
    }
}

/// What a reactor factory gets: the reactor's id, a logger, and the steppers it may publish as.
public struct ReactorContext: Sendable {
    /// The whole reactor id, e.g. `movie/42`.
    public let reactorID: String
    /// The family prefix the id matched (`movie/`), nil for an exact id.
    public let familyPrefix: String?
    /// A logger with the reactor id in its metadata.
    public let logger: Logger
    @usableFromInline package let outlet: ReactorHostOutlet

    /// The id after the family prefix (`42` for `movie/42`); the whole id for an exact one.
    public var memberID: String {
        guard let familyPrefix else { return reactorID }
        return String(reactorID.dropFirst(familyPrefix.count))
    }

    /// A handle to publish steps to flowd's ingress as stepper `stepperID` (a reactor that is
    /// also a stepper). Steps go out through the host's I/O thread, in order with the states.
    public func stepper(_ stepperID: String) -> ReactorStepper {
        ReactorStepper(stepperID: stepperID, outlet: outlet)
    }
}

/// Publishes steps as one stepper from inside a hosted reactor (typically from a
/// `Mutations.run(_:)` part of `mutate`). Never blocks; callable from any thread.
///
/// The host owns one DEALER per stepper id, connected to flowd's `ingress`, with its own source id
/// and sequence; flowd acknowledges and de-duplicates as for any stepper.
public struct ReactorStepper: Sendable {
    /// The stepper id (the topic `step/<id>`), bound by a flow contribution in flowd.
    public let stepperID: String
    package let outlet: ReactorHostOutlet

    /// Publishes a step given by name and params.
    public func emit(_ name: String, _ params: WireParams = [:]) {
        outlet.push(.step(stepperID: stepperID, name: name, params: params, trace: BusTracing.messageTrace))
    }

    /// Publishes a Swift enum step through its canonical form (`moviePicked(withId: 1)`).
    /// - Throws: when the value does not encode as one enum case.
    public func emit<S: Encodable>(_ step: S) throws {
        let form = try canonicalForm(step)
        emit(form.name, form.params)
    }
}

/// One running reactor instance behind the bus, its types erased: decodes actions into the
/// reactor's `Action`, and pushes every state (encoded) to the host's outlet in the store's
/// serial context.
@usableFromInline
package final class HostedReactor: Sendable {
    /// Why an action could not be applied.
    @usableFromInline
    package struct Refused: Error {
        package var reason: DiagnosticReason
        package var detail: String

        @usableFromInline
        init(reason: DiagnosticReason, detail: String) {
            self.reason = reason
            self.detail = detail
        }
    }

    package let reactorID: String
    private let apply: @Sendable (String, WireParams) throws(Refused) -> Void
    private let stop: @Sendable () -> Void
    private let busy: @Sendable () -> Bool

    @usableFromInline
    init(
        reactorID: String, apply: @escaping @Sendable (String, WireParams) throws(Refused) -> Void,
        stop: @escaping @Sendable () -> Void, busy: @escaping @Sendable () -> Bool
    ) {
        self.reactorID = reactorID
        self.apply = apply
        self.stop = stop
        self.busy = busy
    }

    // Inlinable, like `ReactorRegistry.register`: an action's decoding, its store and the state's
    // encoding run specialized for `R`.
    @inlinable
    package convenience init<R: Reactor>(
        _ reactor: R, context: ReactorContext, restoring restored: StateSnapshot<R.State>?
    )
    where R.Action: Decodable, R.State: Encodable {
        let reactorID = context.reactorID
        let outlet = context.outlet
        let onFailure = Self.failureHandler(of: reactorID, outlet: outlet, logger: context.logger)
        // A traced action's mutations are spans of its trace (they inherit its task-local trace).
        let onMutation: @Sendable (R.Mutation) -> Void = { Self.traceMutation($0, of: reactorID) }
        let store =
            restored.map {
                ReactorStore(reactor, restoring: $0, onMutationFailure: onFailure, onMutation: onMutation)
            } ?? ReactorStore(reactor, onMutationFailure: onFailure, onMutation: onMutation)
        let encoder = WireValueEncoder()
        // Runs in the store's serial context, in sequence order: the outlet receives every state.
        let subscription = store.observe { snapshot in
            do {
                let value = try Self.wireValue(of: snapshot.state, encoder: encoder)
                Self.push(value, sequence: snapshot.sequence, of: reactorID, to: outlet)
            } catch {
                Self.pushUnencodable(sequence: snapshot.sequence, of: reactorID, error: error, to: outlet)
            }
        }
        // The host saves what an action emitted once `apply` returns: it waits for the action even
        // when a mutation stream's thread is draining the store.
        let processed = DispatchSemaphore(value: 0)
        self.init(
            reactorID: reactorID,
            apply: { (name, params) throws(Refused) in
                store.send(
                    try Self.action(R.Action.self, name: name, params: params, of: reactorID), blockingOn: processed)
            },
            stop: {
                subscription.cancel()
                store.shutdown()
            },
            busy: { store.hasWorkInFlight })
    }

    /// A state's wire form: its own (``WireFormEncodable``, without Codable) or its `Encodable` one.
    @inlinable
    static func wireValue<State: Encodable>(of state: State, encoder: WireValueEncoder) throws -> WireValue {
        // Decided by the type, as the conformance is declared (an optional's wrapped value is not).
        if State.self is any WireFormEncodable.Type, let encodesItself = state as? any WireFormEncodable {
            return encodesItself.wireValue
        }
        return try encoder.encode(state)
    }

    /// An action decoded from its name and params: by its own initializer (``WireFormDecodable``,
    /// without Codable) or by its `Decodable` conformance.
    @inlinable
    static func action<Action: Decodable>(
        _ type: Action.Type, name: String, params: WireParams, of reactorID: String
    ) throws(Refused) -> Action {
        if let decodesItself = Action.self as? any WireFormDecodable.Type {
            do throws(WireError) {
                return try decodesItself.init(wireName: name, params: params) as! Action
            } catch {
                throw Refused(
                    reason: error.reason, detail: describeUnmappable(name, params, of: reactorID, error.detail))
            }
        }
        do {
            return try decodeCanonical(Action.self, name: name, params: params)
        } catch {
            throw Refused(
                reason: .badAction,
                detail: describeUnmappable(name, params, of: reactorID, describe(error, action: name)))
        }
    }

    @usableFromInline
    static func describeUnmappable(
        _ name: String, _ params: WireParams, of reactorID: String, _ why: String
    )
        -> String
    {
        "\(reactorID) cannot map action \(MessageFormatter.step(name, params)): \(why)"
    }

    @usableFromInline
    static func failureHandler(
        of reactorID: String, outlet: ReactorHostOutlet, logger: Logger
    )
        -> @Sendable (any Error) -> Void
    {
        { error in
            outlet.mutationFailed()
            logger.warning("a mutation stream of \(reactorID) failed: \(error)")
        }
    }

    @usableFromInline
    static func traceMutation(_ mutation: some Any, of reactorID: String) {
        guard let trace = BusTracing.messageTrace else { return }
        ReactorSpans.mutation(mutation, of: reactorID, in: trace)
    }

    @usableFromInline
    static func push(_ state: WireValue, sequence: UInt64, of reactorID: String, to outlet: ReactorHostOutlet) {
        outlet.push(.state(reactorID: reactorID, sequence: sequence, state: state, trace: BusTracing.messageTrace))
    }

    @usableFromInline
    static func pushUnencodable(sequence: UInt64, of reactorID: String, error: any Error, to outlet: ReactorHostOutlet)
    {
        outlet.push(.unencodableState(reactorID: reactorID, sequence: sequence, detail: "\(error)"))
    }

    /// Whether an action's work is still running (see `ReactorStore.hasWorkInFlight`).
    package var hasWorkInFlight: Bool { busy() }

    /// Decodes the action and sends it to the store (whose drain may run on the caller's thread).
    package func send(name: String, params: WireParams) throws(Refused) {
        try apply(name, params)
    }

    /// Ends the store and every task it runs.
    package func shutdown() {
        stop()
    }

    @usableFromInline
    package static func describe(_ error: any Error, action: String) -> String {
        guard let decoding = error as? DecodingError else { return "\(error)" }
        if case .keyNotFound(let key, let context) = decoding, context.codingPath.isEmpty {
            return "no action named '\(key.stringValue)'"
        }
        if case .typeMismatch(_, let context) = decoding, context.codingPath.isEmpty {
            return "no action named '\(action)'"
        }
        let described = FlowBusConfig.describe(decoding)
        return described.hasPrefix(action + ".") ? String(described.dropFirst(action.count + 1)) : described
    }
}
