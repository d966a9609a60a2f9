import FlowBusTesting
import FlowBusWire
import Foundation
import Testing
import ZeroMQ

/// docs/examples/publish_step.py, run as a real process, against a ROUTER this test binds and
/// decodes with FlowBusWire: the protocol document is enough to talk to FlowBus from Python.
@Suite(
    "Python publish_step.py against FlowBusWire", .serialized,
    .enabled(if: Python.testsEnabled, Python.skipReason))
struct PythonPublisherTests {
    static let script = Locations.file("docs/examples/publish_step.py").path

    /// A ROUTER bound in a fresh directory, standing in for flowd's ingress.
    struct Ingress {
        let directory: TemporaryDirectory
        let endpoint: String
        let context: Context
        let router: Socket

        init(_ socketName: String = "ingress.sock") throws {
            directory = try TemporaryDirectory()
            endpoint = directory.ipcEndpoint(socketName)
            context = try Context(defaultLinger: 0)
            router = try context.socket(.router)
            try router.bind(endpoint)
        }

        /// Starts publish_step.py against this ingress with `arguments` after the endpoint.
        func publish(_ arguments: [String]) throws -> ManagedProcess {
            try ManagedProcess.python3(
                name: "publish_step.py", arguments: [PythonPublisherTests.script, endpoint] + arguments,
                in: directory.url)
        }
    }

    @Test("publishes a step with typed JSON params and prints the ack")
    func publishesStepAndPrintsAck() throws {
        let ingress = try Ingress()
        let publisher = try ingress.publish([
            "movie-list", "moviePicked", "withMovieId=23452", "title=Heat", "rating=4.5", "adult=false",
            "cast:=[\"De Niro\",\"Pacino\"]", "--timeout", "30",
        ])
        defer { publisher.stop() }

        let frames = try receive(ingress.router, within: .seconds(30), from: publisher, what: "the step")
        let routingID = frames[0]
        let buffer = FrameBuffer(frames: Array(frames.dropFirst()))
        let message = try WireMessage.decode(from: buffer)
        guard case .step(let step) = message else {
            Issue.record("expected a step, received \(message.kind) \(message.topic)")
            return
        }
        #expect(step.stepperID == "movie-list")
        #expect(step.topic == "step/movie-list")
        #expect(step.name == "moviePicked")
        #expect(
            step.params == [
                "withMovieId": .int(23452), "title": .string("Heat"), "rating": .double(4.5), "adult": .bool(false),
                "cast": .list([.string("De Niro"), .string("Pacino")]),
            ])
        #expect(step.envelope.contentType == .json)
        #expect(step.envelope.sequence == 1)
        #expect(step.envelope.source.hasPrefix("movie-list#py-"))
        #expect(!step.envelope.messageID.isNone)
        // Python writes the canonical JSON of PROTOCOL.md 5.2, byte for byte what FlowBusWire writes.
        #expect(Array(buffer.frameBytes(3)) == (try WireJSON.encode(.map(step.params))))

        let ack = Ack(
            envelope: Envelope(kind: .ack, sequence: 1, source: "it-ingress#1"),
            acknowledgedSource: step.envelope.source, acknowledgedSequence: 1)
        try ingress.router.send(message: [routingID] + ack.frames())

