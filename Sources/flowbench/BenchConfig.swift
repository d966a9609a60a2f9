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

/// Everything a run needs to know, parsed once from the command line.
struct BenchConfig: Codable, Sendable {
    var transport: Transport
    var messages: Int
    var latencySamples: Int
    var latencyWarmup: Int
    var highWaterMark: Int32
    var idleTimeoutMilliseconds: Int
    var codecSeconds: Double
}
