// libFuzzer target for the FlowBusWire decoders (protocol v1).
//
// Not part of the Swift package (SwiftPM only looks under Sources/ and Tests/). `scripts/fuzz`
// compiles this file together with the sources of Sources/FlowBusWire into one module, so there
// is no `import FlowBusWire` here, and runs it with a seed corpus made from the golden vectors.
//
// Fuzz input framing (how one fuzz input becomes a multipart message):
//
//     byte 0                 frame count N = byte % 12 (0...11, so counts above the
//                            default limit of 8 frames are reachable too)
//     N-1 × u16, big-endian  the lengths of frames 0 ... N-2
//     rest                   the frame bytes, back to back; frame N-1 takes whatever is left
//
// Lengths that run past the end of the input are cut to what remains; missing length bytes
// count as 0. N = 0 means "no message": the bytes after byte 0 are one value blob, fed to the
// FBV and JSON decoders only.
//
// Every decoder runs and its result is discarded: errors (WireError, DecodingError) are the
// expected outcome for most inputs; a crash, trap, sanitizer report, timeout or out-of-memory
// is a bug. The round-trip properties below trap (fatalError) when they break.

// MARK: - Entry point

@_cdecl("LLVMFuzzerTestOneInput")
public func wireDecoderFuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let input = size > 0 && data != nil ? Array(UnsafeBufferPointer(start: data, count: size)) : []
    let frames = FuzzFraming.split(input)
    if frames.isEmpty {
        // N = 0: value codecs only, on everything after the count byte.
        let blob = input.isEmpty ? [] : Array(input.dropFirst())
        fuzzValueCodecs(blob[...])
        return 0
    }
    let buffer = FrameBuffer(frames: frames)
    fuzzMessage(buffer)
    for index in 0..<buffer.count {
        let frame = buffer.frameBytes(index)
        fuzzValueCodecs(frame)
        _ = try? Envelope.decode(frame)
        _ = WireHex.bytes(String(decoding: frame, as: UTF8.self))
        _ = MessageID(bytes: frame)
    }
    return 0
}

// MARK: - Framing

/// The fuzz input framing documented at the top of this file.
enum FuzzFraming {
    static let maxFrameCount = 12

    static func split(_ input: [UInt8]) -> [[UInt8]] {
        guard let first = input.first else { return [] }
        let count = Int(first) % maxFrameCount
        if count == 0 { return [] }
        var offset = 1
        var lengths: [Int] = []
        for _ in 0..<(count - 1) {
            var length = 0
            if offset < input.count { length = Int(input[offset]) << 8 }
            if offset + 1 < input.count { length |= Int(input[offset + 1]) }
            offset += 2
            lengths.append(length)
        }
        offset = min(offset, input.count)
        var frames: [[UInt8]] = []
        for length in lengths {
            let end = min(offset + length, input.count)
            frames.append(Array(input[offset..<end]))
            offset = end
        }
        frames.append(Array(input[offset...]))
        return frames
    }

    /// The inverse of ``split(_:)``, used to write seeds and regression inputs.
    static func join(_ frames: [[UInt8]]) -> [UInt8] {
        precondition(!frames.isEmpty && frames.count < maxFrameCount)
        var out: [UInt8] = [UInt8(frames.count)]
        for frame in frames.dropLast() {
            out.append(UInt8(frame.count >> 8))
            out.append(UInt8(frame.count & 0xFF))
        }
        for frame in frames { out.append(contentsOf: frame) }
        return out
    }
}

// MARK: - Whole messages

func fuzzMessage(_ buffer: FrameBuffer) {
    // The hot-path decoders.
    if let header = try? RoutedHeader.decode(from: buffer) {
        _ = header.kind.frameCount
        _ = Topic.parse(header.topic)
        if let view = try? NamedMessageView.decode(from: buffer, header: header) {
            fuzzParams(view.params, name: view.name)
        }
    }
    if let view = try? NamedMessageView.decode(from: buffer) {
        fuzzParams(view.params, name: view.name)
    }
    // Tighter limits take other paths (oversize checks).
    let tight = WireLimits(
        maxTopicBytes: 16, maxNameBytes: 8, maxSourceBytes: 8, maxFrameBytes: 64, maxFrames: 3, maxDepth: 2)
    _ = try? WireMessage.decode(from: buffer, limits: tight)
    _ = try? NamedMessageView.decode(from: buffer, limits: tight)

    // The full decoder and its round-trip property.
    guard let message = try? WireMessage.decode(from: buffer) else { return }
    _ = message.kind
    _ = message.topic
    checkMessageRoundTrip(message, original: buffer)
}

