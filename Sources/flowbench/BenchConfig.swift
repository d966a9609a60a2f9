import ArgumentParser

/// How the processes of a scenario reach each other.
enum Transport: String, CaseIterable, Codable, Sendable, ExpressibleByArgument {
    /// Unix domain sockets in a temporary directory (what FlowBus uses on one machine).
    case ipc
    /// TCP on 127.0.0.1, ports chosen by the kernel.
    case tcp
}

/// What a run of a path measures.
enum MeasureMode: String, CaseIterable, Codable, Sendable, ExpressibleByArgument {
    /// The sender sends as fast as it can; the receiver times first to last message.
    case throughput
    /// One message in flight: the sender sends, the receiver acknowledges with the
    /// CLOCK_MONOTONIC time it received it, the sender sends the next.
    case latency
}

/// Where a benchmark message carries the sequence that tells probes (0) from measured messages
/// (1...) and orders them.
enum SequenceField: String, CaseIterable, Codable, Sendable, ExpressibleByArgument {
    /// The step envelope's sequence (raw paths: the message arrives as it was sent).
    case envelope
    /// The `withMovieId` param (through flowd: it arrives in a didNavigate whose envelope is
    /// flowd's). The sender then numbers its envelopes 1, 2, 3… across probes and measured
    /// messages, since flowd refuses a (source, sequence) it has already seen.
    case params
    /// Receiver only: `n` of a reactor state `{n: <int>}` (the reactor scenario's sender puts it
    /// in its action's params, with `params`).
    case state
}

/// Everything a run needs to know, parsed once from the command line.
struct BenchConfig: Codable, Sendable {
    var transport: Transport
    var messages: Int
    var latencySamples: Int
    var latencyWarmup: Int
    var highWaterMark: Int32
    var idleTimeoutMilliseconds: Int
    var codecSeconds: Double
    /// The flowd executable for the steps scenario; `nil`: the one beside flowbench.
    var flowdPath: String? = nil
    /// flowd's `--log-level` in the steps scenario.
    var flowdLogLevel: String = "info"
    /// The fixture-reactors executable for the reactor scenario; `nil`: the one beside flowbench.
    var fixtureReactorsPath: String? = nil
    /// Leaf flows the scale scenario builds in flowd (at least; whole groups of tabs).
    var scaleFlows = 10_000
    /// Leaf stepper bindings the scale scenario builds in flowd (at least; as many per leaf).
    var scaleBindings = 100_000
    /// Measurements of each scenario, one round of all after another.
    var rounds = 1
}
