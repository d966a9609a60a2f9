import FlowBusClient
import FlowBusConfiguration
import FlowBusTools
import FlowBusWire
import Foundation
import Testing

/// One didNavigate event, or the expectation of one: a flow and a step, written
/// `"WishlistFlow.moviePicked(withMovieId: 23452)"`.
///
/// The step is written as Swift writes the enum case (`MessageFormatter.step(_:_:)`): its name,
/// then its params sorted by key, strings in quotes. Spaces outside quotes do not matter. A
/// presentable id after ` @ ` (`"MainFlow.apiKeyIsComplete @ apikey"`) must match too; without
/// it, any presentable matches. Flow names containing a `.` need `init(flow:step:presentable:)`.
public struct Navigation: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The flow that navigated.
    public var flow: String
    /// The step, e.g. `moviePicked(withMovieId: 23452)`.
    public var step: String
    /// The presentable the event names; in an expectation, nil matches any.
    public var presentable: String?

    public init(flow: String, step: String, presentable: String? = nil) {
        self.flow = flow
        self.step = step
        self.presentable = presentable
    }

    /// A step given by name and params.
    public init(flow: String, step name: String, _ params: WireParams, presentable: String? = nil) {
        self.init(flow: flow, step: MessageFormatter.step(name, params), presentable: presentable)
    }

    /// A step given as a Swift enum case, through its Codable form (`.moviePicked(withMovieId: 1)`).
    public init(flow: String, step: some Encodable, presentable: String? = nil) throws {
        let form = try canonicalForm(step)
        self.init(flow: flow, step: form.name, form.params, presentable: presentable)
    }

    /// Parses `"Flow.step"` or `"Flow.step @ presentable"`.
    public init(stringLiteral text: String) {
        var body = Substring(text)
        var presentable: String?
        if let at = body.range(of: " @ ", options: .backwards) {
            presentable = String(body[at.upperBound...]).trimmingCharacters(in: .whitespaces)
            body = body[..<at.lowerBound]
        }
        if let dot = body.firstIndex(of: ".") {
            self.init(
                flow: String(body[..<dot]), step: String(body[body.index(after: dot)...]), presentable: presentable)
        } else {
            // Not Flow.step: kept whole, so that it matches nothing and the failure shows it.
            self.init(flow: String(body), step: "", presentable: presentable)
        }
    }

    /// The event a didNavigate message describes.
    public init(_ event: NavigationEventMessage) {
        self.init(flow: event.flow, step: event.stepName, event.params, presentable: event.presentableID)
    }

    /// Whether `event` is what this expectation describes.
    public func matches(_ event: Navigation) -> Bool {
        flow == event.flow && Self.normalized(step) == Self.normalized(event.step)
            && (presentable == nil || presentable == event.presentable)
    }

    public var description: String {
        "\(flow).\(step)" + (presentable.map { " @ \($0)" } ?? "")
    }

    /// The step without spaces outside quoted strings.
    static func normalized(_ step: String) -> String {
        var result = ""
        var quoted = false
        var escaped = false
        for character in step {
            if quoted {
                if escaped {
                    escaped = false
                } else if character == "\\" {
                    escaped = true
                } else if character == "\"" {
                    quoted = false
                }
            } else if character == "\"" {
                quoted = true
            } else if character.isWhitespace {
                continue
            }
            result.append(character)
        }
        return result
    }
}

/// flowd's navigation as a test sees it: every didNavigate event and every diagnostic it
/// publishes, in order, from the moment the trace connected.
///
/// ```swift
/// let trace = try topology.navigationTrace()
/// try topology.step("apiKeyIsComplete", as: "apikey")
/// try trace.expect(["MainFlow.apiKeyIsComplete", "WishlistFlow.movieList", "WatchedFlow.movieList"])
/// try topology.step("moviePicked", ["withMovieId": 7], as: "watched/movies")   // a hidden tab
/// try trace.expectDiagnostic(.notVisible, stepper: "watched/movies")
/// try trace.expectNothingMore()
/// ```
/// With ``Exhaustivity/on`` (the default), ``expect(_:exhaustivity:ignoring:timeout:sourceLocation:)``
/// asserts the very next navigations, so any extra or missing one fails with a diff, and
/// ``expectNothingMore(sourceLocation:)`` — called for every trace when `withTopology(_:sourceLocation:_:)`
/// ends — fails on anything received but not asserted. With ``Exhaustivity/off`` the expected
/// navigations must come in order, with others allowed in between.
///
/// Every wait is bounded, and stops early with ``ProcessDied`` when a process of the topology
/// ends unexpectedly. A trace owns a socket: use it from one thread.
public final class NavigationTrace {
    /// How ``expect(_:exhaustivity:ignoring:timeout:sourceLocation:)`` matches unless told otherwise.
    public let exhaustivity: Exhaustivity
    /// Every navigation received, asserted or not, in order.
    public private(set) var navigations: [Navigation] = []
    /// Every diagnostic received, asserted or not, in order.
    public private(set) var diagnostics: [DiagnosticMessage] = []
    private var pendingNavigations: [Navigation] = []
    private var pendingDiagnostics: [DiagnosticMessage] = []
    private var malformed: [String] = []
    /// How many of the feed's fallbacks were reported.
    private var reportedMissed = 0
    private let feed: BusFeed
    private let ignored: (Navigation) -> Bool

