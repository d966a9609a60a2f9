// The message types of protocol v1 and their encoders. Each `encode(into:)` replaces the
// buffer's contents with the whole multipart message (topic, envelope, body frames). The
// envelope's version and kind are always written as those of the message type; its content
// type selects the encoding of value frames (JSON or FBV) and is written as 0 for kinds
// without value frames.

/// A message type of protocol v1 that can write itself into a ``FrameBuffer``.
public protocol WireMessageEncodable: Sendable {
    /// The kind written in the envelope.
    var kind: MessageKind { get }
    /// The topic (frame 0).
    var topic: String { get }
    /// Replaces the buffer's contents with this message's frames. On error the buffer is empty.
    func encode(into buffer: inout FrameBuffer) throws(WireError)
}

extension WireMessageEncodable {
    /// This message's frames in a new buffer.
    public func encoded() throws(WireError) -> FrameBuffer {
        var buffer = FrameBuffer()
        try encode(into: &buffer)
        return buffer
    }
}

/// A step: a stepper tells the coordinator that something happened (`step/<stepperId>`).
///
/// Frames: 0 topic, 1 envelope, 2 step name, 3 params (a map in the content type; empty for none).
public struct StepMessage: WireMessageEncodable, Hashable {
    /// The publishing stepper; the topic is `step/<stepperID>`.
    public var stepperID: String
    /// The envelope (kind forced to `.step`).
    public var envelope: Envelope
    /// The step name, `[A-Za-z0-9_.:-]`, 1...255 bytes.
    public var name: String
    /// The step's parameters.
    public var params: WireParams
    /// W3C Trace Context, sent as a last frame when present (PROTOCOL.md §4.5).
    public var traceContext: TraceContext?

    /// Creates a step message.
    public init(
        stepperID: String, envelope: Envelope, name: String, params: WireParams = [:],
        traceContext: TraceContext? = nil
    ) {
        self.stepperID = stepperID
        self.envelope = envelope
        self.name = name
        self.params = params
        self.traceContext = traceContext
    }

    public var kind: MessageKind { .step }
    public var topic: String { Topic.step(stepperID) }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.step, id: stepperID)
            try out.writeEnvelope(envelope, kind: kind)
            try out.writeName(name, field: "step name")
            try out.writeParams(params, contentType: envelope.contentType)
            out.writeTraceContext(traceContext)
        }
    }
}

/// A deep link: a step broadcast to every active flow (`deeplink/<stepName>`).
///
/// Frames: 0 topic, 1 envelope, 2 step name (equal to the topic id), 3 params.
public struct DeepLinkMessage: WireMessageEncodable, Hashable {
    /// The envelope (kind forced to `.deepLink`).
    public var envelope: Envelope
    /// The step name; also the topic id.
    public var name: String
    /// The step's parameters.
    public var params: WireParams
    /// W3C Trace Context, sent as a last frame when present (PROTOCOL.md §4.5).
    public var traceContext: TraceContext?

    /// Creates a deep link message.
    public init(envelope: Envelope, name: String, params: WireParams = [:], traceContext: TraceContext? = nil) {
        self.envelope = envelope
        self.name = name
        self.params = params
        self.traceContext = traceContext
    }

    public var kind: MessageKind { .deepLink }
    public var topic: String { Topic.deepLink(name) }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            try validateName(name, field: "deep link name", max: 255)
            try out.writeTopic(.deepLink, id: name)
            try out.writeEnvelope(envelope, kind: kind)
            try out.writeName(name, field: "deep link name")
            try out.writeParams(params, contentType: envelope.contentType)
            out.writeTraceContext(traceContext)
        }
    }
}

/// An action sent by a view to a reactor (`action/<reactorId>`).
///
/// Frames: 0 topic, 1 envelope, 2 action name, 3 params.
public struct ActionMessage: WireMessageEncodable, Hashable {
    /// The target reactor; the topic is `action/<reactorID>`.
    public var reactorID: String
    /// The envelope (kind forced to `.action`).
    public var envelope: Envelope
    /// The action name, `[A-Za-z0-9_.:-]`, 1...255 bytes.
    public var name: String
    /// The action's parameters.
    public var params: WireParams
    /// W3C Trace Context, sent as a last frame when present (PROTOCOL.md §4.5).
    public var traceContext: TraceContext?

