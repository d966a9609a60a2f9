import Foundation
import Testing

@testable import FlowBusWire

/// The golden vectors: fixed messages whose exact bytes are committed under `Fixtures/`, one
/// `.hex` file per message, one line of lowercase hex per frame (see `Fixtures/README.md`).
///
/// Set `FLOWBUS_WRITE_FIXTURES=1` to (re)write the files from the encoder; never do that to make
/// a failing test pass without understanding why the bytes changed: the files are the protocol.
enum Golden {
    static let timestamp: Int64 = 1_700_000_000_000_000  // 2023-11-14T22:13:20Z
    static let messageID = MessageID(hex: "00112233445566778899aabbccddeeff")!

    static func envelope(
        _ kind: MessageKind, _ contentType: ContentType, _ sequence: UInt64, _ source: String
    ) -> Envelope {
        Envelope(
            kind: kind, contentType: contentType, sequence: sequence, timestamp: timestamp, messageID: messageID,
            source: source)
    }

    static let counterState: WireValue = ["value": 3, "isLoading": false, "label": "três"]
    static let searchedParams: WireParams = ["q": "café", "p": "a/b", "s": 100.0, "n": 0]

    static let vectors: [(file: String, message: WireMessage)] = [
        (
            "step-moviePicked-json",
            .step(
                StepMessage(
                    stepperID: "movie-list", envelope: envelope(.step, .json, 1, "movie-list#5f3a"),
                    name: "moviePicked",
                    params: ["withMovieId": 23452]))
        ),
        (
            "step-moviePicked-fbv",
            .step(
                StepMessage(
                    stepperID: "movie-list", envelope: envelope(.step, .fbv, 1, "movie-list#5f3a"), name: "moviePicked",
                    params: ["withMovieId": 23452]))
        ),
        (
            "step-settings-noparams",
            .step(
                StepMessage(
                    stepperID: "movie-list", envelope: envelope(.step, .none, 2, "movie-list#5f3a"), name: "settings"))
        ),
        (
            "action-increase-json",
            .action(
                ActionMessage(
                    reactorID: "counter", envelope: envelope(.action, .json, 7, "counter-view#a1"), name: "increase",
                    params: ["by": 1]))
        ),
        (
            "state-counter-fbv",
            .state(
                StateMessage(
                    reactorID: "counter", envelope: envelope(.state, .fbv, 3, "counter-host#77"), state: counterState))
        ),
        (
            "snapshot-counter-json",
            .snapshot(
                SnapshotMessage(
                    reactorID: "counter", envelope: envelope(.snapshot, .json, 3, "counter-host#77"),
                    state: counterState))
        ),
        (
            "didNavigate-movies-json",
            .navigation(
                NavigationEventMessage(
                    phase: .did, envelope: envelope(.didNavigate, .json, 12, "flowd#1"), flow: "movies",
                    stepName: "moviePicked",
                    params: ["withMovieId": 23452], presentableID: "movie/23452"))
        ),
        (
            "didNavigate-searched-json",
            .navigation(
                NavigationEventMessage(
                    phase: .did, envelope: envelope(.didNavigate, .json, 18, "flowd#1"), flow: "movies",
                    stepName: "searched", params: Golden.searchedParams, presentableID: "movies/search"))
        ),
        (
            "navigationCommand-push",
            .navigationCommand(
                NavigationCommandMessage(
                    envelope: envelope(.navigationCommand, .none, 13, "flowd#1"), flow: "movies", verb: .push,
                    target: "movie/23452", container: "movies-stack", presentableKind: .screen))
        ),
        (
            "navigationCommand-setTabs",
            .navigationCommand(
                NavigationCommandMessage(
                    envelope: envelope(.navigationCommand, .none, 17, "flowd#1"), flow: "MainFlow", verb: .setTabs,
                    target: "dashboard", container: "wishlist,watched", presentableKind: .tabs))
        ),
        (
            "diagnostic-unbound-stepper-json",
            .diagnostic(
                DiagnosticMessage(
                    envelope: envelope(.diagnostic, .json, 14, "flowd#1"), reason: .unboundStepper,
                    message: "stepper movie-list is not bound to a flow",
                    details: [
                        "source": "movie-list#5f3a", "sequence": 1, "stepper": "movie-list", "topic": "step/movie-list",
                    ]))
        ),
        (
            "ack-movie-list",
            .ack(
                Ack(
                    envelope: envelope(.ack, .none, 15, "flowd#1"), acknowledgedSource: "movie-list#5f3a",
                    acknowledgedSequence: 2))
        ),
        ("heartbeat-flowd", .heartbeat(Heartbeat(envelope: envelope(.heartbeat, .none, 16, "flowd#1")))),
        (
            "step-moviePicked-traced",
            .step(
                StepMessage(
                    stepperID: "movie-list", envelope: envelope(.step, .json, 3, "movie-list#5f3a"),
                    name: "moviePicked", params: ["withMovieId": 23452], traceContext: stepTrace))
        ),
        (
            "didNavigate-movies-traced",
            .navigation(
                NavigationEventMessage(
                    phase: .did, envelope: envelope(.didNavigate, .json, 19, "flowd#1"), flow: "movies",
                    stepName: "moviePicked", params: ["withMovieId": 23452], presentableID: "movie/23452",
                    traceContext: flowdTrace))
        ),
        (
            "replayRequest-json",
            .replayRequest(
                ReplayRequest(
                    envelope: envelope(.replayRequest, .json, 1, "echo#9"), since: 12, topics: ["nav/did/"],
                    limit: 1000))
        ),
        (
            "replay-json",
            .replay(
                ReplayReply(
                    envelope: envelope(.replay, .json, 2, "flowd#1"), since: 12, last: 19, head: 20, oldest: 1,
                    more: false, events: replayedEvents))
        ),
    ]