    init(
        topology: TestTopology, exhaustivity: Exhaustivity, diagnostics: Bool, ignoring: @escaping (Navigation) -> Bool,
        timeout: Duration
    ) throws {
        self.exhaustivity = exhaustivity
        ignored = ignoring
        let config = topology.config
        // Resumed when flowd keeps events: a trace misses none, even past a high-water mark or a takeover.
        feed = try BusFeed(
            endpoints: config.eventsEndpoints, topics: ["nav/did/"] + (diagnostics ? ["diag/"] : []),
            config: config, publisher: "flowd", watch: topology.watch, timeout: timeout,
            resuming: config.replay.retain > 0
                ? .fromNow(control: config.controlEndpoints, heartbeatMilliseconds: config.heartbeatMilliseconds) : nil)
    }

    /// Navigations received and not asserted yet.
    public var unasserted: [Navigation] { pendingNavigations }
    /// Diagnostics received and not asserted yet.
    public var unassertedDiagnostics: [DiagnosticMessage] { pendingDiagnostics }

    /// Asserts the next navigations, waiting up to `timeout` for them.
    ///
    /// Exhaustive: they are exactly the next ones received (apart from `ignoring`); an extra or
    /// a missing one fails at once, or when `timeout` passes, with a diff of expected against
    /// received. Relaxed: they come in this order, others in between are skipped. Either way the
    /// navigations up to the last expected one count as asserted.
    public func expect(
        _ expected: [Navigation], exhaustivity: Exhaustivity? = nil, ignoring: [Navigation] = [],
        timeout: Duration = .seconds(10),
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        if let bad = expected.first(where: { $0.step.isEmpty }) {
            throw ExpectationFailure(
                "'\(bad.flow)' is not written Flow.step, e.g. \"MainFlow.apiKeyIsComplete\"",
                sourceLocation: sourceLocation)
        }
        let exhaustive = (exhaustivity ?? self.exhaustivity) == .on
        let skip = { (event: Navigation) in ignoring.contains { $0.matches(event) } }
        let outcome = {
            match(expected, in: self.pendingNavigations, exhaustive: exhaustive, skip: skip) { $0.matches($1) }
        }
        let firstDiagnostic = diagnostics.count
        let deadline = ContinuousClock.now + timeout
        var result = outcome()
        var explanation: DiagnosticMessage?
        while result == .incomplete, ContinuousClock.now < deadline {
            // Exhaustive: a refusal of a step still awaited explains the miss; waiting on is pointless.
            if exhaustive, let refusal = refusal(ofAwaited: expected, skip: skip, since: firstDiagnostic) {
                explanation = refusal
                break
            }
            if let received = try feed.next(
                timeout: ContinuousClock.now.duration(to: deadline), "while waiting for \(expected.count) navigation(s)"
            ) {
                take(received)
                result = outcome()
            }
        }
        if case .matched(let through) = result {
            pendingNavigations.removeFirst(through + 1)
            return
        }
        // Whatever flowd published until now belongs in the diff.
        try? feed.settle("while completing a failed expectation") { take($0) }
        let diff = renderDiff(
            expected: expected, actual: pendingNavigations, exhaustive: exhaustive, skip: skip,
            matches: { $0.matches($1) },
            describeExpected: \.description, describeActual: \.description)
        let why =
            if let explanation {
                "flowd refused a step the trace awaits (\(explanation.reason.rawValue))"
            } else if result == .mismatch {
                "the navigation trace differs"
            } else {
                "expected navigations did not all arrive within \(readable(timeout))"
            }
        let meanwhile = diagnostics.dropFirst(firstDiagnostic).map { "  ! \(MessageFormatter.line(.diagnostic($0)))" }
        let received =
            meanwhile.isEmpty
            ? "\ndiagnostics received meanwhile: none"
            : "\ndiagnostics received meanwhile:\n" + meanwhile.joined(separator: "\n")
        throw ExpectationFailure(
            "\(why) (\(exhaustive ? "exhaustive" : "in order, others skipped")):\n\(diff)\(received)",
            sourceLocation: sourceLocation)
    }

    /// A diagnostic received since `index` that refuses the step of the first expected
    /// navigation not received yet (same step, and same flow when it names one).
    private func refusal(
        ofAwaited expected: [Navigation], skip: (Navigation) -> Bool, since index: Int
    ) -> DiagnosticMessage? {
        let received = pendingNavigations.filter { !skip($0) }
        var position = 0
        for navigation in received where position < expected.count && expected[position].matches(navigation) {
            position += 1
        }
        guard position < expected.count else { return nil }
        let awaited = expected[position]
        return diagnostics.dropFirst(index).first { diagnostic in
            guard let step = diagnostic.details["step"]?.stringValue,
                Navigation.normalized(step) == Navigation.normalized(awaited.step)
            else { return false }
            return diagnostic.details["flow"]?.stringValue.map { $0 == awaited.flow } ?? true
        }
    }

