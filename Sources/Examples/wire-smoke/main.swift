// wire-smoke: the smallest FlowBus peers, for checking the wire protocol across processes.
//
//   wire-smoke listen --endpoint ipc:///tmp/smoke.sock --count 2
//   wire-smoke send --endpoint ipc:///tmp/smoke.sock --as movie-list moviePicked withMovieId=23452
//
// `listen` binds a ROUTER (like flowd's `ingress`), fully decodes every message with FlowBusWire,
// prints one line per message, and answers like flowd: a diagnostic for a refused message, then a
// cumulative ack. `send` connects a DEALER (like a stepper), sends one step and waits for its ack.
// Result lines go to stdout, progress and errors to stderr.
//
// Exit status (both commands): 0 success, 1 a message was refused, 3 timed out,
// 4 ZeroMQ error (endpoint), 64 bad command line.

import ArgumentParser
import FlowBusWire
import ZeroMQ

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

struct WireSmoke: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wire-smoke",
        abstract: "Send and receive FlowBus protocol v1 messages between processes.",
        discussion: """
            Exit status: 0 success, 1 a message was refused, 3 timed out, 4 ZeroMQ error \
            (e.g. the endpoint cannot be bound), 64 bad command line.
            """,
        subcommands: [Listen.self, Send.self]
    )
}

enum Exit {
    static let refused = ExitCode(1)
    static let timedOut = ExitCode(3)
    static let zeroMQ = ExitCode(4)
}

// MARK: - listen

struct Listen: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Bind a ROUTER, receive FlowBus messages, print and acknowledge each one.",
        discussion: """
            Every message is fully decoded and validated. A valid message prints a `received` \
            line and is acknowledged (kind 11, topic ack/<source>, cumulative sequence). A \
            malformed one prints a `refused <reason>: <detail>` line; when its envelope could be \
            read, the sender gets a diagnostic and then an ack, as from flowd. Refused messages \
            count towards --count, and make the exit status 1.
            """
    )

    @Option(help: "The endpoint to bind, e.g. ipc:///tmp/smoke.sock or tcp://127.0.0.1:5560.")
    var endpoint: String

    @Option(help: "How many messages to receive before exiting.")
    var count: Int = 1

    @Option(help: "Seconds to wait for all of them; 0 waits forever.")
    var timeout: Double = 30

    func validate() throws {
        if count < 1 { throw ValidationError("--count must be at least 1, got \(count)") }
        if !(timeout >= 0 && timeout <= 86_400) {
            throw ValidationError("--timeout must be 0 (forever) to 86400 seconds, got \(timeout)")
        }
    }

    func run() throws {
        let context = try Context(defaultLinger: 1000)
        let router = try context.socket(.router)
        // Mandatory routing: a reply to a peer that is gone is an error we report, not a silent drop.
        try router.setOptions([
            .routerMandatory(true), .maxMessageSize(Int64(WireLimits.default.maxFrameBytes)),
        ])
        do {
            try router.bind(endpoint)
        } catch {
            throw fail(
                "cannot bind a ROUTER to \(endpoint): \(error.message). Use a free tcp port "
                    + "(tcp://127.0.0.1:5560) or an ipc path in an existing, writable directory that no "
                    + "other process is bound to.", Exit.zeroMQ)
        }
        note("listening on \(endpoint) for \(count) message(s)")

        var responder = Responder(router: router)
        let clock = ContinuousClock()
        let deadline = timeout > 0 ? clock.now + .milliseconds(Int64(timeout * 1000)) : nil
        var frames: [[UInt8]] = []
        var received = 0
        var refused = 0
        while received < count {
            var slice = 1000
            if let deadline {
                let left = clock.now.duration(to: deadline)
                if left <= .zero {
                    throw fail(
                        "timed out after \(timeout) s with \(received) of \(count) message(s) received. "
                            + "Check that the senders connect to \(endpoint), or raise --timeout.", Exit.timedOut)
                }
                slice = max(1, min(slice, left.wholeMilliseconds))
            }
            guard try router.receive(into: &frames, mode: .timeout(milliseconds: slice)) else { continue }
            received += 1
            if !responder.handle(frames) { refused += 1 }
        }
        if refused > 0 {
            note("\(refused) of \(received) message(s) refused")
            throw Exit.refused
        }
    }
}

/// Decodes received messages and answers their senders, as flowd does on `ingress`.
struct Responder {
    let router: Socket
    /// This listener's source id, in the envelope of its acks and diagnostics.
    let source = "wire-smoke#" + randomHex()
    private var sequence: UInt64 = 0
    /// Per source, the highest sequence dealt with (what the cumulative ack says).
    private var dealtWith: [String: UInt64] = [:]

    init(router: Socket) { self.router = router }

