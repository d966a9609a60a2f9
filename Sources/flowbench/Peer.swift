import ArgumentParser
import FlowBusWire
import Foundation
import ZeroMQ

/// The roles flowbench plays in its own child processes.
enum PeerRole: String, CaseIterable, Sendable {
    case sender, forwarder, receiver
}

/// `flowbench peer …`: the child-process roles. Hidden; started only by flowbench itself.
struct PeerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "peer",
        abstract: "Run one role of a benchmark in a child process (started by flowbench itself).",
        shouldDisplay: false,
        subcommands: [SenderPeer.self, ForwarderPeer.self, ReceiverPeer.self]
    )
}

/// Options every peer takes from its parent.
struct PeerCommonOptions: ParsableArguments {
    @Option(help: "This peer's name: its routing id on the control socket.")
    var name: String
    @Option(help: "The parent's control ROUTER endpoint.")
    var control: String
    @Option(help: "The parent's process id; the peer exits when its parent is gone.")
    var parent: Int32
    @Option(help: "High-water mark of the data sockets, in messages.")
    var hwm: Int32 = 100_000
}

/// A peer's DEALER to the parent's control ROUTER.
final class ControlChannel {
    let socket: Socket
    private let parent: Int32

    init(context: Context, options: PeerCommonOptions) throws {
        socket = try context.socket(.dealer)
        parent = options.parent
        try socket.setOption(.routingID(options.name))
        try socket.connect(options.control)
    }

    func send(_ parts: String...) throws {
        try socket.send(message: parts.map { Array($0.utf8) })
    }

    /// Sends `result` with `value` as JSON.
    func sendResult(_ value: some Encodable) throws {
        let json = String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
        try send("result", json)
    }

    /// The next command if one is queued, without waiting.
    func poll() throws -> String? {
        guard let frames = try socket.receiveMessage(mode: .nonBlocking), let first = frames.first else { return nil }
        return String(decoding: first, as: UTF8.self)
    }

    /// Waits for `command`; returns `false` if `stop` came first. Leaves if the parent dies.
    func wait(for command: String) throws -> Bool {
        while true {
            if let frames = try socket.receiveMessage(mode: .timeout(milliseconds: 250)), let first = frames.first {
                let received = String(decoding: first, as: UTF8.self)
                if received == command { return true }
                if received == "stop" { return false }
            } else {
                try checkParent()
            }
        }
    }

    /// Exits the process if the parent is gone (it was killed and could not stop us).
    func checkParent() throws {
        if getppid() != parent {
            throw BenchError("the parent flowbench (pid \(parent)) is gone", fix: "nothing to do; this peer exits")
        }
    }
}

/// Runs a peer's body, reports a failure to the parent and stderr, and always exits.
func runPeer(_ options: PeerCommonOptions, role: PeerRole, _ body: (Context, ControlChannel) throws -> Void) throws {
    let context = try Context(defaultLinger: 200)
    let control = try ControlChannel(context: context, options: options)
    do {
        try body(context, control)
    } catch {
        let text = "\(error)"
        FileHandle.standardError.write(Data("flowbench \(role.rawValue) \(options.name): \(text)\n".utf8))
        try? control.send("error", text)
        throw ExitCode.failure
    }
}

// MARK: - Sender