    /// Asserts that the next diagnostic (exhaustive), or the next one with this reason (relaxed:
    /// others before it are skipped), has `reason`, and names `stepper` if given; waits up to `timeout`.
    /// - Returns: the diagnostic, for its details.
    @discardableResult
    public func expectDiagnostic(
        _ reason: DiagnosticReason, stepper: String? = nil, exhaustivity: Exhaustivity? = nil,
        timeout: Duration = .seconds(10),
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> DiagnosticMessage {
        let exhaustive = (exhaustivity ?? self.exhaustivity) == .on
        let wanted = "\(reason.rawValue)\(stepper.map { " from stepper \($0)" } ?? "")"
        let matches = { (diagnostic: DiagnosticMessage) in
            diagnostic.reason == reason && (stepper == nil || diagnostic.details["stepper"]?.stringValue == stepper)
        }
        let deadline = ContinuousClock.now + timeout
        while true {
            if let index = pendingDiagnostics.firstIndex(where: matches), !exhaustive || index == 0 {
                let diagnostic = pendingDiagnostics[index]
                pendingDiagnostics.removeFirst(index + 1)
                return diagnostic
            }
            if exhaustive, let first = pendingDiagnostics.first {
                throw ExpectationFailure(
                    "expected diagnostic \(wanted), but the next one is:\n  \(MessageFormatter.line(.diagnostic(first)))",
                    sourceLocation: sourceLocation)
            }
            guard ContinuousClock.now < deadline else { break }
            if let received = try feed.next(
                timeout: ContinuousClock.now.duration(to: deadline), "while waiting for diagnostic \(wanted)")
            {
                take(received)
            }
        }
        let seen = pendingDiagnostics.map { "  \(MessageFormatter.line(.diagnostic($0)))" }
        throw ExpectationFailure(
            "expected diagnostic \(wanted) within \(readable(timeout)); unasserted diagnostics: \(seen.isEmpty ? "none" : "\n" + seen.joined(separator: "\n"))",
            sourceLocation: sourceLocation)
    }

    /// Waits until everything flowd published so far has arrived (a heartbeat sent after this
    /// call), then fails if a navigation or diagnostic was received and not asserted (and
    /// counts those as reported).
    ///
    /// It covers what flowd did before the call: a step acknowledged before it, and all its
    /// consequences. Steps another process publishes later are not waited for.
    public func expectNothingMore(sourceLocation: SourceLocation = #_sourceLocation) throws {
        try feed.settle("while checking that nothing more was published") { take($0) }
        var problems: [String] = []
        if feed.missed.count > reportedMissed {
            problems.append(
                "the trace fell back (take flowd's status for the state now):\n"
                    + feed.missed[reportedMissed...].map { "  \($0)" }.joined(separator: "\n"))
            reportedMissed = feed.missed.count
        }
        if !malformed.isEmpty {
            problems.append(
                "malformed messages on flowd's events endpoint:\n" + malformed.map { "  \($0)" }.joined(separator: "\n")
            )
        }
        if !pendingNavigations.isEmpty {
            problems.append(
                "navigations received but not asserted:\n"
                    + pendingNavigations.map { "  + \($0)" }.joined(separator: "\n"))
        }
        if !pendingDiagnostics.isEmpty {
            problems.append(
                "diagnostics received but not asserted:\n"
                    + pendingDiagnostics.map { "  + \(MessageFormatter.line(.diagnostic($0)))" }.joined(separator: "\n")
            )
        }
        guard problems.isEmpty else {
            // Reported once: the end of the test does not report them again.
            malformed.removeAll()
            pendingNavigations.removeAll()
            pendingDiagnostics.removeAll()
            throw ExpectationFailure(problems.joined(separator: "\n"), sourceLocation: sourceLocation)
        }
    }

    /// Reads what has arrived without waiting (e.g. before looking at ``navigations``).
    public func poll() throws {
        while let received = try feed.next(timeout: .zero, "while reading the navigation trace") { take(received) }
    }

    private func take(_ received: BusSubscriber.Received) {
        switch received {
        case .message(.navigation(let event)) where event.phase == .did:
            let navigation = Navigation(event)
            guard !ignored(navigation) else { return }
            navigations.append(navigation)
            pendingNavigations.append(navigation)
        case .message(.diagnostic(let diagnostic)):
            diagnostics.append(diagnostic)
            pendingDiagnostics.append(diagnostic)
        case .malformed(let error):
            malformed.append("\(error)")
        case .message:
            break
        }
    }
}

extension NavigationTrace: FinishableTrace {
    func finish(sourceLocation: SourceLocation) throws {
        guard exhaustivity == .on else { return }
        try expectNothingMore(sourceLocation: sourceLocation)
    }
}

/// A trace the topology checks when the test ends.
protocol FinishableTrace: AnyObject {
    func finish(sourceLocation: SourceLocation) throws
}