/// Whatever `WireMessage.decode` accepts must encode, decode again to an equal message (up to
/// the content type the encoder writes for kinds without value frames), and encode to the same
/// bytes again.
func checkMessageRoundTrip(_ message: WireMessage, original: FrameBuffer) {
    var first = FrameBuffer()
    do {
        try message.encode(into: &first)
    } catch {
        fuzzFailure("decoded message does not encode: \(error)", message: message, original: original)
    }
    let again: WireMessage
    do {
        again = try WireMessage.decode(from: first)
    } catch {
        fuzzFailure("re-encoded message does not decode: \(error)\n\(first)", message: message, original: original)
    }
    var second = FrameBuffer()
    do {
        try again.encode(into: &second)
    } catch {
        fuzzFailure("re-decoded message does not encode: \(error)", message: again, original: original)
    }
    if first != second {
        fuzzFailure("encoding is not stable:\n\(first)\n--\n\(second)", message: message, original: original)
    }
    if !message.containsNaN {
        let expected = message.withContentType(again.envelope.contentType)
        if expected != again {
            fuzzFailure("round trip changed the message:\n\(again)", message: message, original: original)
        }
    }
}

func fuzzFailure(_ what: String, message: WireMessage, original: FrameBuffer) -> Never {
    fatalError("FlowBusWire fuzz property broken: \(what)\nmessage: \(message)\ninput frames:\n\(original)")
}

extension WireMessage {
    /// The message with its envelope's content type replaced.
    func withContentType(_ contentType: ContentType) -> WireMessage {
        func change(_ envelope: Envelope) -> Envelope {
            var copy = envelope
            copy.contentType = contentType
            return copy
        }
        switch self {
        case .step(var m):
            m.envelope = change(m.envelope)
            return .step(m)
        case .deepLink(var m):
            m.envelope = change(m.envelope)
            return .deepLink(m)
        case .action(var m):
            m.envelope = change(m.envelope)
            return .action(m)
        case .state(var m):
            m.envelope = change(m.envelope)
            return .state(m)
        case .snapshotRequest(var m):
            m.envelope = change(m.envelope)
            return .snapshotRequest(m)
        case .snapshot(var m):
            m.envelope = change(m.envelope)
            return .snapshot(m)
        case .navigation(var m):
            m.envelope = change(m.envelope)
            return .navigation(m)
        case .navigationCommand(var m):
            m.envelope = change(m.envelope)
            return .navigationCommand(m)
        case .diagnostic(var m):
            m.envelope = change(m.envelope)
            return .diagnostic(m)
        case .ack(var m):
            m.envelope = change(m.envelope)
            return .ack(m)
        case .heartbeat(var m):
            m.envelope = change(m.envelope)
            return .heartbeat(m)
        case .statusRequest(var m):
            m.envelope = change(m.envelope)
            return .statusRequest(m)
        case .statusReply(var m):
            m.envelope = change(m.envelope)
            return .statusReply(m)
        case .presentableReport(var m):
            m.envelope = change(m.envelope)
            return .presentableReport(m)
        }
    }

    /// Whether a value inside holds a NaN (NaN != NaN, so equality cannot be checked).
    var containsNaN: Bool {
        switch self {
        case .step(let m): return WireValue.map(m.params).containsNaN
        case .deepLink(let m): return WireValue.map(m.params).containsNaN
        case .action(let m): return WireValue.map(m.params).containsNaN
        case .state(let m): return m.state.containsNaN
        case .snapshot(let m): return m.state.containsNaN
        case .navigation(let m): return WireValue.map(m.params).containsNaN
        case .diagnostic(let m): return WireValue.map(m.details).containsNaN
        case .statusReply(let m): return WireValue.map(m.status).containsNaN
        case .snapshotRequest, .navigationCommand, .ack, .heartbeat, .statusRequest, .presentableReport:
            return false
        }
    }
}

extension WireValue {
    var containsNaN: Bool {
        switch self {
        case .double(let number): return number.isNaN
        case .list(let elements): return elements.contains { $0.containsNaN }
        case .map(let entries): return entries.values.contains { $0.containsNaN }
        case .null, .bool, .int, .string: return false
        }
    }
}

// MARK: - Params and Codable

/// A Decodable shape with many field types, to drive ``WireValueDecoder`` through its paths.
struct FuzzShape: Decodable {
    var a: Int?
    var b: Int8?
    var c: UInt16?
    var d: UInt64?
    var e: Double?
    var f: Float?
    var g: String?
    var h: Bool?
    var i: [Int32]?
    var j: [String: UInt8]?
    var k: [FuzzShape]?
    var withMovieId: Int?
    var value: Int?
    var label: String?
}