        publisher.expectExit(0)
        #expect(
            publisher.stdoutLines.contains("ack from it-ingress#1: \(step.envelope.source) seq=1"),
            "\(publisher.transcript)")
        #expect(publisher.stdout.contains("sent step/movie-list source=\(step.envelope.source) seq=1 "))
    }

    @Test("a step without params has an empty params frame and content type 0")
    func publishesStepWithoutParams() throws {
        let ingress = try Ingress()
        let publisher = try ingress.publish(["movie/42", "settings", "--source", "tool#7", "--timeout", "30"])
        defer { publisher.stop() }

        let frames = try receive(ingress.router, within: .seconds(30), from: publisher, what: "the step")
        let buffer = FrameBuffer(frames: Array(frames.dropFirst()))
        guard case .step(let step) = try WireMessage.decode(from: buffer) else {
            Issue.record("expected a step")
            return
        }
        #expect(step.stepperID == "movie/42")
        #expect(step.name == "settings")
        #expect(step.params.isEmpty)
        #expect(step.envelope.source == "tool#7")
        #expect(step.envelope.contentType == ContentType.none)
        #expect(buffer.frameSize(3) == 0)

        let ack = Ack(
            envelope: Envelope(kind: .ack, sequence: 1, source: "it-ingress#1"), acknowledgedSource: "tool#7",
            acknowledgedSequence: 1)
        try ingress.router.send(message: [frames[0]] + ack.frames())
        publisher.expectExit(0)
    }

    @Test("a refusal (diagnostic, then ack) is printed and exits 1")
    func refusedStepExitsOne() throws {
        let ingress = try Ingress()
        let publisher = try ingress.publish(["movie-list", "moviePicked", "withMovieId=1", "--timeout", "30"])
        defer { publisher.stop() }

        let frames = try receive(ingress.router, within: .seconds(30), from: publisher, what: "the step")
        let header = try RoutedHeader.decode(from: FrameBuffer(frames: Array(frames.dropFirst())))
        let source = header.envelope.source
        // An unrelated ack first: the script must keep waiting for its own.
        let otherAck = Ack(
            envelope: Envelope(kind: .ack, sequence: 1, source: "it-ingress#1"), acknowledgedSource: "someone-else#1",
            acknowledgedSequence: 9)
        let diagnostic = DiagnosticMessage(
            envelope: Envelope(kind: .diagnostic, contentType: .fbv, sequence: 2, source: "it-ingress#1"),
            reason: .unboundStepper, message: "stepper movie-list is not bound to a flow",
            details: ["source": .string(source), "sequence": 1, "topic": "step/movie-list", "stepper": "movie-list"])
        let ack = Ack(
            envelope: Envelope(kind: .ack, sequence: 3, source: "it-ingress#1"), acknowledgedSource: source,
            acknowledgedSequence: 1)
        for reply in [try otherAck.frames(), try diagnostic.frames(), try ack.frames()] {
            try ingress.router.send(message: [frames[0]] + reply)
        }

        publisher.expectExit(1)
        #expect(publisher.stdoutLines.contains("refused unbound-stepper: stepper movie-list is not bound to a flow"))
        #expect(publisher.stdoutLines.contains("ack from it-ingress#1: \(source) seq=1"))
    }

    @Test("no ack within the timeout exits 3 and says what to check")
    func noAckExitsThree() throws {
        let ingress = try Ingress("silent.sock")
        let publisher = try ingress.publish(["movie-list", "moviePicked", "--timeout", "0.3"])
        defer { publisher.stop() }
        // The step arrives; nobody answers it.
        _ = try receive(ingress.router, within: .seconds(30), from: publisher, what: "the step")
        publisher.expectExit(3)
        #expect(publisher.stderr.contains("no ack within 0.3 s"))
    }

    @Test(
        "bad command lines exit 2 and name the problem",
        arguments: [
            (["movie-list", "bad name"], "step name 'bad name' must be"),
            (["movie-list", "moviePicked", "big=9223372036854775808"], "does not fit a signed 64-bit int"),
            (["movie-list", "moviePicked", "noequals"], "is not key=value"),
            (["movie-list", "moviePicked", "a=1", "a=2"], "is given twice"),
            (["", "moviePicked"], "must not be empty"),
        ])
    func badArgumentsExitTwo(arguments: [String], message: String) throws {
        let directory = try TemporaryDirectory()
        let publisher = try ManagedProcess.python3(
            name: "publish_step.py", arguments: [Self.script, directory.ipcEndpoint("unused.sock")] + arguments,
            in: directory.url)
        defer { publisher.stop() }
        publisher.expectExit(2)
        #expect(publisher.stderr.contains(message), "\(publisher.transcript)")
    }

    @Test("the module is importable and builds the golden vector's frames")
    func moduleBuildsGoldenFrames() throws {
        let directory = try TemporaryDirectory()
        let code = """
            import sys
            sys.path.insert(0, sys.argv[1])
            import publish_step as p
            frames = p.step_frames("movie-list", "moviePicked", {"withMovieId": 23452}, "movie-list#5f3a",
                                   sequence=1, timestamp_us=1700000000000000,
                                   message_id=bytes.fromhex("00112233445566778899aabbccddeeff"))
            golden = open(sys.argv[2]).read().split("\\n")[:-1]
            sys.exit(0 if [f.hex() for f in frames] == golden else 1)
            """
        let check = try ManagedProcess.python3(
            name: "import publish_step",
            arguments: [
                "-c", code, Locations.file("docs/examples").path,
                Locations.file("Tests/FlowBusWireTests/Fixtures/step-moviePicked-json.hex").path,
            ], in: directory.url)
        defer { check.stop() }
        check.expectExit(0)
    }
}

/// The golden vectors, rebuilt from the specification by an independent Python checker.
@Suite(
    "Golden vectors checked by Python",
    .enabled(if: Python.plainTestsEnabled, "python3 is missing: run scripts/bootstrap"))
struct PythonGoldenVectorTests {
    @Test("Fixtures/check.py rebuilds every golden vector")
    func checkPyPasses() throws {
        let directory = try TemporaryDirectory()
        let checker = try ManagedProcess.python3(
            name: "check.py", arguments: [Locations.file("Tests/FlowBusWireTests/Fixtures/check.py").path],
            in: directory.url)
        defer { checker.stop() }
        checker.expectExit(0, within: .seconds(60))
        #expect(checker.stdout.contains("ok step-moviePicked-json"), "\(checker.transcript)")
        #expect(!checker.stdout.contains("MISMATCH"), "\(checker.transcript)")
    }
}
