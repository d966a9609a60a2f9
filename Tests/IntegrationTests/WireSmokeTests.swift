import FlowBusTesting
import FlowBusWire
import Foundation
import Testing
import ZeroMQ

/// The built `wire-smoke` executables (listen + send) as real processes.
@Suite("wire-smoke processes", .serialized)
struct WireSmokeTests {
    func smoke(_ name: String, _ arguments: [String], in directory: TemporaryDirectory) throws -> ManagedProcess {
        try ManagedProcess(
            name: "wire-smoke \(name)", executable: try BuiltProducts.executable("wire-smoke"),
            arguments: [name] + arguments,
            in: directory.url)
    }

    @Test("listen receives an FBV step and a JSON step from send, prints and acknowledges them")
    func listenAndSend() throws {
        let directory = try TemporaryDirectory()
        let endpoint = directory.ipcEndpoint("smoke.sock")
        let listener = try smoke("listen", ["--endpoint", endpoint, "--count", "2", "--timeout", "60"], in: directory)
        defer { listener.stop() }

        // No readiness wait: the sender's DEALER queues the step until the listener is bound.
        let fbv = try smoke(
            "send",
            [
                "--endpoint", endpoint, "--as", "movie-list", "moviePicked", "withMovieId=23452", "--source",
                "smoke-fbv#1",
            ],
            in: directory)
        defer { fbv.stop() }
        fbv.expectExit(0)
        let json = try smoke(
            "send",
            [
                "--endpoint", endpoint, "--as", "movie-list", "moviePicked", "withMovieId=23452", "title=Heat",
                "--json",
                "--source", "smoke-json#1",
            ], in: directory)
        defer { json.stop() }
        json.expectExit(0)
        if fbv.exitStatus(within: .zero) != 0 || json.exitStatus(within: .zero) != 0 { listener.stop() }
        listener.expectExit(0)

        #expect(
            fbv.stdoutLines.first
                == "sent step/movie-list source=smoke-fbv#1 seq=1 step=moviePicked(withMovieId: 23452) content=fbv")
        #expect(fbv.stdoutLines.last?.hasPrefix("ack from wire-smoke#") == true, "\(fbv.transcript)")
        #expect(fbv.stdoutLines.last?.hasSuffix(": smoke-fbv#1 seq=1") == true, "\(fbv.transcript)")
        #expect(json.stdoutLines.last?.hasSuffix(": smoke-json#1 seq=1") == true, "\(json.transcript)")
        #expect(
            listener.stdoutLines == [
                "received step from stepper=movie-list source=smoke-fbv#1 seq=1 step=moviePicked(withMovieId: 23452) content=fbv",
                "received step from stepper=movie-list source=smoke-json#1 seq=1 step=moviePicked(title: \"Heat\", withMovieId: 23452) content=json",
            ], "\(listener.transcript)")
    }

    @Test("listen refuses malformed and duplicate messages with a reason, answers, and keeps going")
    func listenRefusesAndKeepsGoing() throws {
        let directory = try TemporaryDirectory()
        let endpoint = directory.ipcEndpoint("smoke.sock")
        let listener = try smoke("listen", ["--endpoint", endpoint, "--count", "4", "--timeout", "60"], in: directory)
        defer { listener.stop() }

        let context = try Context(defaultLinger: 0)
        let dealer = try context.socket(.dealer)
        try dealer.connect(endpoint)

        // 1. Version 2 envelope: refused as unsupported-version; no source can be read, so no answer.
        var badVersion = try Envelope(kind: .step, sequence: 1, source: "raw#1").encoded()
        badVersion[0] = 2
        try dealer.send(message: [Array("step/movie-list".utf8), badVersion, Array("moviePicked".utf8), []])
        // 2. A step name with a space: refused as malformed, answered with a diagnostic, then an ack.
        let envelope1 = try Envelope(kind: .step, sequence: 1, source: "raw#1").encoded()
        try dealer.send(message: [Array("step/movie-list".utf8), envelope1, Array("bad name".utf8), []])
        // 3. A valid step: received and acknowledged.
        let valid = StepMessage(
            stepperID: "movie-list", envelope: Envelope(kind: .step, contentType: .fbv, sequence: 2, source: "raw#1"),
            name: "moviePicked", params: ["withMovieId": 7])
        try dealer.send(message: valid.frames())
        // 4. The same (source, sequence) again: refused as duplicate.
        try dealer.send(message: valid.frames())

        // The replies, in order: diagnostic + ack for 2., ack for 3., diagnostic + ack for 4.
        let replies = try (0..<5).map { index in
            try receiveDecoded(dealer, within: .seconds(30), what: "reply \(index + 1) of 5")
        }
        guard case .diagnostic(let malformed) = replies[0] else {
            Issue.record("reply 1 is \(replies[0].kind), a diagnostic expected")
            return
        }
        #expect(malformed.reason == .malformed)
        #expect(malformed.message.contains("step name"))
        #expect(malformed.details["source"] == "raw#1")
        #expect(malformed.details["sequence"] == 1)
        #expect(malformed.details["topic"] == "step/movie-list")
        guard case .ack(let ack1) = replies[1], case .ack(let ack2) = replies[2],
            case .diagnostic(let duplicate) = replies[3], case .ack(let ack3) = replies[4]
        else {
            Issue.record("unexpected replies: \(replies.map(\.kind))")
            return
        }
        #expect(ack1.topic == "ack/raw#1")
        #expect([ack1.acknowledgedSequence, ack2.acknowledgedSequence, ack3.acknowledgedSequence] == [1, 2, 2])
        #expect(duplicate.reason == .duplicate)
        // The listener's own envelopes count up from 1.
        #expect(replies.map(\.envelope.sequence) == [1, 2, 3, 4, 5])

        listener.expectExit(1)
        let lines = listener.stdoutLines
        #expect(lines.count == 4, "\(listener.transcript)")
        guard lines.count == 4 else { return }
        #expect(lines[0].hasPrefix("refused unsupported-version: envelope version is 2"))
        #expect(lines[1].hasPrefix("refused malformed: "))
        #expect(lines[1].hasSuffix("(topic=step/movie-list source=raw#1 seq=1)"))
        #expect(
            lines[2]
                == "received step from stepper=movie-list source=raw#1 seq=2 step=moviePicked(withMovieId: 7) content=fbv"
        )
        #expect(lines[3].hasPrefix("refused duplicate: sequence 2 of raw#1 was already dealt with"))
        #expect(listener.stderr.contains("3 of 4 message(s) refused"), "\(listener.transcript)")
    }

    @Test("send without a listener times out with exit 3 and says what to check")
    func sendTimesOut() throws {
        let directory = try TemporaryDirectory()
        let sender = try smoke(
            "send",
            ["--endpoint", directory.ipcEndpoint("nobody.sock"), "--as", "movie-list", "settings", "--timeout", "0.3"],
            in: directory)
        defer { sender.stop() }
        sender.expectExit(3)
        #expect(sender.stderr.contains("no ack within 0.3 s"))
        #expect(sender.stderr.contains("wire-smoke listen"))
    }

    @Test("listen without senders times out with exit 3")
    func listenTimesOut() throws {
        let directory = try TemporaryDirectory()
        let listener = try smoke(
            "listen", ["--endpoint", directory.ipcEndpoint("quiet.sock"), "--timeout", "0.3"], in: directory)
        defer { listener.stop() }
        listener.expectExit(3)
        #expect(listener.stderr.contains("timed out after 0.3 s with 0 of 1 message(s) received"))
    }

    @Test("listen on an endpoint it cannot bind exits 4 and says why")
    func listenCannotBind() throws {
        let directory = try TemporaryDirectory()
        let listener = try smoke("listen", ["--endpoint", "ipc://\(directory.path)/missing/dir.sock"], in: directory)
        defer { listener.stop() }
        listener.expectExit(4)
        #expect(listener.stderr.contains("cannot bind a ROUTER to"))
    }

    @Test(
        "send refuses bad input before sending",
        arguments: [
            (["bad name"], "only [A-Za-z0-9_.:-] allowed"),
            (["moviePicked", "big=9223372036854775808"], "does not fit a signed 64-bit int"),
            (["moviePicked", "tags:=[1,"], "is not JSON"),
        ])
    func sendRefusesBadInput(arguments: [String], message: String) throws {
        let directory = try TemporaryDirectory()
        let sender = try smoke(
            "send", ["--endpoint", directory.ipcEndpoint("unused.sock"), "--as", "movie-list"] + arguments,
            in: directory)
        defer { sender.stop() }
        sender.expectExit(64)
        #expect(sender.stderr.contains(message), "\(sender.transcript)")
    }

    @Test("listen receives a step from the Python example", .enabled(if: Python.testsEnabled, Python.skipReason))
    func listenReceivesFromPython() throws {
        let directory = try TemporaryDirectory()
        let endpoint = directory.ipcEndpoint("smoke.sock")
        let listener = try smoke("listen", ["--endpoint", endpoint, "--timeout", "60"], in: directory)
        defer { listener.stop() }
        let publisher = try ManagedProcess.python3(
            name: "publish_step.py",
            arguments: [
                Locations.file("docs/examples/publish_step.py").path, endpoint, "movie-list", "moviePicked",
                "withMovieId=23452", "score=0.5", "--source", "py#1", "--timeout", "30",
            ], in: directory.url)
        defer { publisher.stop() }
        publisher.expectExit(0)
        if publisher.exitStatus(within: .zero) != 0 { listener.stop() }  // no step is coming: don't wait
        listener.expectExit(0)
        #expect(
            listener.stdoutLines == [
                "received step from stepper=movie-list source=py#1 seq=1 step=moviePicked(score: 0.5, withMovieId: 23452) content=json"
            ], "\(listener.transcript)")
        #expect(publisher.stdoutLines.last?.hasSuffix(": py#1 seq=1") == true, "\(publisher.transcript)")
    }
}
