import FlowBusClient
import FlowBusConfiguration
import FlowBusProtocol
import FlowBusTools
import FlowBusWire
import Foundation
import Testing

/// The states one reactor of a reactor host publishes, as a test sees them: the snapshot it
/// joined with, then every live state in sequence order, decoded as `State`.
///
/// ```swift
/// let counter = try topology.stateTrace(of: "counter", as: CounterState.self)
/// #expect(counter.initial == CounterState(value: 0, isLoading: false))
/// try topology.send("increase", to: "counter")
/// try counter.expect([CounterState(value: 0, isLoading: true), CounterState(value: 1, isLoading: true), CounterState(value: 1, isLoading: false)])
/// ```
/// Exhaustive by default, like ``NavigationTrace``: the expected states must be the very next
/// ones, and ``expectNothingMore(sourceLocation:)`` (called when `withTopology(_:sourceLocation:_:)`
/// ends) fails on states received and not asserted. A gap in the sequence (a state lost) or a
/// state that does not decode as `State` fails the next assertion. A trace owns a socket: use it
/// from one thread.
public final class StateTrace<State: Decodable & Equatable> {
    /// The reactor id followed.
    public let reactorID: String
    /// How ``expect(_:exhaustivity:timeout:sourceLocation:)`` matches unless told otherwise.
    public let exhaustivity: Exhaustivity
    /// The state the reactor had when the trace joined (its snapshot).
    public let initial: State
    /// The sequence of ``initial``.
    public let initialSequence: UInt64
    /// Every live state received since the snapshot, asserted or not, in order.
    public private(set) var states: [State] = []
    private var pending: [State] = []
    private var problems: [String] = []
    /// The host's diagnostics about this reactor's actions, shown in a failure's diff.
    private var refusals: [DiagnosticMessage] = []
    private var last: (source: String, sequence: UInt64)
    private let feed: BusFeed

    init(topology: TestTopology, reactorID: String, exhaustivity: Exhaustivity, timeout: Duration) throws {
        guard let host = topology.config.reactorHost(for: reactorID) else {
            throw HarnessError(
                .notDeclared,
                "no reactor host of the topology serves \(reactorID): list it under reactors.<host>.serves")
        }
        self.reactorID = reactorID
        self.exhaustivity = exhaustivity
        feed = try BusFeed(
            endpoints: host.spec.statesEndpoints, topics: [Topic.state(reactorID), "diag/"], config: topology.config,
            publisher: "reactor host \(host.name)",
            watch: topology.watch, timeout: timeout)
        // The subscription is active: live states from here on arrive on `feed`. The snapshot
        // says where they start (the Clone pattern).
        let view = try ReactorView(reactorID: reactorID, config: topology.config)
        let deadline = ContinuousClock.now + timeout
        var snapshot: ReactorViewState?
        while snapshot == nil {
            snapshot = try view.next(timeout: min(.milliseconds(100), ContinuousClock.now.duration(to: deadline)))
            try topology.watch.check("while a state trace waited for the snapshot of \(reactorID)")
            if snapshot == nil, ContinuousClock.now >= deadline {
                throw HarnessError(
                    .timedOut,
                    "no snapshot of \(reactorID) from reactor host \(host.name) within \(readable(timeout))")
            }
        }
        guard let snapshot else { throw HarnessError(.timedOut, "no snapshot of \(reactorID)") }
        do {
            initial = try snapshot.decode(State.self)
        } catch {
            throw HarnessError(
                .unexpected,
                "the snapshot of \(reactorID) does not decode as \(State.self): \(error)\nit is \(snapshot.state.displayText)"
            )
        }
        initialSequence = snapshot.sequence
        last = (snapshot.envelope.source, snapshot.sequence)
    }

    /// States received and not asserted yet.
    public var unasserted: [State] { pending }

    /// The latest state received (the snapshot if no live state came yet).
    public var latest: State { states.last ?? initial }

