import Testing

@testable import FlowBusWire

let fixedTimestamp: Int64 = 1_700_000_000_123_456
let fixedID = MessageID(hex: "0123456789abcdef0123456789abcdef")!

func envelope(
    _ kind: MessageKind, _ contentType: ContentType = .json, sequence: UInt64 = 1, source: String = "movie-list#5f3a"
) -> Envelope {
    Envelope(
        kind: kind, contentType: contentType, sequence: sequence, timestamp: fixedTimestamp, messageID: fixedID,
        source: source)
}

let richParams: WireParams = [
    "withMovieId": 23452, "title": "Amélie 🎬", "rating": 0.1, "tags": ["a", "b"], "empty": "", "none": nil,
    "big": .int(.max), "negative": .int(.min), "nested": ["deep": [1.0, -0.0, 1e300]],
]

/// One message of every kind (both value encodings where the kind carries values).
func everyMessage() -> [WireMessage] {
    var messages: [WireMessage] = []
    for contentType in [ContentType.json, .fbv] {
        messages += [
            .step(
                StepMessage(
                    stepperID: "movie-list", envelope: envelope(.step, contentType), name: "moviePicked",
                    params: richParams)),
            .deepLink(
                DeepLinkMessage(envelope: envelope(.deepLink, contentType), name: "movie:detail", params: ["id": 7])),
            .action(
                ActionMessage(
                    reactorID: "counter/1", envelope: envelope(.action, contentType), name: "increase",
                    params: ["by": 2])),
            .state(
                StateMessage(
                    reactorID: "counter", envelope: envelope(.state, contentType, sequence: 9),
                    state: ["value": 3, "list": [nil, true]])),
            .snapshot(
                SnapshotMessage(
                    reactorID: "counter", envelope: envelope(.snapshot, contentType, sequence: 9),
                    state: .string("scalar state"))),
            .navigation(
                NavigationEventMessage(
                    phase: .will, envelope: envelope(.willNavigate, contentType), flow: "movies",
                    stepName: "moviePicked", params: ["withMovieId": 23452], presentableID: "movie/23452")),
            .navigation(
                NavigationEventMessage(
                    phase: .did, envelope: envelope(.didNavigate, contentType), flow: "movies", stepName: "settings")),
            .diagnostic(
                DiagnosticMessage(
                    envelope: envelope(.diagnostic, contentType), reason: .unboundStepper,
                    message: "stepper x is not bound", details: ["stepper": "x", "sequence": 4])),
            .statusReply(
                StatusReply(envelope: envelope(.statusReply, .json), status: ["flows": ["movies"], "uptime": 1.5])),
            .statusRequest(
                StatusRequest(
                    envelope: envelope(.statusRequest, contentType),
                    params: ["sections": ["peers"], "peers": ["offset": 100, "limit": 50]])),
        ]
    }
    messages += [
        .step(StepMessage(stepperID: "s", envelope: envelope(.step, .none), name: "settings")),
        .step(StepMessage(stepperID: "s", envelope: envelope(.step, .fbv), name: "settings", params: [:])),
        .snapshotRequest(SnapshotRequest(reactorID: "counter", envelope: envelope(.snapshotRequest, .none))),
        .navigationCommand(
            NavigationCommandMessage(
                envelope: envelope(.navigationCommand, .none), flow: "movies", verb: .push, target: "movie/23452",
                container: "movies-stack", presentableKind: .screen)),
        .navigationCommand(
            NavigationCommandMessage(
                envelope: envelope(.navigationCommand, .none), flow: "movies", verb: .end, target: "")),
        .ack(
            Ack(
                envelope: envelope(.ack, .none, source: "flowd#1"), acknowledgedSource: "movie-list#5f3a",
                acknowledgedSequence: .max)),
        .heartbeat(Heartbeat(envelope: envelope(.heartbeat, .none, source: "flowd#1"))),
        .statusRequest(StatusRequest(envelope: envelope(.statusRequest, .none))),
        .presentableReport(
            PresentableReport(
                envelope: envelope(.presentableReport, .none), presentableID: "movie/23452", event: .dismissed)),
    ]
    return messages
}

