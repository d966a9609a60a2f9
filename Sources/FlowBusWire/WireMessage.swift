/// Any message of protocol v1, fully decoded.
///
/// Use ``decode(from:limits:)`` when the whole message is needed; use ``RoutedHeader`` and
/// ``NamedMessageView`` on the hot path, where only the topic, envelope or name matter.
public enum WireMessage: Sendable, Hashable {
    /// A step (kind 1).
    case step(StepMessage)
    /// A deep link (kind 2).
    case deepLink(DeepLinkMessage)
    /// An action (kind 3).
    case action(ActionMessage)
    /// A state (kind 4).
    case state(StateMessage)
    /// A snapshot request (kind 5).
    case snapshotRequest(SnapshotRequest)
    /// A snapshot (kind 6).
    case snapshot(SnapshotMessage)
    /// willNavigate or didNavigate, told apart by ``NavigationEventMessage/phase``.
    case navigation(NavigationEventMessage)
    /// A navigation command (kind 9).
    case navigationCommand(NavigationCommandMessage)
    /// A diagnostic (kind 10).
    case diagnostic(DiagnosticMessage)
    /// An acknowledgement (kind 11).
    case ack(Ack)
    /// A heartbeat (kind 12).
    case heartbeat(Heartbeat)
    /// A status request (kind 13).
    case statusRequest(StatusRequest)
    /// A status reply (kind 14).
    case statusReply(StatusReply)
    /// A presentable report (kind 15).
    case presentableReport(PresentableReport)
    /// A replay request (kind 16).
    case replayRequest(ReplayRequest)
    /// A replay reply (kind 17).
    case replay(ReplayReply)

    /// The message inside, as an encodable value.
    public var message: any WireMessageEncodable {
        switch self {
        case .step(let message): return message
        case .deepLink(let message): return message
        case .action(let message): return message
        case .state(let message): return message
        case .snapshotRequest(let message): return message
        case .snapshot(let message): return message
        case .navigation(let message): return message
        case .navigationCommand(let message): return message
        case .diagnostic(let message): return message
        case .ack(let message): return message
        case .heartbeat(let message): return message
        case .statusRequest(let message): return message
        case .statusReply(let message): return message
        case .presentableReport(let message): return message
        case .replayRequest(let message): return message
        case .replay(let message): return message
        }
    }

    /// The message's envelope.
    public var envelope: Envelope {
        switch self {
        case .step(let message): return message.envelope
        case .deepLink(let message): return message.envelope
        case .action(let message): return message.envelope
        case .state(let message): return message.envelope
        case .snapshotRequest(let message): return message.envelope
        case .snapshot(let message): return message.envelope
        case .navigation(let message): return message.envelope
        case .navigationCommand(let message): return message.envelope
        case .diagnostic(let message): return message.envelope
        case .ack(let message): return message.envelope
        case .heartbeat(let message): return message.envelope
        case .statusRequest(let message): return message.envelope
        case .statusReply(let message): return message.envelope
        case .presentableReport(let message): return message.envelope
        case .replayRequest(let message): return message.envelope
        case .replay(let message): return message.envelope
        }
    }

    /// The message's trace frame (PROTOCOL.md §4.5), for the kinds that carry one.
    public var traceContext: TraceContext? {
        switch self {
        case .step(let message): return message.traceContext
        case .deepLink(let message): return message.traceContext
        case .action(let message): return message.traceContext
        case .state(let message): return message.traceContext
        case .navigation(let message): return message.traceContext
        case .navigationCommand(let message): return message.traceContext
        default: return nil
        }
    }

    /// The message kind.
    public var kind: MessageKind { message.kind }

    /// The topic (frame 0).
    public var topic: String { message.topic }

    /// Replaces the buffer's contents with this message's frames.
    public func encode(into buffer: inout FrameBuffer) throws(WireError) {
        try message.encode(into: &buffer)
    }

    /// Decodes and validates a whole message.
    ///
    /// Checks, in order: the outline (``RoutedHeader/decode(from:limits:texts:)``), the exact frame
    /// count of the kind, then each body frame: names (`[A-Za-z0-9_.:-]`), UTF-8 texts, values
    /// in the envelope's content type, enumerated words (verbs, kinds, events), and that topic
    /// ids repeated in the body (deep link name, flow name, reason code, heartbeat source) agree.
    /// - Throws: a ``WireError`` whose reason is a diagnostic reason code: `malformed`,
    ///   `unsupported-version`, `unknown-kind`, `oversize` or `bad-params` (params that do
    ///   not decode to a map).
    public static func decode(from buffer: FrameBuffer, limits: WireLimits = .default) throws(WireError) -> WireMessage
    {
        let header = try RoutedHeader.decode(from: buffer, limits: limits)
        return try decode(from: buffer, header: header, limits: limits)
    }