    /// Creates an action message.
    public init(
        reactorID: String, envelope: Envelope, name: String, params: WireParams = [:],
        traceContext: TraceContext? = nil
    ) {
        self.reactorID = reactorID
        self.envelope = envelope
        self.name = name
        self.params = params
        self.traceContext = traceContext
    }

    public var kind: MessageKind { .action }
    public var topic: String { Topic.action(reactorID) }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.action, id: reactorID)
            try out.writeEnvelope(envelope, kind: kind)
            try out.writeName(name, field: "action name")
            try out.writeParams(params, contentType: envelope.contentType)
            out.writeTraceContext(traceContext)
        }
    }
}

/// A reactor's state (`state/<reactorId>`); the envelope's sequence is the state sequence.
///
/// Frames: 0 topic, 1 envelope, 2 state (any value, in the content type).
public struct StateMessage: WireMessageEncodable, Hashable {
    /// The publishing reactor.
    public var reactorID: String
    /// The envelope (kind forced to `.state`); `sequence` is the reactor's state sequence.
    public var envelope: Envelope
    /// The state.
    public var state: WireValue
    /// W3C Trace Context, sent as a last frame when present (PROTOCOL.md §4.5).
    public var traceContext: TraceContext?

    /// Creates a state message.
    public init(reactorID: String, envelope: Envelope, state: WireValue, traceContext: TraceContext? = nil) {
        self.reactorID = reactorID
        self.envelope = envelope
        self.state = state
        self.traceContext = traceContext
    }

    public var kind: MessageKind { .state }
    public var topic: String { Topic.state(reactorID) }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.state, id: reactorID)
            try out.writeEnvelope(envelope, kind: kind)
            try out.writeValue(state, contentType: envelope.contentType)
            out.writeTraceContext(traceContext)
        }
    }
}

/// A request for a reactor's current state (`snapshot/<reactorId>`); no body frames.
public struct SnapshotRequest: WireMessageEncodable, Hashable {
    /// The reactor whose state is asked for.
    public var reactorID: String
    /// The envelope (kind forced to `.snapshotRequest`, content type written as none).
    public var envelope: Envelope

    /// Creates a snapshot request.
    public init(reactorID: String, envelope: Envelope) {
        self.reactorID = reactorID
        self.envelope = envelope
    }

    public var kind: MessageKind { .snapshotRequest }
    public var topic: String { Topic.snapshot(reactorID) }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.snapshot, id: reactorID)
            try out.writeEnvelope(envelope, kind: kind, contentType: ContentType.none)
        }
    }
}

/// The reply to a snapshot request (`state/<reactorId>`, kind 6): the current state and, in the
/// envelope's sequence, the sequence of that state. A client drops live states with a sequence
/// less than or equal to it (Clone pattern).
///
/// Frames: 0 topic, 1 envelope, 2 state.
public struct SnapshotMessage: WireMessageEncodable, Hashable {
    /// The reactor.
    public var reactorID: String
    /// The envelope (kind forced to `.snapshot`); `sequence` is the state's sequence.
    public var envelope: Envelope
    /// The state.
    public var state: WireValue

    /// Creates a snapshot message.
    public init(reactorID: String, envelope: Envelope, state: WireValue) {
        self.reactorID = reactorID
        self.envelope = envelope
        self.state = state
    }

    public var kind: MessageKind { .snapshot }
    public var topic: String { Topic.state(reactorID) }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.state, id: reactorID)
            try out.writeEnvelope(envelope, kind: kind)
            try out.writeValue(state, contentType: envelope.contentType)
        }
    }
}

/// Whether a navigation event announces or reports a navigation.
public enum NavigationPhase: Sendable, Hashable {
    /// `willNavigate` (kind 7, `nav/will/<flow>`).
    case will
    /// `didNavigate` (kind 8, `nav/did/<flow>`).
    case did
}