/// Sends the step from a DEALER: probes until `go`, then `--messages` messages as fast as it can
/// (throughput) or one at a time, each after the previous one's acknowledgement (latency).
struct SenderPeer: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sender", shouldDisplay: false)
    @OptionGroup var common: PeerCommonOptions
    @Option(help: "Endpoint the DEALER connects to.") var connect: String
    @Option(help: "Endpoint the acknowledgement PULL connects to (latency).") var ackConnect: String?
    @Option(help: "throughput or latency.") var mode: MeasureMode
    @Option(help: "Measured messages.") var messages: Int
    @Option(help: "Unmeasured messages first (latency).") var warmup: Int = 0
    @Option(help: "Frame shape.") var shape: FrameShape = .step
    @Option(
        help:
            "Where the sequence goes: envelope, or params (withMovieId, or n of an action; envelopes then numbered 1, 2, 3…)."
    )
    var sequenceIn: SequenceField = .envelope
    @Option(help: "A file of stepper ids of one length, one a line: each step (probes too) goes from the next one.")
    var stepperIds: String?

    func run() throws {
        try runPeer(common, role: .sender) { context, control in
            guard sequenceIn != .state else {
                throw BenchError(
                    "--sequence-in state is for the receiver; a sender puts it in params",
                    fix: "this is a bug in flowbench")
            }
            var rotation = try stepperIds.map(StepperRotation.init(file:))
            guard rotation == nil || shape == .step else {
                throw BenchError("--stepper-ids needs --shape step", fix: "this is a bug in flowbench")
            }
            let stepper = rotation?.first ?? BenchMessage.stepperID
            var (message, envelopeOffset) = try BenchMessage.template(shape, stepper: stepper)
            // The step's withMovieId, or the action's n: the int ending the params frame of each
            // (one frame holds the step's bytes at the offsets they have in four).
            let paramsTemplate = shape == .single ? try BenchMessage.template(.step, stepper: stepper).message : message
            var stamp = SequenceStamp(
                field: sequenceIn, envelopeOffset: envelopeOffset,
                paramOffset: BenchMessage.paramSequenceOffset(in: paramsTemplate))
            let data = try context.socket(.dealer)
            try data.setOptions([.sendHighWaterMark(common.hwm), .sendTimeout(10_000)])
            try data.connect(connect)
            var ack: Socket? = nil
            if mode == .latency {
                guard let ackConnect else {
                    throw BenchError("latency mode needs --ack-connect", fix: "this is a bug in flowbench")
                }
                let socket = try context.socket(.pull)
                try socket.connect(ackConnect)
                ack = socket
            }
            try control.send("hello")
            guard try control.wait(for: "prime") else { return }

            // Probes (sequence 0) every 2 ms until the receiver has seen one and the parent says go.
            var probes = 0
            primeLoop: while true {
                stamp.stamp(0, into: &message)
                rotation?.advance(&message)
                if try data.send(message: message, mode: .nonBlocking) { probes += 1 }
                for _ in 0..<2 {
                    switch try control.poll() {
                    case "go": break primeLoop
                    case "stop": return
                    default: break
                    }
                    usleep(1000)
                }
                try control.checkParent()
            }

            switch mode {
            case .throughput:
                let start = monotonicNanoseconds()
                for sequence in 1...UInt64(messages) {
                    stamp.stamp(sequence, into: &message)
                    rotation?.advance(&message)
                    if sequence & 0xFFFF == 0 { try control.checkParent() }
                    guard try data.send(message: message) else {
                        throw BenchError(
                            "send blocked for 10 s at message \(sequence)",
                            fix: "the receiving side stopped reading; see its messages")
                    }
                }
                let elapsed = monotonicNanoseconds() - start
                try control.sendResult(
                    SenderReport(sent: messages, probes: probes, elapsedNanoseconds: elapsed, latency: nil, lost: 0))
            case .latency:
                let report = try measureLatency(
                    data: data, ack: ack!, message: &message, stamp: &stamp,
                    rotation: &rotation, probes: probes, checkParent: control.checkParent)
                try control.sendResult(report)
            }
            _ = try control.wait(for: "stop")
        }
    }

    /// Lock-step: stamp, send, wait for the ack carrying the receiver's receive time.
    private func measureLatency(
        data: Socket, ack: Socket, message: inout FrameStore, stamp: inout SequenceStamp,
        rotation: inout StepperRotation?, probes: Int, checkParent: () throws -> Void
    ) throws -> SenderReport {
        var samples = [Int64]()
        samples.reserveCapacity(messages)
        var ackFrames = FrameStore(byteCapacity: 64, frameCapacity: 2)
        var lost = 0
        let total = warmup + messages
        for index in 1...total {
            let sequence = UInt64(index)
            stamp.stamp(sequence, into: &message)
            rotation?.advance(&message)
            if index & 0x3FF == 0 { try checkParent() }
            let sent = monotonicNanoseconds()
            guard try data.send(message: message) else {
                throw BenchError(
                    "send blocked for 10 s at message \(sequence)",
                    fix: "the receiving side stopped reading; see its messages")
            }
            // Wait for this message's ack; skip late acks of messages already counted as lost.
            var received: Int64? = nil
            while received == nil {
                guard try ack.receive(into: &ackFrames, mode: .timeout(milliseconds: 1000)) else { break }
                guard let acked = ackFrames.loadBigEndian(at: 0), let at = ackFrames.loadBigEndian(at: 8) else {
                    continue
                }
                if acked == sequence { received = Int64(bitPattern: at) }
            }
            guard let received else {
                lost += 1
                continue
            }
            if index > warmup { samples.append(received - sent) }
        }
        return SenderReport(
            sent: total, probes: probes, elapsedNanoseconds: nil,
            latency: LatencySummary(sorting: &samples), lost: lost)
    }
}

