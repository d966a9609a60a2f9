import ArgumentParser
import FlowBusWire

/// How the benchmark message is split into frames.
enum FrameShape: String, CaseIterable, Codable, Sendable, ExpressibleByArgument {
    /// The real FlowBus step: topic, envelope, name, params.
    case step
    /// The same bytes in a single frame, to show what multipart costs.
    case single
    /// Not the step: the reactor scenario's action (topic, envelope, name, params), see
    /// ``BenchMessage/action()``.
    case action

    var frames: Int { self == .single ? 1 : 4 }
}

/// The message every raw scenario sends: one real FlowBus step, encoded once with FlowBusWire.
///
/// `step/movie-list`, an FBV envelope from `movie-list#5f3a`, `moviePicked`,
/// `{withMovieId: 23452}` — what the demo's movie list stepper publishes. Only the envelope's
/// sequence changes from message to message (patched in place, no re-encoding): 0 marks a
/// probe sent while waiting for the path to be connected, 1... the measured messages.
enum BenchMessage {
    static let stepperID = "movie-list"
    static let source = "movie-list#5f3a"
    static let stepName = "moviePicked"
    static let params: WireParams = ["withMovieId": 23452]
    /// The topic prefix a SUB subscribes to.
    static let subscription = Topic.Prefix.step.subscription

    /// The step as FlowBusWire encodes it, from `stepper` (the steps at scale send it from many).
    static func step(stepper: String = stepperID) throws -> StepMessage {
        let envelope = Envelope(kind: .step, contentType: .fbv, sequence: 0, source: source)
        return StepMessage(stepperID: stepper, envelope: envelope, name: stepName, params: params)
    }

    /// The four frames of the step.
    static func stepFrames(stepper: String = stepperID) throws -> FrameBuffer {
        try step(stepper: stepper).encoded()
    }

    /// The message to send in `shape` (a step from `stepper`), and where its sequence number lives.
    static func template(
        _ shape: FrameShape, stepper: String = stepperID
    ) throws -> (message: FrameStore, sequenceOffset: Int) {
        let frames = FrameStore(shape == .action ? try action().encoded() : try stepFrames(stepper: stepper))
        // Envelope layout (docs/PROTOCOL.md): the u64 sequence is at byte 4 of frame 1. Concatenating
        // the frames keeps every byte where it was in the storage, so the offset is the same.
        let offset = frames.frameStart(1) + 4
        switch shape {
        case .step, .action: return (frames, offset)
        case .single: return (FrameStore(concatenating: frames), offset)
        }
    }

    /// The size of frame 0 (the topic).
    static let topicSize = Topic.step(stepperID).utf8.count

    /// Where the `withMovieId` value is in the step from ``template(_:)``: the last 8 bytes of
    /// the params frame (frame 3), since the map's only entry is an FBV int (docs/PROTOCOL.md
    /// 5.1). The steps scenario carries its sequence there: flowd copies a step's params into
    /// the didNavigate it publishes, while the envelope's sequence is flowd's own.
    static func paramSequenceOffset(in template: FrameStore) -> Int {
        template.frameStart(3) + template.frameSize(3) - 8
    }

    /// The params frame of the step without its last 8 bytes (the int value): what a received
    /// params frame must start with for ``receivedParamSequence(in:firstFrame:)`` to read it.
    static let paramsPrefix: [UInt8] = {
        let frames = try! stepFrames()
        return Array(frames.frameBytes(3).dropLast(8))
    }()

    /// The `withMovieId` value of a received step (4 frames) or didNavigate (6 frames, params
    /// in frame 4) whose payload starts at frame `firstFrame`, or `nil` if its params are not
    /// `{withMovieId: <int>}`.
    @inline(__always)
    static func receivedParamSequence(in received: FrameStore, firstFrame: Int) -> UInt64? {
        let params: Int
        // A step (4 frames) or didNavigate (6), each with a trace frame when flowd traces.
        switch received.count - firstFrame {
        case 4, 5: params = firstFrame + 3
        case 6, 7: params = firstFrame + 4
        default: return nil
        }
        let start = received.frameStart(params)
        guard received.frameSize(params) == paramsPrefix.count + 8,
            received.storage[start..<start + paramsPrefix.count].elementsEqual(paramsPrefix)
        else { return nil }
        return received.loadBigEndian(at: start + paramsPrefix.count)
    }

    // MARK: The reactor scenario

    /// The reactor the reactor scenario drives: fixture-reactors' `bench` (`tick(n:)` → `{n}`).
    static let reactorID = "bench"
    static let actionName = "tick"
    /// A view's source id, as `ReactorView` names them (`view:<reactorId>#<random>`).
    static let viewSource = "view:bench#5f3a"
    static let actionParams: WireParams = ["n": 23452]

    /// `tick(n: 23452)` to `action/bench`, FBV. The sequence travels in `n` (the action's envelope
    /// sequence is the view's, the state's the reactor's): the params frame is `{n: <int>}`, so
    /// ``paramSequenceOffset(in:)`` finds it as it finds `withMovieId` in the step.
    static func action() throws -> ActionMessage {
        let envelope = Envelope(kind: .action, contentType: .fbv, sequence: 0, source: viewSource)
        return ActionMessage(reactorID: reactorID, envelope: envelope, name: actionName, params: actionParams)
    }

    /// The state frame of `{n: <int>}` without its last 8 bytes (the int): what a received state
    /// must start with for ``receivedStateSequence(in:firstFrame:)`` to read `n`.
    static let statePrefix: [UInt8] = {
        let envelope = Envelope(kind: .state, contentType: .fbv, sequence: 0, source: "bench#0")
        let frames = try! StateMessage(reactorID: reactorID, envelope: envelope, state: .map(["n": .int(0)])).encoded()
        return Array(frames.frameBytes(2).dropLast(8))
    }()

    /// `n` of a received state (3 frames: topic, envelope, state) whose payload starts at frame
    /// `firstFrame`, or `nil` if it is not a state `{n: <int>}` of `bench`.
    @inline(__always)
    static func receivedStateSequence(in received: FrameStore, firstFrame: Int) -> UInt64? {
        guard (3...4).contains(received.count - firstFrame) else { return nil }  // a trace frame may follow
        let state = firstFrame + 2
        let start = received.frameStart(state)
        guard received.frameSize(state) == statePrefix.count + 8,
            received.storage[start..<start + statePrefix.count].elementsEqual(statePrefix)
        else { return nil }
        return received.loadBigEndian(at: start + statePrefix.count)
    }

    /// Where the sequence is in a received message whose payload starts at frame `firstFrame`
    /// (1 after a ROUTER's routing id, 0 otherwise); the same for both shapes.
    @inline(__always)
    static func receivedSequenceOffset(in received: FrameStore, firstFrame: Int) -> Int {
        received.frameStart(firstFrame) + topicSize + 4
    }
}