/// The coordinator's willNavigate / didNavigate event.
///
/// Frames: 0 topic, 1 envelope, 2 flow name (equal to the topic id), 3 step name, 4 step params
/// (map in the content type, empty for none), 5 presentable id (empty for none).
public struct NavigationEventMessage: WireMessageEncodable, Hashable {
    /// Before or after navigating.
    public var phase: NavigationPhase
    /// The envelope (kind forced from ``phase``).
    public var envelope: Envelope
    /// The flow that navigates.
    public var flow: String
    /// The step being navigated to.
    public var stepName: String
    /// The step's parameters.
    public var params: WireParams
    /// The presentable the step came from or leads to, if any.
    public var presentableID: String?
    /// The params as the step arrived. FBV bytes are written as they are when the envelope's
    /// content type is FBV too: a step the flow only passes through is not encoded again. JSON
    /// text is not: a sender may escape, space or spell numbers as it likes (`caf\u00e9`, `1E2`),
    /// and what FlowBus writes follows its own writer's rules (PROTOCOL.md §5.2), so ``params``
    /// are written then.
    public var encodedParams: WirePayload?
    /// W3C Trace Context, sent as a last frame when present (PROTOCOL.md §4.5).
    public var traceContext: TraceContext?

    /// Creates a navigation event.
    public init(
        phase: NavigationPhase, envelope: Envelope, flow: String, stepName: String, params: WireParams = [:],
        presentableID: String? = nil, traceContext: TraceContext? = nil
    ) {
        self.phase = phase
        self.envelope = envelope
        self.flow = flow
        self.stepName = stepName
        self.params = params
        self.presentableID = presentableID
        self.traceContext = traceContext
    }

    public var kind: MessageKind { phase == .will ? .willNavigate : .didNavigate }
    public var topic: String { phase == .will ? Topic.willNavigate(flow) : Topic.didNavigate(flow) }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try Self.encode(
            phase: phase, envelope: envelope, flow: flow, stepName: stepName, params: params,
            encodedParams: encodedParams, presentableID: presentableID, traceContext: traceContext, into: &buffer)
    }

    /// Writes the message these fields make, as ``encode(into:)`` does, without making one: a
    /// publisher of a navigation per step copies none of its fields.
    public static func encode(
        phase: NavigationPhase, envelope: Envelope, flow: String, stepName: String, params: WireParams,
        encodedParams: WirePayload?, presentableID: String?, traceContext: TraceContext?,
        into buffer: inout FrameBuffer
    ) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            try validateText(flow, field: "flow name", min: 1, max: 255)
            try out.writeTopic(phase == .will ? .navWill : .navDid, id: flow)
            try out.writeEnvelope(envelope, kind: phase == .will ? .willNavigate : .didNavigate)
            out.append(text: flow)
            try out.writeName(stepName, field: "step name")
            if let encodedParams, encodedParams.contentType == .fbv, envelope.contentType == .fbv {
                out.append(frame: encodedParams.bytes)
            } else {
                try out.writeParams(params, contentType: envelope.contentType)
            }
            try out.writeOptionalText(presentableID, field: "presentable id")
            out.writeTraceContext(traceContext)
        }
    }
}

/// Checks the tab ids of a `setTabs` command (frame 4): each 1 to 255 bytes, joined by `,`, as
/// many as the message size allows; a tab bar of a hundred flows is longer than one id may be.
func validateTabList(_ tabs: String) throws(WireError) {
    for tab in tabs.utf8.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false) {
        if tab.isEmpty { throw .malformed("setTabs names an empty tab presentable id (frame 4)") }
        if tab.count > 255 {
            throw WireError(.oversize, "a tab presentable id in setTabs is \(tab.count) bytes, at most 255 allowed")
        }
    }
}

extension NavigationEventMessage {
    /// Writes into `buffer` the didNavigate of a navigation whose willNavigate `will` holds (as
    /// ``encode(into:)`` wrote it): the same frames but for the topic and the envelope.
    public static func encodeDid(
        ofWill will: FrameBuffer, flow: String, envelope: Envelope, into buffer: inout FrameBuffer
    ) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.navDid, id: flow)
            try out.writeEnvelope(envelope, kind: .didNavigate)
            for index in 2..<will.count { will.withFrame(index) { out.append(frame: $0) } }
        }
    }
}

