/// A plain libzmq path carrying the FlowBus step, in real processes:
/// - one hop: sender DEALER → receiver ROUTER (a stepper talking to flowd);
/// - two hops: sender DEALER → forwarder ROUTER, forwarder PUB → receiver SUB (a stepper →
///   flowd → a subscriber, with no FlowBus logic in the middle).
struct RawPathScenario: Scenario {
    enum Hops { case one, two }
    var hops: Hops
    var shape: FrameShape

    var id: ScenarioID {
        let base = hops == .one ? "one_hop" : "two_hop"
        return ScenarioID(group: .raw, key: shape == .step ? base : base + "_single_frame")
    }

    var path: String {
        let frames = shape == .step ? "4 frames" : "1 frame"
        switch hops {
        case .one: return "DEALER → ROUTER, \(frames)"
        case .two: return "DEALER → ROUTER|PUB forwarder → SUB, \(frames)"
        }
    }

    var baseline: ScenarioID? { nil }

    func run(on bench: Bench) throws -> Measurement {
        let throughput = try measure(.throughput, on: bench)
        let latency = try measure(.latency, on: bench)
        return Measurement(throughput: throughput, latency: latency, frames: shape.frames)
    }

    /// Starts the path's processes, primes it, measures once in `mode`, stops them. The
    /// forwarder's CPU time is metered over the throughput run.
    private func measure(_ mode: MeasureMode, on bench: Bench) throws -> PathRun {
        let run = bench.nextRun()
        let config = bench.config
        defer { bench.stopAll() }
        let hwm = ["--hwm", String(config.highWaterMark)]
        let expected = mode == .throughput ? config.messages : config.latencyWarmup + config.latencySamples

        // The sender's DEALER connects to `target`; the receiver either binds it (one hop) or
        // subscribes behind a forwarder (two hops).
        var receiverArguments =
            [
                "--mode", mode.rawValue, "--messages", String(expected),
                "--idle-timeout", String(config.idleTimeoutMilliseconds),
            ] + hwm
        if mode == .latency { receiverArguments += ["--ack-bind", bench.bindEndpoint("\(run)-ack")] }
        let target: String
        let receiverEndpoints: [String: String]
        var middle: String?
        switch hops {
        case .one:
            receiverEndpoints = try bench.spawnPeer(
                "\(run)-receiver", role: .receiver,
                arguments: receiverArguments + [
                    "--input", "router", "--endpoint", bench.bindEndpoint("\(run)-in"),
                ])
            target = try endpoint("in", of: receiverEndpoints)
        case .two:
            let forwarder = try bench.spawnPeer(
                "\(run)-forwarder", role: .forwarder,
                arguments: hwm + [
                    "--in-bind", bench.bindEndpoint("\(run)-in"), "--out-bind", bench.bindEndpoint("\(run)-out"),
                ])
            receiverEndpoints = try bench.spawnPeer(
                "\(run)-receiver", role: .receiver,
                arguments: receiverArguments + [
                    "--input", "sub", "--endpoint", try endpoint("out", of: forwarder),
                ])
            target = try endpoint("in", of: forwarder)
            middle = mode == .throughput ? "\(run)-forwarder" : nil
        }
        var senderArguments = ["--connect", target, "--mode", mode.rawValue, "--shape", shape.rawValue] + hwm
        switch mode {
        case .throughput: senderArguments += ["--messages", String(config.messages)]
        case .latency:
            senderArguments += [
                "--messages", String(config.latencySamples), "--warmup", String(config.latencyWarmup),
                "--ack-connect", try endpoint("ack", of: receiverEndpoints),
            ]
        }
        let sender = "\(run)-sender"
        let receiver = "\(run)-receiver"
        try bench.spawnPeer(sender, role: .sender, arguments: senderArguments)
        return try bench.primeAndMeasure(
            sender: sender, receiver: receiver, timeout: 30 + Double(expected) / 5_000,
            middle: middle)
    }

    private func endpoint(_ name: String, of endpoints: [String: String]) throws -> String {
        guard let value = endpoints[name] else {
            throw BenchError("a peer did not report its \(name) endpoint", fix: "this is a bug in flowbench")
        }
        return value
    }
}