    /// Decodes the body of a message whose header is already decoded.
    public static func decode(
        from buffer: FrameBuffer, header: RoutedHeader, limits: WireLimits = .default
    ) throws(WireError) -> WireMessage {
        try header.requireFrameCount(buffer)
        let envelope = header.envelope
        let id = String(header.topicID)
        let contentType = envelope.contentType
        let trace = try header.traceContext(in: buffer)
        switch header.kind {
        case .step, .deepLink, .action:
            let view = try NamedMessageView.decode(from: buffer, header: header, limits: limits)
            let params = try buffer.params(3, contentType: contentType, limits: limits)
            switch header.kind {
            case .step:
                return .step(
                    StepMessage(stepperID: id, envelope: envelope, name: view.name, params: params, traceContext: trace)
                )
            case .deepLink:
                return .deepLink(
                    DeepLinkMessage(envelope: envelope, name: view.name, params: params, traceContext: trace))
            default:
                return .action(
                    ActionMessage(
                        reactorID: id, envelope: envelope, name: view.name, params: params, traceContext: trace))
            }
        case .state:
            let state = try buffer.value(2, contentType: contentType, limits: limits)
            return .state(StateMessage(reactorID: id, envelope: envelope, state: state, traceContext: trace))
        case .snapshot:
            let state = try buffer.value(2, contentType: contentType, limits: limits)
            return .snapshot(SnapshotMessage(reactorID: id, envelope: envelope, state: state))
        case .snapshotRequest:
            return .snapshotRequest(SnapshotRequest(reactorID: id, envelope: envelope))
        case .willNavigate, .didNavigate:
            let flow = try buffer.text(2, field: "flow name", min: 1, max: limits.maxNameBytes)
            if flow != id { throw .malformed("topic \(quoted(header.topic)) does not match flow name \(quoted(flow))") }
            let stepName = try buffer.name(3, field: "step name", limits: limits)
            let params = try buffer.params(4, contentType: contentType, limits: limits)
            let presentable = try buffer.text(5, field: "presentable id", min: 0, max: 255)
            return .navigation(
                NavigationEventMessage(
                    phase: header.kind == .willNavigate ? .will : .did, envelope: envelope, flow: flow,
                    stepName: stepName, params: params, presentableID: presentable.isEmpty ? nil : presentable,
                    traceContext: trace))
        case .navigationCommand:
            let verbText = try buffer.text(2, field: "verb", min: 1, max: 255)
            guard let verb = NavigationVerb(rawValue: verbText) else {
                throw .malformed("navigation verb \(quoted(verbText)) (frame 2) is unknown")
            }
            let target = try buffer.text(3, field: "target presentable id", min: 0, max: 255)
            let container = try buffer.text(
                4, field: "container presentable id", min: 0, max: verb == .setTabs ? Int.max : 255)
            if verb == .setTabs, !container.isEmpty { try validateTabList(container) }
            let kindText = try buffer.text(5, field: "presentable kind", min: 0, max: 255)
            var presentableKind: PresentableKind? = nil
            if !kindText.isEmpty {
                guard let known = PresentableKind(rawValue: kindText) else {
                    throw .malformed("presentable kind \(quoted(kindText)) (frame 5) is unknown")
                }
                presentableKind = known
            }
            return .navigationCommand(
                NavigationCommandMessage(
                    envelope: envelope, flow: id, verb: verb, target: target,
                    container: container.isEmpty ? nil : container, presentableKind: presentableKind,
                    traceContext: trace))
        case .diagnostic:
            let code = try buffer.name(2, field: "reason code", limits: limits)
            if code != id {
                throw .malformed("topic \(quoted(header.topic)) does not match reason code \(quoted(code))")
            }
            let value = try buffer.value(3, contentType: contentType, limits: limits)
            guard case .map(let details) = value else {
                throw .malformed("diagnostic details (frame 3) are \(kindName(value)), a map expected")
            }
            guard case .string = details["message"] else {
                throw .malformed("diagnostic details (frame 3) have no string \"message\"")
            }
            return .diagnostic(
                DiagnosticMessage(envelope: envelope, reason: DiagnosticReason(rawValue: code), details: details))
        case .ack:
            let sequence = try buffer.withFrame(2) { (raw) throws(WireError) -> UInt64 in
                if raw.count != 8 { throw .malformed("ack sequence (frame 2) is \(raw.count) bytes, 8 expected") }
                var reader = ByteReader(raw, what: "ack")
                return try reader.u64("sequence")
            }
            return .ack(Ack(envelope: envelope, acknowledgedSource: id, acknowledgedSequence: sequence))
        case .heartbeat:
            if id != envelope.source {
                throw .malformed(
                    "heartbeat topic \(quoted(header.topic)) does not match source \(quoted(envelope.source))")
            }
            return .heartbeat(Heartbeat(envelope: envelope))
        case .statusRequest:
            guard buffer.count > 2 else { return .statusRequest(StatusRequest(envelope: envelope)) }
            let params = try WirePayload(contentType: contentType, bytes: buffer.frameBytes(2)).decodeParams(
                limits: limits)
            return .statusRequest(StatusRequest(envelope: envelope, params: params))
        case .statusReply:
            if contentType != .json { throw .malformed("status reply content type is \(contentType), json expected") }
            let value = try buffer.value(2, contentType: .json, limits: limits)
            guard case .map(let status) = value else {
                throw .malformed("status reply (frame 2) is \(kindName(value)), a map expected")
            }
            return .statusReply(StatusReply(envelope: envelope, status: status))
        case .presentableReport:
            let eventText = try buffer.text(2, field: "presentable event", min: 1, max: 255)
            guard let event = PresentableEvent(rawValue: eventText) else {
                throw .malformed("presentable event \(quoted(eventText)) (frame 2) is unknown")
            }
            return .presentableReport(PresentableReport(envelope: envelope, presentableID: id, event: event))
        case .replayRequest:
            let params = try WirePayload(contentType: contentType, bytes: buffer.frameBytes(2)).decodeParams(
                limits: limits)
            return .replayRequest(try ReplayRequest(envelope: envelope, params: params))
        case .replay:
            let value = try buffer.value(2, contentType: contentType, limits: limits)
            guard case .map(let header) = value else {
                throw .malformed("replay reply (frame 2) is \(kindName(value)), a map expected")
            }
            let events = try PackedEvents(bytes: buffer.frameBytes(3))
            return .replay(try ReplayReply(envelope: envelope, header: header, events: events))
        }
    }
}