/// The verb of a navigation command.
public enum NavigationVerb: String, Sendable, Hashable, CaseIterable {
    /// Replace the container's content with the target.
    case setRoot
    /// Push the target onto a stack.
    case push
    /// Pop the target off a stack.
    case pop
    /// Present the target modally.
    case present
    /// Dismiss the presented target.
    case dismiss
    /// Replace a tab container's tabs (target: the container; container: the tab ids joined by `,`).
    case setTabs
    /// Select the target tab in a tab container.
    case selectTab
    /// The flow ends; tear down what it presented.
    case end
}

/// The kind of a presentable in the coordinator's tree.
public enum PresentableKind: String, Sendable, Hashable, CaseIterable {
    /// A single screen.
    case screen
    /// A navigation stack.
    case stack
    /// A tab container.
    case tabs
    /// A child flow's root.
    case flow
}

/// A navigation command for renderers (`cmd/<flowName>`).
///
/// Frames: 0 topic, 1 envelope, 2 verb, 3 target presentable id, 4 container presentable id
/// (empty for none), 5 presentable kind (empty for none).
public struct NavigationCommandMessage: WireMessageEncodable, Hashable {
    /// The envelope (kind forced to `.navigationCommand`, content type written as none).
    public var envelope: Envelope
    /// The flow issuing the command; the topic id.
    public var flow: String
    /// What to do.
    public var verb: NavigationVerb
    /// The presentable acted on (may be empty, e.g. for `end`).
    public var target: String
    /// The container (stack, tabs) the target goes into or leaves, if any.
    public var container: String?
    /// The target's kind, if known.
    public var presentableKind: PresentableKind?
    /// W3C Trace Context, sent as a last frame when present (PROTOCOL.md §4.5).
    public var traceContext: TraceContext?

    /// Creates a navigation command.
    public init(
        envelope: Envelope, flow: String, verb: NavigationVerb, target: String, container: String? = nil,
        presentableKind: PresentableKind? = nil, traceContext: TraceContext? = nil
    ) {
        self.envelope = envelope
        self.flow = flow
        self.verb = verb
        self.target = target
        self.container = container
        self.presentableKind = presentableKind
        self.traceContext = traceContext
    }

    public var kind: MessageKind { .navigationCommand }
    public var topic: String { Topic.command(flow) }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.command, id: flow)
            try out.writeEnvelope(envelope, kind: kind, contentType: ContentType.none)
            out.append(text: verb.rawValue)
            try validateText(target, field: "target presentable id", min: 0, max: 255)
            out.append(text: target)
            if verb == .setTabs, let container, !container.isEmpty {
                try validateTabList(container)
                out.append(text: container)
            } else {
                try out.writeOptionalText(container, field: "container presentable id")
            }
            out.append(text: presentableKind?.rawValue ?? "")
            out.writeTraceContext(traceContext)
        }
    }
}

/// A diagnostic: a refused message or a problem, with a reason code (`diag/<reasonCode>`).
///
/// Frames: 0 topic, 1 envelope, 2 reason code (equal to the topic id), 3 details (map in the
/// content type, with at least `message`, a string).
public struct DiagnosticMessage: WireMessageEncodable, Hashable {
    /// The envelope (kind forced to `.diagnostic`); its content type must not be none.
    public var envelope: Envelope
    /// Why.
    public var reason: DiagnosticReason
    /// `message` (string) and optionally `source`, `topic`, `sequence`, `stepper`, `flow`,
    /// `presentable`.
    public var details: WireParams

    /// Creates a diagnostic from its details map.
    public init(envelope: Envelope, reason: DiagnosticReason, details: WireParams) {
        self.envelope = envelope
        self.reason = reason
        self.details = details
    }

    /// Creates a diagnostic with a message and further details.
    public init(envelope: Envelope, reason: DiagnosticReason, message: String, details: WireParams = [:]) {
        var all = details
        all["message"] = .string(message)
        self.init(envelope: envelope, reason: reason, details: all)
    }

    /// Creates a diagnostic reporting a decoding error.
    public init(envelope: Envelope, error: WireError, details: WireParams = [:]) {
        self.init(envelope: envelope, reason: error.reason, message: error.detail, details: details)
    }

    /// The human-readable reason (`details["message"]`).
    public var message: String { details["message"]?.stringValue ?? "" }