/// Writes a message's sequence where ``SequenceField`` says, patching the bytes in place.
struct SequenceStamp {
    let field: SequenceField
    let envelopeOffset: Int
    let paramOffset: Int
    /// The last envelope sequence sent with `.params`.
    private(set) var envelopeSequence: UInt64 = 0

    init(field: SequenceField, envelopeOffset: Int, paramOffset: Int) {
        self.field = field
        self.envelopeOffset = envelopeOffset
        self.paramOffset = paramOffset
    }

    @inline(__always)
    mutating func stamp(_ sequence: UInt64, into message: inout FrameStore) {
        switch field {
        case .envelope:
            message.storeBigEndian(sequence, at: envelopeOffset)
        case .params, .state:  // a sender refuses .state
            envelopeSequence += 1
            message.storeBigEndian(envelopeSequence, at: envelopeOffset)
            message.storeBigEndian(sequence, at: paramOffset)
        }
    }
}

/// The stepper ids a sender publishes as, in turn (`--stepper-ids`): each message's topic frame
/// gets the next id, patched in place; the ids have one length, so no frame changes size.
struct StepperRotation {
    /// The ids back to back.
    private let ids: [UInt8]
    private let width: Int
    private let count: Int
    private var next = 0
    /// Where the id starts in a step: after `step/` in the topic frame (frame 0).
    private static let offset = Topic.step("").utf8.count

    let first: String

    init(file: String) throws {
        let lines = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n")
        guard let first = lines.first, lines.allSatisfy({ $0.utf8.count == first.utf8.count }) else {
            throw BenchError(
                "\(file) holds no stepper id, or ids of different lengths",
                fix: "this is a bug in flowbench")
        }
        self.first = String(first)
        width = first.utf8.count
        count = lines.count
        ids = lines.flatMap(\.utf8)
    }

    @inline(__always)
    mutating func advance(_ message: inout FrameStore) {
        let start = next * width
        ids.withUnsafeBytes { ids in
            message.storeBytes(UnsafeRawBufferPointer(rebasing: ids[start..<start + width]), at: Self.offset)
        }
        next = next + 1 == count ? 0 : next + 1
    }
}

/// What the sender reports.
struct SenderReport: Codable {
    var sent: Int
    var probes: Int
    var elapsedNanoseconds: Int64?
    var latency: LatencySummary?
    var lost: Int
}

// MARK: - Forwarder

/// Receives on a ROUTER and publishes every message (without the routing id) on a PUB: the
/// smallest possible middle hop, what flowd does before any FlowBus logic.
struct ForwarderPeer: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "forwarder", shouldDisplay: false)
    @OptionGroup var common: PeerCommonOptions
    @Option(help: "Endpoint the ROUTER binds.") var inBind: String
    @Option(help: "Endpoint the PUB binds.") var outBind: String

    func run() throws {
        try runPeer(common, role: .forwarder) { context, control in
            let input = try context.socket(.router)
            try input.setOption(.receiveHighWaterMark(common.hwm))
            try input.bind(inBind)
            let output = try context.socket(.pub)
            try output.setOption(.sendHighWaterMark(common.hwm))
            try output.bind(outBind)
            try control.send("hello", "in=\(try input.lastEndpoint)", "out=\(try output.lastEndpoint)")

            let poller = Poller()
            let inputIndex = try poller.add(input)
            let controlIndex = try poller.add(control.socket)
            var frames = FrameStore()
            frames.firstSentFrame = 1  // drop the routing id
            var forwarded = 0
            while true {
                if try input.receive(into: &frames, mode: .nonBlocking) {
                    guard frames.count > 1 else { continue }
                    try output.send(message: frames)
                    forwarded += 1
                    continue
                }
                try poller.poll(timeout: 250)
                if poller.isReadable(controlIndex), try control.poll() == "stop" { break }
                if !poller.isReadable(inputIndex) { try control.checkParent() }
            }
            try control.sendResult(["forwarded": forwarded])
        }
    }
}

// MARK: - Receiver

/// Where the receiver's messages come from.
enum ReceiverInput: String, CaseIterable, ExpressibleByArgument {
    /// Bind a ROUTER (the one-hop path: the sender's DEALER connects to it).
    case router
    /// Connect a SUB subscribed to `step/` (after a forwarder or flowd).
    case sub
}