@Suite struct EnvelopeTests {
    @Test func layout() throws {
        let bytes = try envelope(.step, .fbv, sequence: 0x0102030405060708, source: "ab").encoded()
        #expect(bytes.count == 39)
        #expect(Array(bytes[0..<4]) == [1, 1, 2, 0])
        #expect(Array(bytes[4..<12]) == [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(Array(bytes[12..<20]) == [0x00, 0x06, 0x0A, 0x24, 0x18, 0x20, 0x22, 0x40])
        #expect(Array(bytes[20..<36]) == fixedID.bytes)
        #expect(Array(bytes[36...]) == [2, 0x61, 0x62])
    }

    @Test("a new source id: the name, # and 64 random bits in hex, within 255 bytes however long the name")
    func newSourceIDs() throws {
        let id = Envelope.newSourceID(for: "movie-list")
        #expect(id.hasPrefix("movie-list#") && id.utf8.count == 11 + 16)
        #expect(id.dropFirst(11).allSatisfy { $0.isHexDigit && !$0.isUppercase })
        #expect(Set((0..<10_000).map { _ in Envelope.newSourceID(for: "s") }).count == 10_000)
        // 250 bytes of two-byte characters: cut at a character, never inside one.
        let long = Envelope.newSourceID(for: "view:" + String(repeating: "é", count: 125))
        #expect(long.utf8.count <= 255 && long.utf8.count >= 254)
        #expect(long.hasPrefix("view:éé") && long.dropLast(17).hasSuffix("é"))
        let decoded = try Envelope.decode(try envelope(.step, source: long).encoded())
        #expect(decoded.source == long)
        #expect(Envelope.sourceID("a", suffix: "b") == "a#b")
    }

    @Test func roundTrip() throws {
        for kind in MessageKind.allCases {
            for contentType in ContentType.allCases {
                let original = Envelope(
                    kind: kind, contentType: contentType, sequence: 42, timestamp: -5, source: "é#1")
                #expect(try Envelope.decode(try original.encoded()) == original)
            }
        }
        let long = Envelope(
            kind: .heartbeat, sequence: .max, timestamp: .min, messageID: .none,
            source: String(repeating: "x", count: 255))
        #expect(try Envelope.decode(try long.encoded()) == long)
    }

    @Test func flagsAreIgnored() throws {
        var bytes = try envelope(.step).encoded()
        bytes[3] = 0xFF
        #expect(try Envelope.decode(bytes) == envelope(.step))
    }

    @Test func decodeErrors() throws {
        let good = try envelope(.step).encoded()
        expectWireError(.malformed, "envelope is 12 bytes, at least 38 expected") { () throws(WireError) in
            _ = try Envelope.decode(Array(good[0..<12]))
        }
        expectWireError(.malformed, "envelope is 0 bytes") { () throws(WireError) in _ = try Envelope.decode([UInt8]())
        }
        expectWireError(.malformed, "52 expected") { () throws(WireError) in
            _ = try Envelope.decode(Array(good.dropLast()))
        }
        expectWireError(.malformed, "52 expected") { () throws(WireError) in _ = try Envelope.decode(good + [0]) }
        var bad = good
        bad[0] = 2
        expectWireError(.unsupportedVersion, "version is 2") { () throws(WireError) in _ = try Envelope.decode(bad) }
        bad = good
        bad[0] = 0
        expectWireError(.unsupportedVersion) { () throws(WireError) in _ = try Envelope.decode(bad) }
        for kind: UInt8 in [0, 18, 255] {
            bad = good
            bad[1] = kind
            expectWireError(.unknownKind, "kind \(kind)") { () throws(WireError) in _ = try Envelope.decode(bad) }
        }
        bad = good
        bad[2] = 3
        expectWireError(.malformed, "content type 3") { () throws(WireError) in _ = try Envelope.decode(bad) }
        bad = good
        bad[36] = 0
        expectWireError(.malformed, "source length is 0") { () throws(WireError) in _ = try Envelope.decode(bad) }
        bad = good
        bad[37] = 0xFF
        expectWireError(.malformed, "source is not valid UTF-8") { () throws(WireError) in _ = try Envelope.decode(bad)
        }
        expectWireError(.oversize, "at most 4") { () throws(WireError) in
            _ = try Envelope.decode(good, limits: WireLimits(maxSourceBytes: 4))
        }
        expectWireError(.malformed, "source is empty") { () throws(WireError) in
            _ = try envelope(.step, source: "").encoded()
        }
        expectWireError(.oversize, "256 bytes") { () throws(WireError) in
            _ = try envelope(.step, source: String(repeating: "y", count: 256)).encoded()
        }
    }