    public var kind: MessageKind { .diagnostic }
    public var topic: String { Topic.diagnostic(reason) }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            guard case .string = details["message"] else {
                throw .malformed("diagnostic details need a string \"message\"")
            }
            try validateName(reason.rawValue, field: "reason code", max: 255)
            try out.writeTopic(.diagnostic, id: reason.rawValue)
            try out.writeEnvelope(envelope, kind: kind)
            out.append(text: reason.rawValue)
            try out.writeValue(.map(details), contentType: envelope.contentType)
        }
    }
}

/// A cumulative acknowledgement (`ack/<sourceId>`): every message of `acknowledgedSource` up to
/// `acknowledgedSequence` is dealt with (accepted, or refused with a diagnostic).
///
/// Frames: 0 topic, 1 envelope (the acknowledging peer's), 2 sequence as 8 bytes u64 big-endian.
public struct Ack: WireMessageEncodable, Hashable {
    /// The acknowledging peer's envelope (kind forced to `.ack`, content type written as none).
    public var envelope: Envelope
    /// The source being acknowledged; the topic id.
    public var acknowledgedSource: String
    /// The highest sequence of that source dealt with.
    public var acknowledgedSequence: UInt64

    /// Creates an acknowledgement.
    public init(envelope: Envelope, acknowledgedSource: String, acknowledgedSequence: UInt64) {
        self.envelope = envelope
        self.acknowledgedSource = acknowledgedSource
        self.acknowledgedSequence = acknowledgedSequence
    }

    public var kind: MessageKind { .ack }
    public var topic: String { Topic.ack(acknowledgedSource) }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.ack, id: acknowledgedSource)
            try out.writeEnvelope(envelope, kind: kind, contentType: ContentType.none)
            out.beginFrame()
            out.withCurrentFrame { $0.appendBigEndian(acknowledgedSequence) }
        }
    }
}

/// A heartbeat (`hb/<sourceId>`, the topic id equal to the envelope's source); no body frames.
public struct Heartbeat: WireMessageEncodable, Hashable {
    /// The envelope (kind forced to `.heartbeat`, content type written as none).
    public var envelope: Envelope

    /// Creates a heartbeat.
    public init(envelope: Envelope) { self.envelope = envelope }

    public var kind: MessageKind { .heartbeat }
    public var topic: String { Topic.heartbeat(envelope.source) }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.heartbeat, id: envelope.source)
            try out.writeEnvelope(envelope, kind: kind, contentType: ContentType.none)
        }
    }
}

/// A status request (`status`): no body frame, or a params frame saying which sections and
/// which page of them to return (PROTOCOL.md §4.3).
public struct StatusRequest: WireMessageEncodable, Hashable {
    /// The envelope (kind forced to `.statusRequest`; content type written as none without params,
    /// else the envelope's, JSON when it says none).
    public var envelope: Envelope
    /// What to return (`sections`, `peers: {offset, limit, prefix, alive}`); empty: the default reply.
    public var params: WireParams

    /// Creates a status request.
    public init(envelope: Envelope, params: WireParams = [:]) {
        self.envelope = envelope
        self.params = params
    }

    public var kind: MessageKind { .statusRequest }
    public var topic: String { Topic.status }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        let contentType: ContentType =
            params.isEmpty ? .none : (envelope.contentType == .none ? .json : envelope.contentType)
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.status, id: "")
            try out.writeEnvelope(envelope, kind: kind, contentType: contentType)
            if !params.isEmpty { try out.writeValue(.map(params), contentType: contentType) }
        }
    }
}

/// A status reply (`status`).
///
/// Frames: 0 topic, 1 envelope (content type always JSON), 2 status (JSON map).
public struct StatusReply: WireMessageEncodable, Hashable {
    /// The envelope (kind forced to `.statusReply`, content type written as JSON).
    public var envelope: Envelope
    /// The status: live tree, bindings, counters.
    public var status: WireParams

    /// Creates a status reply.
    public init(envelope: Envelope, status: WireParams) {
        self.envelope = envelope
        self.status = status
    }

    public var kind: MessageKind { .statusReply }
    public var topic: String { Topic.status }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.status, id: "")
            try out.writeEnvelope(envelope, kind: kind, contentType: .json)
            try out.writeValue(.map(status), contentType: .json)
        }
    }
}