enum FuzzStep: Decodable {
    case moviePicked(withMovieId: Int)
    case settings
    case increase(by: Int8)
    case pair(Int, String)
}

func fuzzParams(_ payload: WirePayload, name: String) {
    if let params = try? payload.decodeParams() {
        _ = try? WireValueDecoder().decode(FuzzShape.self, from: params)
        _ = try? decodeCanonical(FuzzStep.self, name: name, params: params)
    }
    _ = try? payload.decodeValue()
    _ = try? payload.decode(FuzzShape.self)
    _ = try? payload.decode([String: WireValue].self)
}

// MARK: - Values

/// Runs the FBV and JSON decoders over one blob, with the round-trip properties.
func fuzzValueCodecs(_ bytes: ArraySlice<UInt8>) {
    for contentType in [ContentType.json, .fbv, .none] {
        let payload = WirePayload(contentType: contentType, bytes: bytes)
        _ = try? payload.decodeParams()
        _ = try? payload.decodeValue(limits: WireLimits(maxDepth: 3))
    }
    if let value = try? FBV.decode(bytes) {
        checkFBVRoundTrip(value, original: bytes)
        _ = value.displayText
        _ = try? WireValueDecoder().decode(FuzzShape.self, from: value)
        if let json = try? WireJSON.encode(value) {
            // Every finite FBV value has a JSON form that reads back to the same value.
            checkJSONRoundTrip(json, original: bytes, expected: value)
        } else if !value.containsNonFinite {
            fatalError(
                "FBV value without NaN/infinity does not encode as JSON: \(value)\ninput: \(WireHex.string(bytes))")
        }
    }
    if let value = try? WireJSON.decode(bytes) {
        guard let json = try? WireJSON.encode(value) else {
            fatalError("decoded JSON value does not encode: \(value)\ninput: \(WireHex.string(bytes))")
        }
        checkJSONRoundTrip(json, original: bytes, expected: value)
        // And through FBV.
        guard let fbv = try? FBV.encode(value) else {
            fatalError("decoded JSON value does not encode as FBV: \(value)\ninput: \(WireHex.string(bytes))")
        }
        guard let back = try? FBV.decode(fbv), back == value else {
            fatalError("JSON value does not survive FBV: \(value)\ninput: \(WireHex.string(bytes))")
        }
        _ = try? WireValueDecoder().decode(FuzzShape.self, from: value)
    }
}

/// FBV decode → encode → decode → encode: both decodes succeed, both encodings are equal.
func checkFBVRoundTrip(_ value: WireValue, original: ArraySlice<UInt8>) {
    let first: [UInt8]
    do { first = try FBV.encode(value) } catch {
        fatalError("decoded FBV value does not encode: \(error)\ninput: \(WireHex.string(original))")
    }
    let again: WireValue
    do { again = try FBV.decode(first) } catch {
        fatalError("re-encoded FBV value does not decode: \(error)\ninput: \(WireHex.string(original))")
    }
    if !value.containsNaN, again != value {
        fatalError("FBV round trip changed the value: \(value) -> \(again)\ninput: \(WireHex.string(original))")
    }
    guard let second = try? FBV.encode(again), second == first else {
        fatalError("FBV encoding is not stable\ninput: \(WireHex.string(original))")
    }
}

/// JSON text written by the encoder decodes to `expected` and encodes to the same text again.
func checkJSONRoundTrip(_ json: [UInt8], original: ArraySlice<UInt8>, expected: WireValue) {
    let again: WireValue
    do { again = try WireJSON.decode(json) } catch {
        fatalError(
            "encoded JSON does not decode: \(error)\njson: \(String(decoding: json, as: UTF8.self))\ninput: \(WireHex.string(original))"
        )
    }
    if again != expected {
        fatalError("JSON round trip changed the value: \(expected) -> \(again)\ninput: \(WireHex.string(original))")
    }
    guard let second = try? WireJSON.encode(again), second == json else {
        fatalError(
            "JSON encoding is not stable: \(String(decoding: json, as: UTF8.self))\ninput: \(WireHex.string(original))")
    }
}

extension WireValue {
    var containsNonFinite: Bool {
        switch self {
        case .double(let number): return !number.isFinite
        case .list(let elements): return elements.contains { $0.containsNonFinite }
        case .map(let entries): return entries.values.contains { $0.containsNonFinite }
        case .null, .bool, .int, .string: return false
        }
    }
}
