import ArgumentParser
import FlowBusClient
import FlowBusConfiguration
import FlowBusWire
import Foundation

/// A stepper that publishes N numbered steps and exits 0 only once flowd acknowledged all of
/// them: the load driver of the durability tests (flowd may be killed and restarted meanwhile).
@main
struct StepperLoad: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stepper-load",
        abstract:
            "Publish N steps `NAME {n: 1...N}` as one stepper, resending what flowd loses, and wait for every ack.",
        discussion: """
            Exits 0 once all N steps are acknowledged, 1 if they are not within --timeout after the last one was \
            published. Prints its progress (`published`, `acknowledged`, `resent`) every --progress steps published \
            and every --progress acknowledged, and a \
            `failover` line when acks start coming from another flowd instance: how long acks stopped, from the \
            last one of the old instance to the first of the new.
            """
    )

    @Option(
        name: .shortAndLong,
        help: "The topology file (default: $\(FlowBusConfig.pathVariable), else \(FlowBusConfig.defaultPath)).")
    var config: String?

    @Option(name: .customLong("as"), help: "The stepper id to publish as.")
    var stepperID: String

    @Option(
        help:
            "The step's name; several, separated by commas, are published in turn (open,close: step 1 is open, 2 close, 3 open…)."
    )
    var step = "tick"

    @Option(help: "How many steps to publish.")
    var count = 1000

    @Option(help: "Steps per second at most (0: as fast as flowd acknowledges).")
    var rate = 0

    @Option(help: "Print progress every this many steps (0: never).")
    var progress = 10_000

    @Option(help: "Seconds to wait for the last acks after publishing.")
    var timeout: Double = 120

    @Option(help: "Milliseconds without ack progress before unacknowledged steps are resent.")
    var retransmitMilliseconds = 1000

    func run() throws {
        let topology = try FlowBusConfig.load(path: FlowBusConfig.resolvePath(config))
        let publisher = try StepPublisher(stepperID: stepperID, config: topology)
        publisher.retransmitInterval = .milliseconds(retransmitMilliseconds)
        let names = step.split(separator: ",").map(String.init)
        guard !names.isEmpty else { throw ValidationError("--step needs a step name") }
        say("stepper-load \(publisher.sourceID) publishing \(count) × \(step)")
        var watch = AckWatch(progress: UInt64(max(0, progress)))
        let start = ContinuousClock.now
        for n in 1...max(1, count) {
            if rate > 0 {
                // Acks are read while waiting for the step's time.
                let due = start + .microseconds(Int64(n - 1) * 1_000_000 / Int64(rate))
                while ContinuousClock.now < due {
                    try publisher.poll(timeout: min(ContinuousClock.now.duration(to: due), .milliseconds(10)))
                    watch.observe(publisher)
                }
            }
            try publisher.publish(names[(n - 1) % names.count], ["n": .int(Int64(n))])
            watch.observe(publisher)
        }
        let deadline = ContinuousClock.now + .milliseconds(Int64(timeout * 1000))
        var done = false
        while !done, ContinuousClock.now < deadline {
            done = try publisher.waitForAcknowledgement(timeout: .milliseconds(10))
            watch.observe(publisher)
        }
        say(
            "done published \(publisher.lastSequence) acknowledged \(publisher.lastAcknowledged) resent \(publisher.resentMessages) refused \(publisher.refusals.count)"
        )
        if !done { throw ExitCode.failure }
    }
}

/// Prints progress, and notices when acks start coming from another flowd instance and how long
/// they had stopped.
struct AckWatch {
    /// Print every this many published or acknowledged (0: never).
    let progress: UInt64
    private var instance: String?
    private var acknowledged: UInt64 = 0
    private var printed: (published: UInt64, acknowledged: UInt64) = (0, 0)
    private var lastProgress = ContinuousClock.now

    init(progress: UInt64) {
        self.progress = progress
    }

    mutating func observe(_ publisher: StepPublisher) {
        if progress > 0,
            publisher.lastSequence / progress > printed.published
                || publisher.lastAcknowledged / progress > printed.acknowledged
        {
            printed = (publisher.lastSequence / progress, publisher.lastAcknowledged / progress)
            say(
                "published \(publisher.lastSequence) acknowledged \(publisher.lastAcknowledged) resent \(publisher.resentMessages)"
            )
        }
        let now = ContinuousClock.now
        if let source = publisher.flowdSource, source != instance {
            if let previous = instance {
                let gap = lastProgress.duration(to: now)
                let milliseconds = Double(gap.components.seconds) * 1000 + Double(gap.components.attoseconds) / 1e15
                say(
                    "failover from \(previous) to \(source): \(String(format: "%.1f", milliseconds)) ms between their acks, acknowledged \(publisher.lastAcknowledged)"
                )
            }
            instance = source
        }
        if publisher.lastAcknowledged > acknowledged {
            acknowledged = publisher.lastAcknowledged
            lastProgress = now
        }
    }
}

/// Writes a line at once: progress is read as it comes, also from a file (where `print` buffers).
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