    @Test func messageIDs() {
        let id = MessageID.random()
        #expect(!id.isNone)
        #expect(id != MessageID.random())
        #expect(id.bytes[6] >> 4 == 4)
        #expect(id.bytes[8] >> 6 == 2)
        #expect(MessageID(bytes: id.bytes) == id)
        #expect(MessageID(hex: id.description) == id)
        #expect(MessageID.none.description == String(repeating: "0", count: 32))
        #expect(MessageID(hex: "01234567-89ab-cdef-0123-456789ABCDEF") == fixedID)
        #expect(MessageID(hex: "0123") == nil)
        #expect(MessageID(hex: "zz23456789abcdef0123456789abcdef") == nil)
    }
}

@Suite struct TopicTests {
    @Test func buildAndParse() {
        #expect(Topic.step("movie-list") == "step/movie-list")
        #expect(Topic.willNavigate("movies") == "nav/will/movies")
        #expect(Topic.diagnostic(.unboundStepper) == "diag/unbound-stepper")
        let cases: [(String, Topic.Prefix, String)] = [
            ("step/movie/42", .step, "movie/42"), ("deeplink/x", .deepLink, "x"),
            ("diag/oversize", .diagnostic, "oversize"),
            ("action/counter", .action, "counter"), ("ack/flowd#1", .ack, "flowd#1"),
            ("state/counter2", .state, "counter2"),
            ("snapshot/c", .snapshot, "c"), ("nav/will/f", .navWill, "f"), ("nav/did/f/g", .navDid, "f/g"),
            ("cmd/f", .command, "f"),
            ("hb/s", .heartbeat, "s"), ("status", .status, ""), ("present/p/1", .present, "p/1"),
        ]
        for (topic, prefix, id) in cases {
            let parsed = Topic.parse(topic)
            #expect(parsed?.prefix == prefix, "\(topic)")
            #expect(parsed.map { String($0.id) } == id, "\(topic)")
            #expect(Topic.make(prefix, id: id) == topic)
        }
        for bad in [
            "", "step", "step/", "steps/x", "stat", "status/x", "statusx", "nav/x", "nav/will", "nav/will/", "x/y",
            "Step/x",
        ] {
            #expect(Topic.parse(bad) == nil, "\(bad)")
        }
        #expect(Topic.Prefix.state.subscription == "state/")
        #expect(Topic.Prefix.status.subscription == "status")
    }
}

@Suite struct FrameBufferTests {
    @Test func framesAndReuse() throws {
        var buffer = FrameBuffer(byteCapacity: 64)
        buffer.append(frame: [1, 2, 3])
        buffer.beginFrame()
        buffer.append(text: "hé")
        buffer.beginFrame()
        buffer.appendToCurrentFrame(9)
        buffer.appendToCurrentFrame(contentsOf: [8, 7])
        [UInt8](arrayLiteral: 5).withUnsafeBytes { buffer.append(frame: $0) }
        #expect(buffer.count == 5)
        #expect(buffer.frames == [[1, 2, 3], [], Array("hé".utf8), [9, 8, 7], [5]])
        #expect(buffer.frameSize(2) == 3)
        #expect(buffer.withFrame(3) { Array($0) } == [9, 8, 7])
        #expect(buffer.byteCount == 10)
        #expect(buffer.description == "010203\n\n68c3a9\n090807\n05")
        #expect(FrameBuffer(frames: buffer.frames) == buffer)
        buffer.removeAll()
        #expect(buffer.isEmpty && buffer.byteCount == 0)
    }

    @Test func encodingReusesStorage() throws {
        var buffer = FrameBuffer(byteCapacity: 1024)
        let step = StepMessage(
            stepperID: "movie-list", envelope: envelope(.step, .fbv), name: "moviePicked",
            params: ["withMovieId": 23452])
        try step.encode(into: &buffer)
        let base = buffer.storage.withUnsafeBytes { $0.baseAddress }
        let capacity = buffer.storage.capacity
        for sequence in 2...100 as ClosedRange<UInt64> {
            var next = step
            next.envelope.sequence = sequence
            try next.encode(into: &buffer)
            #expect(buffer.count == 4)
        }
        #expect(buffer.storage.withUnsafeBytes { $0.baseAddress } == base)
        #expect(buffer.storage.capacity == capacity)
    }