    /// Handles one message from the ROUTER (routing id first); returns false if it was refused.
    mutating func handle(_ frames: [[UInt8]]) -> Bool {
        guard let routingID = frames.first, frames.count >= 2 else {
            say("refused malformed: message has no frame after the routing id")
            return false
        }
        let buffer = FrameBuffer(frames: Array(frames.dropFirst()))
        let message: WireMessage
        do {
            message = try WireMessage.decode(from: buffer)
        } catch {
            let header = try? RoutedHeader.decode(from: buffer)
            var line = "refused \(error.reason): \(error.detail)"
            if let header {
                line += " (topic=\(header.topic) source=\(header.envelope.source) seq=\(header.envelope.sequence))"
            }
            say(line)
            if let header { refuse(topic: header.topic, envelope: header.envelope, error, routingID: routingID) }
            return false
        }
        let envelope = message.envelope
        if let last = dealtWith[envelope.source], envelope.sequence <= last {
            let error = WireError(
                .duplicate, "sequence \(envelope.sequence) of \(envelope.source) was already dealt with (up to \(last))"
            )
            say("refused \(error.reason): \(error.detail)")
            refuse(topic: message.topic, envelope: envelope, error, routingID: routingID)
            return false
        }
        say(describe(message))
        dealtWith[envelope.source] = envelope.sequence
        acknowledge(envelope.source, routingID: routingID)
        return true
    }

    /// Sends a diagnostic about a refused message, then the ack that covers it (PROTOCOL.md 7).
    private mutating func refuse(topic: String, envelope: Envelope, _ error: WireError, routingID: [UInt8]) {
        var details: WireParams = ["source": .string(envelope.source), "topic": .string(topic)]
        if let sequence = Int64(exactly: envelope.sequence) { details["sequence"] = .int(sequence) }
        let diagnostic = DiagnosticMessage(
            envelope: nextEnvelope(.diagnostic, .json), error: error, details: details)
        reply(diagnostic, routingID: routingID)
        let source = envelope.source
        dealtWith[source] = max(dealtWith[source] ?? 0, envelope.sequence)
        acknowledge(source, routingID: routingID)
    }

    private mutating func acknowledge(_ source: String, routingID: [UInt8]) {
        let ack = Ack(
            envelope: nextEnvelope(.ack, .none), acknowledgedSource: source,
            acknowledgedSequence: dealtWith[source] ?? 0)
        reply(ack, routingID: routingID)
    }

    private mutating func nextEnvelope(_ kind: MessageKind, _ contentType: ContentType) -> Envelope {
        sequence += 1
        return Envelope(kind: kind, contentType: contentType, sequence: sequence, source: source)
    }

    private func reply(_ message: some WireMessageEncodable, routingID: [UInt8]) {
        do {
            let frames = try message.encoded().frames
            if try !router.send(message: [routingID] + frames, mode: .nonBlocking) {
                note("could not send \(message.topic): the peer's queue is full")
            }
        } catch let error as ZMQError where error.isHostUnreachable {
            note("could not send \(message.topic): the peer disconnected")
        } catch {
            note("could not send \(message.topic): \(error)")
        }
    }
}

/// One line per received message, e.g.
/// `received step from stepper=movie-list source=movie-list#5f3a seq=1 step=moviePicked(withMovieId: 23452) content=json`.
func describe(_ message: WireMessage) -> String {
    let envelope = message.envelope
    switch message {
    case .step(let step):
        return "received step from stepper=\(step.stepperID) source=\(envelope.source) seq=\(envelope.sequence) "
            + "step=\(describeStep(step.name, step.params)) content=\(step.params.isEmpty ? ContentType.none : envelope.contentType)"
    default:
        return "received \(message.kind) topic=\(message.topic) source=\(envelope.source) seq=\(envelope.sequence) "
            + "content=\(envelope.contentType)"
    }
}

/// `moviePicked(withMovieId: 23452, title: "Heat")`: values in JSON, keys sorted.
func describeStep(_ name: String, _ params: WireParams) -> String {
    if params.isEmpty { return name }
    let inner = params.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }.map { key in
        let value = params[key]!
        return "\(key): " + ((try? WireJSON.string(value)) ?? value.displayText)
    }
    return name + "(" + inner.joined(separator: ", ") + ")"
}

// MARK: - send

