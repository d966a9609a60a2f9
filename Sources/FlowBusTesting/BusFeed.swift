import FlowBusClient
import FlowBusConfiguration
import FlowBusTools
import FlowBusWire
import Foundation

/// The processes of a topology, watched for unexpected deaths. Shared by the topology and its
/// traces, so that a trace waiting for an event notices a crash at once instead of timing out.
final class ProcessWatch: @unchecked Sendable {
    private let lock = NSLock()
    private var members: [ManagedProcess] = []
    private var reported: Set<ObjectIdentifier> = []

    var processes: [ManagedProcess] { lock.withLock { members } }

    func add(_ process: ManagedProcess) {
        lock.withLock { members.append(process) }
    }

    /// Throws for the first process that died unexpectedly and was not reported yet.
    func check(_ context: @autoclosure () -> String) throws(ProcessDied) {
        let dead = lock.withLock { () -> ManagedProcess? in
            guard
                let process = members.first(where: { $0.diedUnexpectedly && !reported.contains(ObjectIdentifier($0)) })
            else { return nil }
            reported.insert(ObjectIdentifier(process))
            return process
        }
        guard let dead, let termination = dead.termination else { return }
        throw ProcessDied(
            name: dead.name, processIdentifier: dead.processIdentifier, termination: termination,
            outputTail: dead.outputTail(),
            context: context())
    }

    /// Whether `process` was already reported dead.
    func wasReported(_ process: ManagedProcess) -> Bool {
        lock.withLock { reported.contains(ObjectIdentifier(process)) }
    }
}

/// A subscription that also reads heartbeats, to settle: once a heartbeat stamped after a
/// moment has arrived, everything its publisher sent before that moment has arrived too (one
/// connection keeps the publisher's order, and the daemons publish the events of a message
/// before they acknowledge it).
final class BusFeed {
    let subscriber: BusSubscriber
    let watch: ProcessWatch
    let publisher: String
    let heartbeat: Duration
    private var lastHeartbeat: Int64 = .min
    /// Events the feed could not get back (no longer kept by flowd), in words.
    private(set) var missed: [String] = []

    /// A feed of `endpoints` (each instance's). With `resuming`, flowd's events are resumed
    /// (PROTOCOL.md §4.6): none is missed from the first heartbeat on, across drops and takeovers.
    init(
        endpoints: [String], topics: [String], config: FlowBusConfig, publisher: String, watch: ProcessWatch,
        timeout: Duration, resuming: EventResumption? = nil
    ) throws {
        let endpoint = FlowBusConfig.either(endpoints)
        subscriber = try BusSubscriber(
            endpoints: endpoints, topics: topics, includeHeartbeats: true, curve: config.curve, resuming: resuming)
        self.watch = watch
        self.publisher = publisher
        heartbeat = .milliseconds(config.heartbeatMilliseconds)
        subscriber.onFallback = { [unowned self] fallback in
            missed.append(
                "events \(fallback.since + 1)…\(fallback.head) are missed: \(fallback.reason) (flowd keeps events from \(fallback.oldest))"
            )
        }
        let deadline = ContinuousClock.now + timeout
        while try !subscriber.waitUntilConnected(
            timeout: min(.milliseconds(100), ContinuousClock.now.duration(to: deadline)))
        {
            try watch.check("while a trace waited to connect to \(publisher)")
            guard ContinuousClock.now < deadline else {
                throw HarnessError(
                    .timedOut,
                    "no heartbeat from \(publisher) on \(endpoint) within \(readable(timeout)): is it running?")
            }
        }
    }

    /// The next message other than a heartbeat, or nil after `timeout`; checks the processes
    /// every 50 ms while it waits.
    func next(timeout: Duration, _ context: @autoclosure () -> String) throws -> BusSubscriber.Received? {
        let deadline = ContinuousClock.now + timeout
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            // At least 1 ms: a zero timeout would not even look at what has arrived.
            if let received = try subscriber.next(timeout: max(.milliseconds(1), min(left, .milliseconds(50)))) {
                guard case .message(.heartbeat(let beat)) = received else { return received }
                // Only once nothing is held back for a replay does a heartbeat say all before it arrived.
                if subscriber.isCaughtUp { lastHeartbeat = max(lastHeartbeat, beat.envelope.timestamp) }
            }
            try watch.check(context())
            if left <= .zero { return nil }
        }
    }

    /// Reads until a heartbeat sent after now has arrived, handing every other message to `take`.
    ///
    /// When no heartbeat comes for 3 intervals and half a second while the test has stopped a
    /// process, the publisher is taken as stopped: what is still queued is read, and that is all.
    func settle(_ context: @autoclosure () -> String, take: (BusSubscriber.Received) throws -> Void) throws {
        let mark = Envelope.now()
        let timeout = max(.seconds(5), heartbeat * 10)
        let start = ContinuousClock.now
        let deadline = start + timeout
        let silence = start + heartbeat * 3 + .milliseconds(500)
        while lastHeartbeat <= mark {
            let now = ContinuousClock.now
            if now >= silence, watch.processes.contains(where: { $0.wasStopped && !$0.isRunning }) {
                while let received = try next(timeout: .milliseconds(100), context()) { try take(received) }
                return
            }
            guard now < deadline else {
                try watch.check(context())
                throw HarnessError(
                    .timedOut,
                    "no heartbeat from \(publisher) within \(readable(timeout)) \(context()): is it still running?")
            }
            if let received = try next(timeout: .milliseconds(50), context()) { try take(received) }
        }
    }
}