    @Test func failedEncodingLeavesBufferEmpty() {
        var buffer = FrameBuffer()
        buffer.append(frame: [1])
        let bad = StepMessage(stepperID: "s", envelope: envelope(.step, .json), name: "bad name")
        expectWireError(.malformed, "0x20") { () throws(WireError) in try bad.encode(into: &buffer) }
        #expect(buffer.isEmpty)
    }
}

@Suite struct MessageTests {
    @Test(arguments: everyMessage())
    func roundTrip(_ message: WireMessage) throws {
        var buffer = FrameBuffer()
        try message.encode(into: &buffer)
        var frameCount = message.kind.frameCount
        // A status request with params has its optional params frame.
        if case .statusRequest(let request) = message, !request.params.isEmpty { frameCount += 1 }
        #expect(buffer.count == frameCount)
        #expect(buffer.withFrame(0) { String(decoding: $0, as: UTF8.self) } == message.topic)
        let decoded = try WireMessage.decode(from: buffer)
        #expect(decoded == message)
        let header = try RoutedHeader.decode(from: buffer)
        #expect(header.kind == message.kind)
        #expect(header.topic == message.topic)
        #expect(header.envelope == message.envelope)
        #expect(header.topicPrefix == message.kind.topicPrefix)
        // Re-encoding the decoded message gives the same bytes.
        var again = FrameBuffer()
        try decoded.encode(into: &again)
        #expect(again == buffer)
    }

    @Test func envelopeKindAndContentTypeAreForced() throws {
        let heartbeat = Heartbeat(envelope: envelope(.step, .json, source: "x"))
        let decoded = try WireMessage.decode(from: try heartbeat.encoded())
        #expect(decoded.kind == .heartbeat)
        #expect(decoded.envelope.contentType == ContentType.none)
        let reply = StatusReply(envelope: envelope(.statusReply, .fbv), status: ["a": 1])
        #expect(try WireMessage.decode(from: try reply.encoded()).envelope.contentType == .json)
    }

    @Test func emptyParamsFrame() throws {
        let buffer = try StepMessage(stepperID: "s", envelope: envelope(.step, .json), name: "settings").encoded()
        #expect(buffer.frameSize(3) == 0)
        guard case .step(let step) = try WireMessage.decode(from: buffer) else {
            Issue.record("not a step")
            return
        }
        #expect(step.params.isEmpty)
    }

    @Test func namedViewKeepsParamsRaw() throws {
        let buffer = try ActionMessage(
            reactorID: "counter", envelope: envelope(.action, .fbv), name: "increase", params: ["by": 2]
        ).encoded()
        let view = try NamedMessageView.decode(from: buffer)
        #expect(view.name == "increase")
        #expect(view.header.topicID == "counter")
        #expect(view.params.contentType == .fbv)
        #expect(Array(view.params.bytes) == (try FBV.encode(.map(["by": 2]))))
        #expect(try view.params.decodeParams() == ["by": 2])
        struct Increase: Decodable, Equatable { var by: Int }
        #expect(try view.params.decode(Increase.self) == Increase(by: 2))
        // The view does not look at the params: broken params still route.
        var frames = buffer.frames
        frames[3] = [0xFF]
        let broken = FrameBuffer(frames: frames)
        #expect(try NamedMessageView.decode(from: broken).name == "increase")
        expectWireError(.badParams, "tag 0xff") { () throws(WireError) in
            _ = try NamedMessageView.decode(from: broken).params.decodeParams()
        }
        expectWireError(.badParams, "frame 3: ") { () throws(WireError) in _ = try WireMessage.decode(from: broken) }
        expectWireError(.malformed, "not a step") { () throws(WireError) in
            _ = try NamedMessageView.decode(from: try Heartbeat(envelope: envelope(.heartbeat, .none)).encoded())
        }
    }

    /// A well-formed step to break in various ways.
    func stepFrames(_ contentType: ContentType = .json) throws -> [[UInt8]] {
        try StepMessage(
            stepperID: "movie-list", envelope: envelope(.step, contentType), name: "moviePicked",
            params: ["withMovieId": 23452]
        ).encoded().frames
    }

