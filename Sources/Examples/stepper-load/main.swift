import ArgumentParser
import FlowBus
import FlowBusWire
import Foundation

/// A stepper that publishes N numbered steps and exits 0 only once flowd acknowledged all of
/// them: the load driver of the durability tests (flowd may be killed and restarted meanwhile).
@main
struct StepperLoad: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stepper-load",
        abstract: "Publish N steps `NAME {n: 1...N}` as one stepper, resending what flowd loses, and wait for every ack.",
        discussion: """
            Exits 0 once all N steps are acknowledged, 1 if they are not within --timeout after the last one was \
            published. Prints its progress (`published`, `acknowledged`, `resent`) every --progress steps.
            """
    )

    @Option(name: .shortAndLong, help: "The topology file (default: $\(FlowBusConfig.pathVariable), else \(FlowBusConfig.defaultPath)).")
    var config: String?

    @Option(name: .customLong("as"), help: "The stepper id to publish as.")
    var stepperID: String

    @Option(help: "The step's name.")
    var step = "tick"

    @Option(help: "How many steps to publish.")
    var count = 1000

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
        print("stepper-load \(publisher.sourceID) publishing \(count) × \(step)")
        for n in 1...max(1, count) {
            try publisher.publish(step, ["n": .int(Int64(n))])
            if progress > 0, n % progress == 0 {
                print("published \(n) acknowledged \(publisher.lastAcknowledged) resent \(publisher.resentMessages)")
            }
        }
        let done = try publisher.waitForAcknowledgement(timeout: .milliseconds(Int64(timeout * 1000)))
        print("done published \(publisher.lastSequence) acknowledged \(publisher.lastAcknowledged) resent \(publisher.resentMessages) refused \(publisher.refusals.count)")
        if !done { throw ExitCode.failure }
    }
}