/// Counts and times messages (throughput) or acknowledges each with its receive time (latency).
struct ReceiverPeer: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "receiver", shouldDisplay: false)
    @OptionGroup var common: PeerCommonOptions
    @Option(help: "router (bind) or sub (connect).") var input: ReceiverInput
    @Option(help: "Endpoint to bind (router) or connect (sub).") var endpoint: String
    @Option(help: "SUB subscription prefix.") var subscribe: String = BenchMessage.subscription
    @Option(help: "Endpoint the acknowledgement PUSH binds (latency).") var ackBind: String?
    @Option(help: "throughput or latency.") var mode: MeasureMode
    @Option(help: "Messages to expect (measured and warm-up).") var messages: Int
    @Option(help: "Give up this long after the last message, in ms.") var idleTimeout: Int = 2000
    @Option(
        help:
            "Where the sequence is: envelope (a step), params (withMovieId of a step or didNavigate), or state (n of a bench reactor state)."
    )
    var sequenceIn: SequenceField = .envelope

    func run() throws {
        try runPeer(common, role: .receiver) { context, control in
            let data: Socket
            var hello = ["hello"]
            switch input {
            case .router:
                data = try context.socket(.router)
                try data.setOption(.receiveHighWaterMark(common.hwm))
                try data.bind(endpoint)
                hello.append("in=\(try data.lastEndpoint)")
            case .sub:
                data = try context.socket(.sub)
                try data.setOptions([.receiveHighWaterMark(common.hwm), .subscribe(subscribe)])
                try data.connect(endpoint)
            }
            let firstFrame = input == .router ? 1 : 0
            var ack: Socket? = nil
            if mode == .latency {
                guard let ackBind else {
                    throw BenchError("latency mode needs --ack-bind", fix: "this is a bug in flowbench")
                }
                let socket = try context.socket(.push)
                try socket.bind(ackBind)
                hello.append("ack=\(try socket.lastEndpoint)")
                ack = socket
            }
            try control.socket.send(message: hello.map { Array($0.utf8) })

            let poller = Poller()
            try poller.add(data)
            let controlIndex = try poller.add(control.socket)
            var frames = FrameStore()
            var ackMessage = FrameStore(byteCapacity: 16, frameCapacity: 1)
            [UInt8](repeating: 0, count: 16).withUnsafeBytes { ackMessage.appendFrame($0) }
            var report = ReceiverReport()
            var primed = false
            var nextSequence: UInt64 = 1
            var first: Int64 = 0
            var last: Int64 = 0
            // Options read once: each read of a property wrapper costs more than a message.
            let messages = messages
            let sequenceIn = sequenceIn

            receiveLoop: while report.received < messages {
                if try data.receive(into: &frames, mode: .nonBlocking) {
                    let now = monotonicNanoseconds()
                    let sequence: UInt64?
                    switch sequenceIn {
                    case .envelope:
                        sequence =
                            frames.count > firstFrame
                            ? frames.loadBigEndian(
                                at: BenchMessage.receivedSequenceOffset(in: frames, firstFrame: firstFrame)) : nil
                    case .params:
                        sequence = BenchMessage.receivedParamSequence(in: frames, firstFrame: firstFrame)
                    case .state:
                        sequence = BenchMessage.receivedStateSequence(in: frames, firstFrame: firstFrame)
                    }
                    guard let sequence else {
                        report.malformed += 1
                        continue
                    }
                    if sequence == 0 {
                        if !primed {
                            primed = true
                            try control.send("primed")
                        }
                        continue
                    }
                    if let ack {
                        ackMessage.storeBigEndian(sequence, at: 0)
                        ackMessage.storeBigEndian(UInt64(bitPattern: now), at: 8)
                        try ack.send(message: ackMessage)
                    }
                    if report.received == 0 {
                        first = now
                        report.bytesPerMessage = frames.byteCount - frames.frameStart(firstFrame)
                    }
                    last = now
                    report.received += 1
                    if report.received & 0xFFF == 0 { try control.checkParent() }
                    if sequence != nextSequence {
                        if sequence > nextSequence { report.gaps += 1 } else { report.outOfOrder += 1 }
                    }
                    nextSequence = sequence + 1
                    continue
                }
                // Nothing queued: wait for data or a control command. Before the first measured
                // message there is no limit (the parent times out); after it, --idle-timeout.
                let waited = try poller.poll(timeout: report.received == 0 ? 250 : idleTimeout)
                if poller.isReadable(controlIndex), try control.poll() == "stop" { return }
                if waited == 0 {
                    if report.received > 0 { break receiveLoop }
                    try control.checkParent()
                }
            }
            report.firstToLastNanoseconds = last - first
            report.lost = messages - report.received
            try control.sendResult(report)
            _ = try control.wait(for: "stop")
        }
    }
}

/// What the receiver reports.
struct ReceiverReport: Codable {
    var received = 0
    var lost = 0
    var gaps = 0
    var outOfOrder = 0
    var malformed = 0
    var bytesPerMessage = 0
    var firstToLastNanoseconds: Int64 = 0
}