    func decode(_ frames: [[UInt8]], limits: WireLimits = .default) throws(WireError) {
        _ = try WireMessage.decode(from: FrameBuffer(frames: frames), limits: limits)
    }

    @Test func outlineErrors() throws {
        let frames = try stepFrames()
        expectWireError(.malformed, "0 frame(s)") { () throws(WireError) in try decode([]) }
        expectWireError(.malformed, "1 frame(s)") { () throws(WireError) in try decode([frames[0]]) }
        expectWireError(.malformed, "step message has 3 frames, 4 (or 5 with a trace frame) expected") {
            () throws(WireError) in
            try decode(Array(frames[0..<3]))
        }
        // A fifth frame is a trace frame (an empty one carries no context); a sixth is one too many.
        try decode(frames + [[]])
        expectWireError(.malformed, "step message has 6 frames, 4 (or 5 with a trace frame) expected") {
            () throws(WireError) in
            try decode(frames + [[], []])
        }
        expectWireError(.oversize, "9 frames, at most 8") { () throws(WireError) in
            try decode(frames + Array(repeating: [], count: 5))
        }
        var big = frames
        big[3] = Array(repeating: 0x20, count: 100)
        expectWireError(.oversize, "frame 3 is 100 bytes, at most 60 allowed") { () throws(WireError) in
            try decode(big, limits: WireLimits(maxFrameBytes: 60))
        }
        expectWireError(.malformed, "envelope is 3 bytes") { () throws(WireError) in
            try decode([frames[0], [1, 1, 1], frames[2], frames[3]])
        }
        var badVersion = frames
        badVersion[1][0] = 9
        expectWireError(.unsupportedVersion) { () throws(WireError) in try decode(badVersion) }
        var badKind = frames
        badKind[1][1] = 99
        expectWireError(.unknownKind) { () throws(WireError) in try decode(badKind) }
        var badContent = frames
        badContent[1][2] = 7
        expectWireError(.malformed, "content type 7") { () throws(WireError) in try decode(badContent) }
    }

    @Test func topicErrors() throws {
        var frames = try stepFrames()
        func with(topic: [UInt8]) -> [[UInt8]] {
            var copy = frames
            copy[0] = topic
            return copy
        }
        expectWireError(.malformed, "topic is 0 bytes") { () throws(WireError) in try decode(with(topic: [])) }
        expectWireError(.oversize, "topic is 256 bytes") { () throws(WireError) in
            try decode(with(topic: Array(("step/" + String(repeating: "a", count: 251)).utf8)))
        }
        expectWireError(.malformed, "topic is not valid UTF-8") { () throws(WireError) in
            try decode(with(topic: Array("step/".utf8) + [0xC3]))
        }
        expectWireError(.malformed, "no known prefix") { () throws(WireError) in
            try decode(with(topic: Array("stepx/a".utf8)))
        }
        expectWireError(.malformed, "no known prefix") { () throws(WireError) in
            try decode(with(topic: Array("step/".utf8)))
        }
        expectWireError(.malformed, "does not match kind step (step/<id> expected)") { () throws(WireError) in
            try decode(with(topic: Array("action/a".utf8)))
        }
        // The kind byte says action but the topic says step.
        frames[1][1] = MessageKind.action.rawValue
        expectWireError(.malformed, "does not match kind action") { () throws(WireError) in try decode(frames) }
    }