struct Send: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Connect a DEALER, send one step and wait for its ack.",
        discussion: """
            Params: key=value reads true/false as a bool, an integer as an int (64-bit), a JSON \
            number such as 4.5 or 1e3 as a double, anything else as a string; key:=JSON takes any \
            JSON value (e.g. id:='"23"' for the string "23", tags:='["a","b"]'). Diagnostics \
            received before the ack are printed as `refused <reason>: <message>` (exit 1).
            """
    )

    @Option(help: "The receiver's endpoint, e.g. ipc:///tmp/smoke.sock or tcp://127.0.0.1:5560.")
    var endpoint: String

    @Option(
        name: .customLong("as"), help: ArgumentHelp("The stepper id; the topic is step/<id>.", valueName: "stepper-id"))
    var stepperID: String

    @Argument(help: "The step name, e.g. moviePicked ([A-Za-z0-9_.:-]).")
    var name: String

    @Argument(help: ArgumentHelp("Step params.", valueName: "key=value"))
    var params: [String] = []

    @Flag(help: "Encode params as JSON (content type 1) instead of FBV (2).")
    var json = false

    @Option(help: "Seconds to wait for the ack.")
    var timeout: Double = 5

    @Option(help: "The envelope's source id (default: <stepper-id>#swift-<random>).")
    var source: String?

    func validate() throws {
        if !(timeout > 0 && timeout <= 86_400) {
            throw ValidationError("--timeout must be more than 0 and at most 86400 seconds, got \(timeout)")
        }
    }

    func run() throws {
        let params: WireParams
        do {
            params = try CommandLineParams.parse(self.params)
        } catch {
            throw ValidationError(error.description)
        }
        let source = self.source ?? defaultSource(stepperID, suffix: "#swift-" + randomHex())
        let step = StepMessage(
            stepperID: stepperID,
            envelope: Envelope(
                kind: .step, contentType: params.isEmpty ? .none : (json ? .json : .fbv), sequence: 1, source: source),
            name: name, params: params)
        let frames: FrameBuffer
        do {
            frames = try step.encoded()
        } catch {
            throw ValidationError("cannot encode the step: \(error.detail)")
        }

        let context = try Context(defaultLinger: 0)
        let dealer = try context.socket(.dealer)
        try dealer.setOption(.maxMessageSize(Int64(WireLimits.default.maxFrameBytes)))
        do {
            try dealer.connect(endpoint)
        } catch {
            throw fail(
                "cannot connect a DEALER to \(endpoint): \(error.message). Endpoints look like "
                    + "tcp://127.0.0.1:5560 or ipc:///path/to/socket.", Exit.zeroMQ)
        }
        // A connected DEALER queues the message until the connection is up: no wait needed.
        guard try dealer.send(message: frames.frames, mode: .nonBlocking) else {
            throw fail("could not queue the step for \(endpoint)", Exit.zeroMQ)
        }
        say(
            "sent \(step.topic) source=\(source) seq=1 step=\(describeStep(name, params)) "
                + "content=\(params.isEmpty ? ContentType.none : step.envelope.contentType)")

        let clock = ContinuousClock()
        let deadline = clock.now + .milliseconds(Int64(timeout * 1000))
        var refusals = 0
        var reply: [[UInt8]] = []
        while true {
            let left = clock.now.duration(to: deadline)
            if left <= .zero {
                if refusals > 0 { throw Exit.refused }
                throw fail(
                    "no ack within \(timeout) s from \(endpoint). Is flowd or `wire-smoke listen` running "
                        + "there? --timeout waits longer.", Exit.timedOut)
            }
            guard try dealer.receive(into: &reply, mode: .timeout(milliseconds: max(1, left.wholeMilliseconds))) else {
                continue
            }
            let message: WireMessage
            do {
                message = try WireMessage.decode(from: FrameBuffer(frames: reply))
            } catch {
                note("ignoring a malformed reply: \(error)")
                continue
            }
            switch message {
            case .ack(let ack) where ack.acknowledgedSource == source && ack.acknowledgedSequence >= 1:
                say("ack from \(ack.envelope.source): \(source) seq=\(ack.acknowledgedSequence)")
                if refusals > 0 { throw Exit.refused }
                return
            case .diagnostic(let diagnostic) where (diagnostic.details["source"]?.stringValue ?? source) == source:
                refusals += 1
                say("refused \(diagnostic.reason): \(diagnostic.message)")
            default:
                note("ignoring \(message.kind) \(message.topic)")
            }
        }
    }
}

// MARK: - Helpers

/// `<stepper-id><suffix>`, the stepper id shortened so the source fits 255 bytes.
func defaultSource(_ stepperID: String, suffix: String) -> String {
    var base = stepperID
    while base.utf8.count + suffix.utf8.count > 255 { base.removeLast() }
    return (base.isEmpty ? "wire-smoke" : base) + suffix
}

func randomHex() -> String {
    let text = String(UInt32.random(in: .min ... .max), radix: 16)
    return String(repeating: "0", count: 8 - text.count) + text
}

/// A result line on stdout, written at once (no buffering), so a parent reading a pipe or a
/// file sees each line when it happens, even if this process is killed later.
func say(_ line: String) {
    writeLine(line, to: STDOUT_FILENO)
}

/// A progress or warning line on stderr.
func note(_ line: String) {
    writeLine("wire-smoke: " + line, to: STDERR_FILENO)
}

/// Prints an error on stderr and returns the exit code to throw.
func fail(_ message: String, _ code: ExitCode) -> ExitCode {
    writeLine("wire-smoke: error: " + message, to: STDERR_FILENO)
    return code
}

func writeLine(_ line: String, to descriptor: Int32) {
    var bytes = Array(line.utf8)
    bytes.append(UInt8(ascii: "\n"))
    var offset = 0
    while offset < bytes.count {
        let written = bytes[offset...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        if written < 0 && errno == EINTR { continue }
        if written <= 0 { return }
        offset += written
    }
}

WireSmoke.main()