    /// What `replay-json` carries (§4.6): `step-moviePicked-json` as event 13 (passed on, its
    /// sender's envelope) and `didNavigate-movies-traced`, flowd's own, as event 19.
    static var replayedEvents: PackedEvents {
        var packed = PackedEvents()
        let step = StepMessage(
            stepperID: "movie-list", envelope: envelope(.step, .json, 1, "movie-list#5f3a"), name: "moviePicked",
            params: ["withMovieId": 23452])
        let did = NavigationEventMessage(
            phase: .did, envelope: envelope(.didNavigate, .json, 19, "flowd#1"), flow: "movies",
            stepName: "moviePicked", params: ["withMovieId": 23452], presentableID: "movie/23452",
            traceContext: flowdTrace)
        packed.append(sequence: 13, frames: (try? step.encoded()) ?? FrameBuffer())
        packed.append(sequence: 19, frames: (try? did.encoded()) ?? FrameBuffer())
        return packed
    }

    /// W3C Trace Context's own example, with a tracestate: what a traced stepper sends.
    static let stepTrace = TraceContext(
        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tracestate: "congo=t61rcWkgMzE")!
    /// The same trace, from flowd's `publish events` span.
    static let flowdTrace = TraceContext(traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01")!

    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
        "Fixtures")

    static func url(_ name: String) -> URL { directory.appendingPathComponent(name + ".hex") }

    /// The file format: one lowercase hex line per frame, each line ending in "\n".
    static func text(_ buffer: FrameBuffer) -> String {
        (0..<buffer.count).map { WireHex.string(buffer.frameBytes($0)) + "\n" }.joined()
    }

    static func parse(_ text: String) -> [[UInt8]]? {
        guard text.hasSuffix("\n") else { return nil }
        var frames: [[UInt8]] = []
        for line in text.dropLast().split(separator: "\n", omittingEmptySubsequences: false) {
            guard let bytes = WireHex.bytes(line) else { return nil }
            frames.append(bytes)
        }
        return frames
    }
}