    @Test func bodyErrors() throws {
        let frames = try stepFrames()
        func with(_ index: Int, _ bytes: [UInt8], in source: [[UInt8]]? = nil) -> [[UInt8]] {
            var copy = source ?? frames
            copy[index] = bytes
            return copy
        }
        expectWireError(.malformed, "step name (frame 2) is empty") { () throws(WireError) in try decode(with(2, [])) }
        expectWireError(.malformed, "byte 0x20 at offset 5") { () throws(WireError) in
            try decode(with(2, Array("movie picked".utf8)))
        }
        expectWireError(.malformed, "byte 0xc3") { () throws(WireError) in try decode(with(2, Array("é".utf8))) }
        expectWireError(.oversize, "256 bytes") { () throws(WireError) in
            try decode(with(2, Array(repeating: 0x61, count: 256)))
        }
        expectWireError(.badParams, "a map expected") { () throws(WireError) in try decode(with(3, Array("[1]".utf8))) }
        expectWireError(.badParams, "after the value") { () throws(WireError) in try decode(with(3, Array("{} x".utf8)))
        }
        expectWireError(.badParams, "not valid UTF-8") { () throws(WireError) in
            try decode(with(3, [0x7B, 0x22, 0xFF, 0x22, 0x3A, 0x31, 0x7D]))
        }
        let fbv = try stepFrames(.fbv)
        expectWireError(.badParams, "trailing") { () throws(WireError) in try decode(with(3, fbv[3] + [0], in: fbv)) }
        expectWireError(.badParams, "truncated") { () throws(WireError) in
            try decode(with(3, Array(fbv[3].dropLast()), in: fbv))
        }
        var none = frames
        none[1][2] = ContentType.none.rawValue
        expectWireError(.badParams, "content type none") { () throws(WireError) in try decode(none) }
    }

    @Test func kindSpecificErrors() throws {
        func frames(_ message: WireMessage) throws -> [[UInt8]] {
            try message.encode(into: &scratch)
            return scratch.frames
        }
        var scratch = FrameBuffer()
        let messages = everyMessage()
        func first(_ kind: MessageKind) -> WireMessage { messages.first { $0.kind == kind }! }

        var state = try frames(first(.state))
        state[2] = Array("{\"value\":".utf8)
        expectWireError(.malformed, "frame 2: JSON") { () throws(WireError) in try decode(state) }
        state[2] = []
        expectWireError(.malformed, "end of input") { () throws(WireError) in try decode(state) }

        var deep = try frames(first(.deepLink))
        deep[0] = Array("deeplink/other".utf8)
        expectWireError(.malformed, "does not match its name") { () throws(WireError) in try decode(deep) }

        var nav = try frames(first(.willNavigate))
        nav[2] = Array("other".utf8)
        expectWireError(.malformed, "does not match flow name") { () throws(WireError) in try decode(nav) }
        nav = try frames(first(.willNavigate))
        nav[5] = [0xFF]
        expectWireError(.malformed, "presentable id (frame 5) is not valid UTF-8") { () throws(WireError) in
            try decode(nav)
        }

        var command = try frames(first(.navigationCommand))
        command[2] = Array("jump".utf8)
        expectWireError(.malformed, "verb \"jump\"") { () throws(WireError) in try decode(command) }
        command = try frames(first(.navigationCommand))
        command[5] = Array("window".utf8)
        expectWireError(.malformed, "kind \"window\"") { () throws(WireError) in try decode(command) }

        var diagnostic = try frames(first(.diagnostic))
        diagnostic[2] = Array("oversize".utf8)
        expectWireError(.malformed, "does not match reason code") { () throws(WireError) in try decode(diagnostic) }
        diagnostic = try frames(first(.diagnostic))
        diagnostic[3] = Array("{\"stepper\":\"x\"}".utf8)
        expectWireError(.malformed, "no string \"message\"") { () throws(WireError) in try decode(diagnostic) }
        diagnostic[3] = Array("\"text\"".utf8)
        expectWireError(.malformed, "a string, a map expected") { () throws(WireError) in try decode(diagnostic) }

        var ack = try frames(first(.ack))
        ack[2] = [0, 0, 0, 1]
        expectWireError(.malformed, "ack sequence (frame 2) is 4 bytes, 8 expected") { () throws(WireError) in
            try decode(ack)
        }

        var heartbeat = try frames(first(.heartbeat))
        heartbeat[0] = Array("hb/someone-else".utf8)
        expectWireError(.malformed, "does not match source") { () throws(WireError) in try decode(heartbeat) }

        var report = try frames(first(.presentableReport))
        report[2] = Array("vanished".utf8)
        expectWireError(.malformed, "event \"vanished\"") { () throws(WireError) in try decode(report) }

        var reply = try frames(first(.statusReply))
        reply[1][2] = ContentType.fbv.rawValue
        expectWireError(.malformed, "json expected") { () throws(WireError) in try decode(reply) }

        var request = try frames(first(.snapshotRequest))
        request.append([])
        expectWireError(.malformed, "snapshotRequest message has 3 frames, 2 expected") { () throws(WireError) in
            try decode(request)
        }
    }

