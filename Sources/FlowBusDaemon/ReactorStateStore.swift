import FlowBusConfiguration
import FlowBusWire
import Logging

/// A reactor's state as read back from the store.
public struct PersistedReactorState: Sendable {
    public var sequence: UInt64
    /// Nil when the saved bytes no longer decode as FBV (the reactor then starts afresh, with the
    /// sequence continued).
    public var state: WireValue?
    public var problem: String?

    public init(sequence: UInt64, state: WireValue?, problem: String?) {
        self.sequence = sequence
        self.state = state
        self.problem = problem
    }

    /// Decodes a saved state's bytes (FBV).
    public init(sequence: UInt64, bytes: [UInt8]) {
        do {
            self.init(sequence: sequence, state: try FBV.decode(bytes), problem: nil)
        } catch {
            self.init(sequence: sequence, state: nil, problem: "\(error)")
        }
    }
}

/// One state to save: the last of its reactor in a commit.
public struct ReactorStateRecord: Sendable {
    public var reactorID: String
    public var sequence: UInt64
    /// The state, encoded as FBV.
    public var bytes: [UInt8]

    public init(reactorID: String, sequence: UInt64, bytes: [UInt8]) {
        self.reactorID = reactorID
        self.sequence = sequence
        self.bytes = bytes
    }
}

/// A step a hosted reactor published as a stepper, saved in the commit of the states its action
/// caused and kept until flowd acknowledges it: a host killed before that sends it again when it
/// restarts (or its standby takes over), with the same source and sequence, and flowd applies it once.
public struct SavedStep: Sendable, Hashable {
    public var stepperID: String
    /// The stepper's source id, which the store keeps (``SavedStepper``).
    public var source: String
    public var sequence: UInt64
    public var name: String
    /// The step's params, encoded as FBV.
    public var params: [UInt8]
    /// The W3C trace context of the action that caused it, if it was traced.
    public var traceparent: String?
    public var tracestate: String?

    public init(
        stepperID: String, source: String, sequence: UInt64, name: String, params: [UInt8], traceparent: String? = nil,
        tracestate: String? = nil
    ) {
        self.stepperID = stepperID
        self.source = source
        self.sequence = sequence
        self.name = name
        self.params = params
        self.traceparent = traceparent
        self.tracestate = tracestate
    }
}

/// What the store knows of one stepper of the host's reactors: its source id (made once, at its
/// first step, so that a store started afresh never reuses one flowd knows), the last sequence
/// it gave out, and its steps flowd had not acknowledged, oldest first.
public struct SavedStepper: Sendable, Hashable {
    public var source: String
    public var lastSequence: UInt64
    public var unacknowledged: [SavedStep]

    public init(source: String, lastSequence: UInt64, unacknowledged: [SavedStep]) {
        self.source = source
        self.lastSequence = lastSequence
        self.unacknowledged = unacknowledged
    }

    /// Adds a step read back to its stepper's, in the order read (a store reads them oldest
    /// first); a step of a source the stepper no longer has cannot be sent again as it was.
    public static func add(_ step: SavedStep, to steppers: inout [String: SavedStepper]) {
        guard steppers[step.stepperID]?.source == step.source else { return }
        steppers[step.stepperID]?.unacknowledged.append(step)
    }
}

/// Where a reactor host keeps the last state and sequence of each persisted reactor, and the last
/// sequence dealt with per source (the de-duplication table): the SQLite `ReactorStateDatabase` (FlowBusReactorHost)
/// on the machine's disk, or a PostgreSQL store several instances of the host share
/// (``SharedReactorStateStore``). Both obey the same rules: one transaction per commit, states and
/// sources together; a source not heard for `sourceRetention` (7 days) is forgotten.
///
/// Calls block the calling thread (the host's I/O thread) until the store answered.
public protocol ReactorStateStore: AnyObject, Sendable {
    /// Where it is, for messages: a file path or a PostgreSQL address without its password.
    var location: String { get }
    /// The last sequence of each of `sources` the de-duplication table holds, in one read.
    func lastSequences(of sources: [String]) throws -> [String: UInt64]
    /// Every saved reactor state, and how many sources the de-duplication table holds (entries
    /// older than the retention are deleted first; the others are read when their source is next heard).
    func load() throws -> (states: [String: PersistedReactorState], sources: Int)
    /// Saves states and de-duplication entries (a source's sequence only ever rises) in one transaction.
    func save(states: [ReactorStateRecord], sources: [String: UInt64]) throws
    /// Whether it keeps the host's steps until flowd acknowledges them (both of FlowBus's stores
    /// do): otherwise they wait in the host's memory.
    var keepsSteps: Bool { get }
    /// The host's steppers, by stepper id, with the steps flowd had not acknowledged.
    func loadSteppers() throws -> [String: SavedStepper]
    /// Saves states, de-duplication entries and the steps they caused in one transaction, and
    /// forgets the steps flowd acknowledged (`acknowledged`: source → its last sequence acknowledged).
    func save(
        states: [ReactorStateRecord], sources: [String: UInt64], steps: [SavedStep], acknowledged: [String: UInt64]
    ) throws
    /// Closes it.
    func close()
}

extension ReactorStateStore {
    /// How long a source that sent nothing is remembered (its de-duplication entry).
    public static var sourceRetention: Double { 7 * 24 * 3600 }

    /// A store that keeps no steps: none to send again.
    public func loadSteppers() throws -> [String: SavedStepper] { [:] }

    /// A store that keeps no steps saves the rest: its host's steps wait in memory for flowd's
    /// ack, as a host without a store's do.
    public func save(
        states: [ReactorStateRecord], sources: [String: UInt64], steps: [SavedStep], acknowledged: [String: UInt64]
    ) throws {
        try save(states: states, sources: sources)
    }

    public var keepsSteps: Bool { false }
}

/// A state store the instances of a reactor host share, one of them active: only the holder of
/// its lease saves, so only it acknowledges and publishes.
public protocol SharedReactorStateStore: ReactorStateStore, LeasedStore {}

/// Opens the store `persistence.postgres` names for reactor host `hostName` (FlowBusPostgres
/// provides one).
public typealias ReactorStateStoreOpener =
    @Sendable (_ persistence: ReactorPersistenceSpec, _ hostName: String, Logger) async throws ->
    any SharedReactorStateStore