/// What a renderer reports about a presentable.
public enum PresentableEvent: String, Sendable, Hashable, CaseIterable {
    /// The presentable became visible.
    case appeared
    /// The presentable stopped being visible (it may come back).
    case disappeared
    /// The presentable was dismissed for good.
    case dismissed
}

/// A renderer's report about a presentable (`present/<presentableId>`).
///
/// Frames: 0 topic, 1 envelope, 2 event (`appeared`, `disappeared`, `dismissed`).
public struct PresentableReport: WireMessageEncodable, Hashable {
    /// The envelope (kind forced to `.presentableReport`, content type written as none).
    public var envelope: Envelope
    /// The presentable; the topic id.
    public var presentableID: String
    /// What happened to it.
    public var event: PresentableEvent

    /// Creates a presentable report.
    public init(envelope: Envelope, presentableID: String, event: PresentableEvent) {
        self.envelope = envelope
        self.presentableID = presentableID
        self.event = event
    }

    public var kind: MessageKind { .presentableReport }
    public var topic: String { Topic.present(presentableID) }

    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try buffer.writeMessage { (out) throws(WireError) in
            try out.writeTopic(.present, id: presentableID)
            try out.writeEnvelope(envelope, kind: kind, contentType: ContentType.none)
            out.append(text: event.rawValue)
        }
    }
}

// MARK: - Frame writing helpers

extension FrameBuffer {
    /// Clears the buffer, runs `body`, and leaves the buffer empty if it throws.
    mutating func writeMessage(_ body: (inout FrameBuffer) throws(WireError) -> Void) throws(WireError) {
        removeAll(keepingCapacity: true)
        do {
            try body(&self)
        } catch {
            removeAll(keepingCapacity: true)
            throw error
        }
    }

    mutating func writeTopic(_ prefix: Topic.Prefix, id: String) throws(WireError) {
        let idCount = id.utf8.count
        if prefix.hasID {
            if idCount == 0 { throw .malformed("topic id for \(prefix.rawValue)/<id> is empty") }
            let total = prefix.rawValue.utf8.count + 1 + idCount
            if total > 255 { throw WireError(.oversize, "topic is \(total) bytes, at most 255 allowed") }
        }
        beginFrame()
        withCurrentFrame { storage in
            storage.append(contentsOf: prefix.rawValue.utf8)
            if prefix.hasID {
                storage.append(UInt8(ascii: "/"))
                storage.append(contentsOf: id.utf8)
            }
        }
    }

    mutating func writeEnvelope(
        _ envelope: Envelope, kind: MessageKind, contentType: ContentType? = nil
    ) throws(WireError) {
        var copy = envelope
        if let contentType { copy.contentType = contentType }
        copy.version = Envelope.currentVersion
        beginFrame()
        try withCurrentFrame { (storage) throws(WireError) in try copy.encode(into: &storage, kind: kind) }
    }

    mutating func writeName(_ name: String, field: String) throws(WireError) {
        try validateName(name, field: field, max: 255)
        append(text: name)
    }

    mutating func writeOptionalText(_ text: String?, field: String) throws(WireError) {
        let text = text ?? ""
        try validateText(text, field: field, min: 0, max: 255)
        append(text: text)
    }

    mutating func writeValue(_ value: WireValue, contentType: ContentType) throws(WireError) {
        beginFrame()
        try withCurrentFrame { (storage) throws(WireError) in
            switch contentType {
            case .none: throw .malformed("content type none cannot carry a value; use json or fbv")
            case .json: try WireJSON.encode(value, into: &storage)
            case .fbv: try FBV.encode(value, into: &storage)
            }
        }
    }

    mutating func writeTraceContext(_ context: TraceContext?) {
        if let context { append(frame: context.frame) }
    }

    mutating func writeParams(_ params: WireParams, contentType: ContentType) throws(WireError) {
        beginFrame()
        if params.isEmpty { return }
        do {
            try withCurrentFrame { (storage) throws(WireError) in
                switch contentType {
                case .none: throw .malformed("content type none cannot carry params; use json or fbv")
                case .json: try WireJSON.encode(params: params, into: &storage)
                case .fbv: try FBV.encode(params: params, into: &storage)
                }
            }
        } catch {
            throw error.withReason(.badParams)
        }
    }
}
