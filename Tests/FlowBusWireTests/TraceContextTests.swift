import Testing

@testable import FlowBusWire

@Suite struct TraceContextTests {
    static let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test func readsTraceparentAndTracestate() throws {
        let context = try TraceContext(frame: Array("\(Self.parent)\ncongo=t61rcWkgMzE,rojo=00f067aa0ba902b7".utf8))
        #expect(context.traceparent == Self.parent)
        #expect(context.tracestate == "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        #expect(context.traceID == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(context.spanID == "00f067aa0ba902b7")
        #expect(context.sampled)
        #expect(try TraceContext(frame: context.frame) == context)
        #expect(TraceContext(traceparent: Self.parent)?.frame == Array(Self.parent.utf8))
    }

    @Test func buildsFromIDs() {
        let context = TraceContext(
            traceID: [UInt8](repeating: 0xAB, count: 16), spanID: [UInt8](repeating: 1, count: 8), sampled: false)
        #expect(context?.traceparent == "00-abababababababababababababababab-0101010101010101-00")
        #expect(context?.sampled == false)
    }

    /// W3C Trace Context §3.2: what a receiver must not take for a traceparent.
    @Test(arguments: [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  // no flags
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // upper case
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // version ff
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  // version 00 is 55 bytes
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ])
    func refusesInvalidTraceparent(_ text: String) {
        #expect(TraceContext(traceparent: text) == nil)
        #expect(throws: WireError.self) { try TraceContext(frame: Array(text.utf8)) }
    }

    @Test func acceptsALaterVersionWithMoreFields() {
        #expect(
            TraceContext(traceparent: "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future") != nil)
    }

    @Test func refusesAnOversizeOrUnprintableFrame() {
        let long = Array("\(Self.parent)\n".utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: 1100)
        let error = #expect(throws: WireError.self) { try TraceContext(frame: long) }
        #expect(error?.reason == .oversize)
        #expect(throws: WireError.self) { try TraceContext(frame: Array("\(Self.parent)\nkey=\u{7}".utf8)) }
    }

    @Test func aStepCarriesItsTraceFrameAndDecodesIt() throws {
        let trace = TraceContext(traceparent: Self.parent)!
        let step = StepMessage(
            stepperID: "movie-list", envelope: Envelope(kind: .step, contentType: .json, sequence: 1, source: "a#1"),
            name: "moviePicked", params: ["withMovieId": 1], traceContext: trace)
        let frames = try step.encoded()
        #expect(frames.count == 5)
        guard case .step(let decoded) = try WireMessage.decode(from: frames) else {
            Issue.record("not a step")
            return
        }
        #expect(decoded == step)
        #expect(try NamedMessageView.decode(from: frames).traceContext == trace)
    }

    @Test func anEmptyTraceFrameIsNoContext() throws {
        var frames = try StepMessage(
            stepperID: "s", envelope: Envelope(kind: .step, contentType: .none, sequence: 1, source: "a#1"), name: "go"
        ).encoded()
        frames.append(frame: [UInt8]())
        #expect(try NamedMessageView.decode(from: frames).traceContext == nil)
    }

    @Test func aBadTraceFrameIsMalformedAndOneFrameMoreStillIs() throws {
        var frames = try StepMessage(
            stepperID: "s", envelope: Envelope(kind: .step, contentType: .none, sequence: 1, source: "a#1"), name: "go"
        ).encoded()
        frames.append(frame: Array("not a traceparent".utf8))
        #expect(throws: WireError.self) { try NamedMessageView.decode(from: frames) }
        var six = try StepMessage(
            stepperID: "s", envelope: Envelope(kind: .step, contentType: .none, sequence: 1, source: "a#1"), name: "go",
            traceContext: TraceContext(traceparent: Self.parent)
        ).encoded()
        six.append(frame: [UInt8]())
        #expect(throws: WireError.self) { try WireMessage.decode(from: six) }
    }

    @Test func kindsWithoutTraceFramesStayExact() throws {
        var ack = try Ack(
            envelope: Envelope(kind: .ack, contentType: .none, sequence: 1, source: "f#1"), acknowledgedSource: "a#1",
            acknowledgedSequence: 1
        ).encoded()
        ack.append(frame: Array(Self.parent.utf8))
        #expect(throws: WireError.self) { try WireMessage.decode(from: ack) }
    }
}