    @Test func encodeErrors() {
        expectWireError(.malformed, "topic id") { () throws(WireError) in
            _ = try StepMessage(stepperID: "", envelope: envelope(.step), name: "a").encoded()
        }
        expectWireError(.oversize, "topic is 256") { () throws(WireError) in
            _ = try StepMessage(stepperID: String(repeating: "a", count: 251), envelope: envelope(.step), name: "a")
                .encoded()
        }
        expectWireError(.badParams, "content type none") { () throws(WireError) in
            _ = try StepMessage(stepperID: "s", envelope: envelope(.step, .none), name: "a", params: ["x": 1]).encoded()
        }
        expectWireError(.badParams, "not representable") { () throws(WireError) in
            _ = try StepMessage(stepperID: "s", envelope: envelope(.step), name: "a", params: ["x": .double(.nan)])
                .encoded()
        }
        expectWireError(.malformed, "content type none") { () throws(WireError) in
            _ = try StateMessage(reactorID: "c", envelope: envelope(.state, .none), state: 1).encoded()
        }
        expectWireError(.malformed, "\"message\"") { () throws(WireError) in
            _ = try DiagnosticMessage(envelope: envelope(.diagnostic), reason: .malformed, details: [:]).encoded()
        }
    }

    @Test("setTabs lists a hundred tabs (longer than one id may be); each tab id is 1 to 255 bytes")
    func longTabList() throws {
        let tabs = (0..<100).map { "scale/scaleleaf\($0 < 10 ? "0" : "")\($0)" }.joined(separator: ",")
        #expect(tabs.utf8.count > 255)
        let command = NavigationCommandMessage(
            envelope: envelope(.navigationCommand, .none), flow: "ScaleGroup", verb: .setTabs, target: "scale/group",
            container: tabs, presentableKind: .tabs)
        let frames = try command.encoded()
        #expect(try WireMessage.decode(from: frames) == .navigationCommand(command))

        var copy = command
        copy.container = tabs + ",," + "x"
        expectWireError(.malformed, "empty tab") { () throws(WireError) in _ = try copy.encoded() }
        copy.container = tabs + "," + String(repeating: "t", count: 256)
        expectWireError(.oversize, "256 bytes") { () throws(WireError) in _ = try copy.encoded() }
        var decoded = frames.frames
        decoded[4] += Array(("," + String(repeating: "t", count: 256)).utf8)
        expectWireError(.oversize, "256 bytes") { () throws(WireError) in try decode(decoded) }
        copy.verb = .push
        copy.container = String(repeating: "c", count: 256)
        expectWireError(.oversize, "container presentable id is 256 bytes") { () throws(WireError) in
            _ = try copy.encoded()
        }
    }

    @Test("a didNavigate written from its willNavigate is the didNavigate encoded whole, byte for byte")
    func didFromWill() throws {
        let trace = try #require(TraceContext(traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"))
        for contentType in [ContentType.json, .fbv] {
            let will = NavigationEventMessage(
                phase: .will, envelope: envelope(.willNavigate, contentType), flow: "MovieFlow",
                stepName: "moviePicked", params: ["withMovieId": 23452], presentableID: "movie-list",
                traceContext: trace)
            var did = will
            did.phase = .did
            did.envelope = envelope(.didNavigate, contentType, sequence: 2)
            var derived = FrameBuffer()
            try NavigationEventMessage.encodeDid(
                ofWill: will.encoded(), flow: will.flow, envelope: did.envelope, into: &derived)
            #expect(derived == (try did.encoded()))
        }
    }

    @Test func diagnosticFromError() throws {
        let error = WireError(.unknownKind, "envelope kind 99 is not a known message kind (1...15)")
        let diagnostic = DiagnosticMessage(envelope: envelope(.diagnostic), error: error, details: ["topic": "step/x"])
        #expect(diagnostic.topic == "diag/unknown-kind")
        #expect(diagnostic.message == error.detail)
        #expect(error.description == "unknown-kind: envelope kind 99 is not a known message kind (1...15)")
        #expect(DiagnosticReason.allV1.map(\.rawValue).contains("dropped-hwm"))
    }
}
