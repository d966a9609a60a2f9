#if Studio
import FlowBusWire

/// How the studio describes one bus message to a page: a flat map with the fields a timeline,
/// a filter and a reactor panel need, already decoded.
///
/// Keys: `id` (the studio's own order, from 1), `kind` (`step`, `deepLink`, `action`, `state`,
/// `snapshot`, `willNavigate`, `didNavigate`, `command`, `diagnostic`), `t_us` (the sender's
/// timestamp), `source`, `seq`, `endpoint`, and per kind `stepper`, `step`, `params`, `flow`,
/// `presentable`, `verb`, `target`, `container`, `presentable_kind`, `reason`, `message`,
/// `details`, `reactor`, `action`, `state`; `trace_id` on a message with a trace frame (PROTOCOL.md §4.5).
public enum StudioEvent {
    /// The page's description of `message`, or nil for kinds a page does not show (heartbeats,
    /// acks, status, snapshot requests, reports).
    public static func describe(_ message: WireMessage, endpoint: String) -> WireParams? {
        let envelope = message.envelope
        var map: WireParams = [
            "t_us": .int(envelope.timestamp), "source": .string(envelope.source),
            "seq": .int(Int64(clamping: envelope.sequence)),
            "endpoint": .string(endpoint),
        ]
        switch message {
        case .step(let step):
            map["kind"] = "step"
            map["stepper"] = .string(step.stepperID)
            map["step"] = .string(step.name)
            map["params"] = .map(step.params)
        case .deepLink(let link):
            map["kind"] = "deepLink"
            map["step"] = .string(link.name)
            map["params"] = .map(link.params)
        case .action(let action):
            map["kind"] = "action"
            map["reactor"] = .string(action.reactorID)
            map["action"] = .string(action.name)
            map["params"] = .map(action.params)
        case .state(let state):
            map["kind"] = "state"
            map["reactor"] = .string(state.reactorID)
            map["state"] = state.state
        case .snapshot(let snapshot):
            map["kind"] = "snapshot"
            map["reactor"] = .string(snapshot.reactorID)
            map["state"] = snapshot.state
        case .navigation(let navigation):
            map["kind"] = navigation.phase == .will ? "willNavigate" : "didNavigate"
            map["flow"] = .string(navigation.flow)
            map["step"] = .string(navigation.stepName)
            map["params"] = .map(navigation.params)
            map["presentable"] = .string(navigation.presentableID ?? "")
        case .navigationCommand(let command):
            map["kind"] = "command"
            map["flow"] = .string(command.flow)
            map["verb"] = .string(command.verb.rawValue)
            map["target"] = .string(command.target)
            map["container"] = .string(command.container ?? "")
            map["presentable_kind"] = .string(command.presentableKind?.rawValue ?? "")
        case .diagnostic(let diagnostic):
            map["kind"] = "diagnostic"
            map["reason"] = .string(diagnostic.reason.rawValue)
            map["message"] = .string(diagnostic.message)
            map["details"] = .map(diagnostic.details)
            // Routing refusals name the stepper and flow: the timeline filters on them.
            for key in ["stepper", "flow", "presentable", "step", "reactor"] {
                if let value = diagnostic.details[key] { map[key] = value }
            }
        case .ack, .heartbeat, .statusRequest, .statusReply, .snapshotRequest, .presentableReport, .replayRequest,
            .replay:
            return nil
        }
        if let trace = message.traceContext { map["trace_id"] = .string(String(trace.traceID)) }
        return map
    }
}
#endif
