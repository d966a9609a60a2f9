import FlowBusClient
import FlowBusConfiguration
import FlowBusTools
import FlowBusWire
import Foundation
import Reactors
import Synchronization
import Testing

/// How strictly a test store or a trace checks what it receives.
public enum Exhaustivity: Sendable, Hashable {
    /// Every state or event must be asserted, in order: an extra or a missing one fails, and
    /// nothing may be left unasserted (or, in a ``ReactorTestStore``, running) at the end.
    case on
    /// Asserted states or events must appear in order; others in between are skipped.
    case off
}

/// Exhaustive tests for a reactor, in the style of TCA's TestStore.
///
/// ```swift
/// let store = ReactorTestStore(CounterReactor())
/// await store.send(.increase, CounterState(value: 0, isLoading: true))
/// await store.receive(CounterState(value: 1, isLoading: true), CounterState(value: 1, isLoading: false))
/// await store.finish()
/// ```
/// `send` asserts the states the action produces at once; `receive` asserts later ones (from
/// asynchronous mutations). A state nobody asserted, or mutation work still running at `finish`,
/// fails the test (with ``Exhaustivity/on``, the default).
public final class ReactorTestStore<R: Reactor>: Sendable where R.State: Equatable {
    /// The store under test.
    public let store: ReactorStore<R>
    private let exhaustivity: Exhaustivity
    private let pending = LockedQueue<R.State>()

    /// Starts `reactor`; its initial state is taken as asserted.
    public init(_ reactor: R, exhaustivity: Exhaustivity = .on) {
        store = ReactorStore(reactor)
        self.exhaustivity = exhaustivity
        let pending = self.pending
        let initial = store.currentSnapshot.sequence
        store.observe { snapshot in
            // observe starts with the current state, which the test did not cause.
            guard snapshot.sequence > initial else { return }
            pending.append(snapshot.state)
        }
    }

    deinit {
        store.shutdown()
    }

    /// The reactor's current state.
    public var state: R.State { store.currentState }

    /// Sends `action` and asserts that the states it produces synchronously are `expected`, in order.
    public func send(
        _ action: R.Action, _ expected: R.State..., sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        await store.sendAndWait(action)
        await assertNext(expected, timeout: .zero, what: "after sending \(action)", sourceLocation: sourceLocation)
    }

    /// Asserts that the next states (e.g. from asynchronous mutations) are `expected`, waiting up to `timeout`.
    public func receive(
        _ expected: R.State..., timeout: Duration = .seconds(2), sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        await assertNext(expected, timeout: timeout, what: "received", sourceLocation: sourceLocation)
    }

    /// Fails the test if states were left unasserted or mutation work is still running after `timeout`.
    public func finish(timeout: Duration = .seconds(2), sourceLocation: SourceLocation = #_sourceLocation) async {
        let deadline = ContinuousClock.now + timeout
        while store.hasWorkInFlight, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(1))
        }
        if store.hasWorkInFlight, exhaustivity == .on {
            Issue.record(
                "mutation work is still running at the end of the test: assert its states with receive, or cancel it",
                sourceLocation: sourceLocation)
        }
        let left = pending.drain()
        if !left.isEmpty, exhaustivity == .on {
            Issue.record("\(left.count) state(s) were not asserted: \(left)", sourceLocation: sourceLocation)
        }
    }

    private func assertNext(
        _ expected: [R.State], timeout: Duration, what: String, sourceLocation: SourceLocation
    ) async {
        let deadline = ContinuousClock.now + timeout
        var matched = 0
        while matched < expected.count {
            let next = pending.popFirst()
            guard let next else {
                if ContinuousClock.now >= deadline {
                    Issue.record(
                        "\(what): expected \(expected[matched...]), but no further state arrived within \(timeout)",
                        sourceLocation: sourceLocation)
                    return
                }
                try? await Task.sleep(for: .milliseconds(1))
                continue
            }
            if next == expected[matched] {
                matched += 1
            } else if exhaustivity == .on {
                Issue.record(
                    "\(what): state \(matched + 1) is \(next), expected \(expected[matched])",
                    sourceLocation: sourceLocation)
                return
            }
        }
    }
}

/// The same exhaustive style against a reactor running in another process, over the bus.
///
/// Works from one thread (it owns a `ReactorView`). States are decoded into `State`.
public final class RemoteReactorTestStore<State: Decodable & Equatable> {
    private let view: ReactorView
    private let exhaustivity: Exhaustivity
    /// The snapshot the view joined with.
    public private(set) var snapshot: (sequence: UInt64, state: State)?

    /// Connects a view to `reactorID` of `config` and takes its snapshot as the starting point.
    public init(
        reactorID: String, config: FlowBusConfig, as type: State.Type = State.self, exhaustivity: Exhaustivity = .on,
        timeout: Duration = .seconds(10), sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        view = try ReactorView(reactorID: reactorID, config: config)
        self.exhaustivity = exhaustivity
        snapshot = try view.next(State.self, timeout: timeout)
        if snapshot == nil {
            Issue.record(
                "no snapshot of \(reactorID) within \(timeout): is its reactor host running?",
                sourceLocation: sourceLocation)
        }
    }

    /// Sends an action (name and params), waits for its acknowledgement, and asserts the states that follow.
    public func send(
        _ name: String, _ params: WireParams = [:], expecting expected: [State], timeout: Duration = .seconds(5),
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let sequence = try view.send(name, params)
        if try !view.waitForAcknowledgement(timeout: timeout) {
            Issue.record("action \(name) was not acknowledged within \(timeout)", sourceLocation: sourceLocation)
        }
        if let refusal = view.refusal(for: sequence) {
            Issue.record("action \(name) was refused: \(refusal.reason.rawValue)", sourceLocation: sourceLocation)
            return
        }
        try receive(expected, timeout: timeout, sourceLocation: sourceLocation)
    }

    /// Asserts the next states, waiting up to `timeout` for them.
    public func receive(
        _ expected: [State], timeout: Duration = .seconds(5), sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let deadline = ContinuousClock.now + timeout
        var matched = 0
        while matched < expected.count {
            guard let next = try view.next(State.self, timeout: ContinuousClock.now.duration(to: deadline)) else {
                Issue.record(
                    "expected \(expected[matched...]), but no further state arrived within \(timeout)",
                    sourceLocation: sourceLocation)
                return
            }
            if next.state == expected[matched] {
                matched += 1
            } else if exhaustivity == .on {
                Issue.record(
                    "state \(next.sequence) is \(next.state), expected \(expected[matched])",
                    sourceLocation: sourceLocation)
                return
            }
        }
    }

    /// Fails the test if another state arrives within `quiet` (with ``Exhaustivity/on``).
    public func finish(quiet: Duration = .milliseconds(300), sourceLocation: SourceLocation = #_sourceLocation) throws {
        guard exhaustivity == .on else { return }
        if let extra = try view.next(State.self, timeout: quiet) {
            Issue.record("state \(extra.sequence) was not asserted: \(extra.state)", sourceLocation: sourceLocation)
        }
    }
}

/// A queue shared between the reactor's serial context and the test.
final class LockedQueue<Element: Sendable>: Sendable {
    private let items = Mutex<[Element]>([])

    func append(_ item: Element) {
        items.withLock { $0.append(item) }
    }

    func popFirst() -> Element? {
        items.withLock { $0.isEmpty ? nil : $0.removeFirst() }
    }

    func drain() -> [Element] {
        items.withLock { items in
            defer { items.removeAll() }
            return items
        }
    }
}