@Suite struct GoldenTests {
    @Test(arguments: Golden.vectors.map(\.file))
    func encodesExactly(_ file: String) throws {
        let message = Golden.vectors.first { $0.file == file }!.message
        var buffer = FrameBuffer()
        try message.encode(into: &buffer)
        let expected = Golden.text(buffer)
        if ProcessInfo.processInfo.environment["FLOWBUS_WRITE_FIXTURES"] == "1" {
            try expected.write(to: Golden.url(file), atomically: true, encoding: .utf8)
        }
        let stored = try String(contentsOf: Golden.url(file), encoding: .utf8)
        #expect(stored == expected, "\(file).hex differs from the encoder's output")
    }

    @Test(arguments: Golden.vectors.map(\.file))
    func decodesExactly(_ file: String) throws {
        let message = Golden.vectors.first { $0.file == file }!.message
        let stored = try String(contentsOf: Golden.url(file), encoding: .utf8)
        let frames = try #require(Golden.parse(stored), "\(file).hex is not one hex line per frame")
        let decoded = try WireMessage.decode(from: FrameBuffer(frames: frames))
        #expect(decoded == message)
        let header = try RoutedHeader.decode(from: FrameBuffer(frames: frames))
        #expect(header.envelope.timestamp == Golden.timestamp)
        #expect(header.envelope.messageID == Golden.messageID)
    }

    @Test func everyFixtureIsTested() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Golden.directory.path)
            .filter { $0.hasSuffix(".hex") }.map { String($0.dropLast(4)) }
        #expect(Set(files) == Set(Golden.vectors.map(\.file)))
    }

    @Test func receivedJSONParamsAreWrittenAgain() throws {
        // A step's params as a JSON sender may write them: escapes, an exponent, -0, any key order.
        let received = WirePayload(
            contentType: .json, bytes: Array(#"{"q":"caf\u00e9","p":"a\/b","s":1E2,"n":-0}"#.utf8)[...])
        let params = try received.decodeParams()
        #expect(params == Golden.searchedParams)
        var message = NavigationEventMessage(
            phase: .did, envelope: Golden.envelope(.didNavigate, .json, 18, "flowd#1"), flow: "movies",
            stepName: "searched", params: params, presentableID: "movies/search")
        message.encodedParams = received
        let stored = try String(contentsOf: Golden.url("didNavigate-searched-json"), encoding: .utf8)
        #expect(Golden.text(try message.encoded()) == stored, "JSON params are written by FlowBus's writer (§5.2)")
        #expect(Golden.parse(stored)?[4] == Array(#"{"n":0,"p":"a/b","q":"café","s":100.0}"#.utf8))
        // FBV is canonical: the bytes that came in go out as they are, when the event is FBV too.
        let fbv = WirePayload(contentType: .fbv, bytes: try FBV.encode(.map(params))[...])
        message.encodedParams = fbv
        message.envelope = Golden.envelope(.didNavigate, .fbv, 18, "flowd#1")
        #expect(try message.encoded().frameBytes(4) == fbv.bytes)
    }

    @Test func stepVectorSpelledOut() throws {
        // An independent spelling of the JSON step, byte by byte, so the fixture cannot drift
        // together with the encoder unnoticed.
        let frames = try #require(
            Golden.parse(try String(contentsOf: Golden.url("step-moviePicked-json"), encoding: .utf8)))
        #expect(frames.count == 4)
        #expect(frames[0] == Array("step/movie-list".utf8))
        var envelope: [UInt8] = [0x01, 0x01, 0x01, 0x00]
        envelope += [0, 0, 0, 0, 0, 0, 0, 1]
        envelope += [0x00, 0x06, 0x0A, 0x24, 0x18, 0x1E, 0x40, 0x00]  // 1_700_000_000_000_000
        envelope += [0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF]
        envelope += [15] + Array("movie-list#5f3a".utf8)
        #expect(frames[1] == envelope)
        #expect(frames[2] == Array("moviePicked".utf8))
        #expect(frames[3] == Array(#"{"withMovieId":23452}"#.utf8))
        let fbv = try #require(
            Golden.parse(try String(contentsOf: Golden.url("step-moviePicked-fbv"), encoding: .utf8)))
        #expect(
            fbv[3] == [0x07, 0, 0, 0, 1, 0, 11] + Array("withMovieId".utf8) + [0x03, 0, 0, 0, 0, 0, 0, 0x5B, 0x9C])
    }
}