    /// Asserts the next states, waiting up to `timeout` for them: exactly the next ones
    /// (exhaustive), or in this order with others skipped (relaxed).
    public func expect(
        _ expected: [State], exhaustivity: Exhaustivity? = nil, timeout: Duration = .seconds(10),
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let exhaustive = (exhaustivity ?? self.exhaustivity) == .on
        let outcome = { match(expected, in: self.pending, exhaustive: exhaustive, skip: { _ in false }, matches: ==) }
        let firstRefusal = refusals.count
        let deadline = ContinuousClock.now + timeout
        var result = outcome()
        // Exhaustive: a refused action of this reactor explains the miss; waiting on is pointless.
        while result == .incomplete, problems.isEmpty, !(exhaustive && refusals.count > firstRefusal),
            ContinuousClock.now < deadline
        {
            if let received = try feed.next(
                timeout: ContinuousClock.now.duration(to: deadline),
                "while waiting for \(expected.count) state(s) of \(reactorID)")
            {
                take(received)
                result = outcome()
            }
        }
        if problems.isEmpty, case .matched(let through) = result {
            pending.removeFirst(through + 1)
            return
        }
        try? feed.settle("while completing a failed expectation") { take($0) }
        let diff = renderDiff(
            expected: expected, actual: pending, exhaustive: exhaustive, skip: { _ in false }, matches: ==,
            describeExpected: { String(describing: $0) }, describeActual: { String(describing: $0) })
        let meanwhile = refusals.dropFirst(firstRefusal).map { "  ! \(MessageFormatter.line(.diagnostic($0)))" }
        let why =
            !problems.isEmpty
            ? problems.joined(separator: "\n")
            : result == .mismatch
                ? "the states of \(reactorID) differ"
                : !meanwhile.isEmpty && exhaustive
                    ? "the reactor host refused an action of \(reactorID)"
                    : "expected states of \(reactorID) did not all arrive within \(readable(timeout))"
        let received =
            "\ndiagnostics received meanwhile:"
            + (meanwhile.isEmpty ? " none" : "\n" + meanwhile.joined(separator: "\n"))
        throw ExpectationFailure(
            "\(why) (\(exhaustive ? "exhaustive" : "in order, others skipped")):\n\(diff)\(received)",
            sourceLocation: sourceLocation)
    }

    /// Waits until everything the host published so far has arrived (a heartbeat sent after
    /// this call), then fails if a state was received and not asserted (and counts those as
    /// reported). States of mutations
    /// still running in the host are not waited for: assert them with ``expect(_:exhaustivity:timeout:sourceLocation:)``.
    public func expectNothingMore(sourceLocation: SourceLocation = #_sourceLocation) throws {
        try feed.settle("while checking that \(reactorID) published nothing more") { take($0) }
        var lines = problems
        if !pending.isEmpty {
            lines.append(
                "states of \(reactorID) received but not asserted:\n"
                    + pending.map { "  + \($0)" }.joined(separator: "\n"))
        }
        guard lines.isEmpty else {
            // Reported once: the end of the test does not report them again.
            problems.removeAll()
            pending.removeAll()
            throw ExpectationFailure(lines.joined(separator: "\n"), sourceLocation: sourceLocation)
        }
    }

    /// Reads what has arrived without waiting (e.g. before looking at ``states``).
    public func poll() throws {
        while let received = try feed.next(timeout: .zero, "while reading the states of \(reactorID)") {
            take(received)
        }
    }

    private func take(_ received: BusSubscriber.Received) {
        if case .message(.diagnostic(let diagnostic)) = received {
            // Refusals quote the topic cut (PROTOCOL.md §8).
            let topic = Refusal.quoted(Topic.action(reactorID))
            if diagnostic.details["topic"]?.stringValue == topic { refusals.append(diagnostic) }
            return
        }
        guard case .message(.state(let message)) = received, message.reactorID == reactorID else {
            if case .malformed(let error) = received {
                problems.append("a malformed message arrived on the states endpoint: \(error)")
            }
            return
        }
        let (source, sequence) = (message.envelope.source, message.envelope.sequence)
        if source == last.source {
            // Already in the snapshot, or a repeat.
            guard sequence > last.sequence else { return }
            if sequence != last.sequence + 1 {
                problems.append(
                    "states of \(reactorID) were lost: the sequence jumped from \(last.sequence) to \(sequence)")
            }
        }
        last = (source, sequence)
        do {
            let state = try WireValueDecoder().decode(State.self, from: message.state)
            states.append(state)
            pending.append(state)
        } catch {
            problems.append(
                "state \(sequence) of \(reactorID) does not decode as \(State.self): \(error); it is \(message.state.displayText)"
            )
        }
    }
}

extension StateTrace: FinishableTrace {
    func finish(sourceLocation: SourceLocation) throws {
        guard exhaustivity == .on else { return }
        try expectNothingMore(sourceLocation: sourceLocation)
    }
}
