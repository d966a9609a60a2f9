import FlowBusProtocol
import FlowBusWire
import Foundation
import ZeroMQ

/// Renders bus messages for people (one line each) and for tools (one JSON object each).
public enum MessageFormatter {
    /// A step as written in Swift: `moviePicked(withMovieId: 23452)`.
    public static func step(_ name: String, _ params: WireParams) -> String {
        CanonicalStep(name, params).description
    }

    /// One line per message, e.g. `did navigate flow=WishlistFlow step=moviePicked(withMovieId: 23452)`.
    public static func line(_ message: WireMessage) -> String {
        // The trace a message belongs to, for finding it in a tracing backend.
        guard let trace = message.traceContext else { return untracedLine(message) }
        return "\(untracedLine(message)) trace=\(trace.traceID)"
    }

    private static func untracedLine(_ message: WireMessage) -> String {
        switch message {
        case .step(let step):
            return
                "step stepper=\(step.stepperID) step=\(self.step(step.name, step.params)) source=\(step.envelope.source) seq=\(step.envelope.sequence)"
        case .deepLink(let link):
            return "deeplink step=\(step(link.name, link.params)) source=\(link.envelope.source)"
        case .navigation(let event):
            let presentable = event.presentableID.map { " presentable=\($0)" } ?? ""
            return
                "\(event.phase == .will ? "will" : "did") navigate flow=\(event.flow) step=\(step(event.stepName, event.params))\(presentable)"
        case .navigationCommand(let command):
            let container = command.container.map { $0.isEmpty ? "" : " container=\($0)" } ?? ""
            return "command flow=\(command.flow) \(command.verb.rawValue) \(command.target)\(container)"
        case .diagnostic(let diagnostic):
            let message = diagnostic.details["message"]?.stringValue ?? ""
            let others = diagnostic.details.filter { $0.key != "message" }.sorted { $0.key < $1.key }
                .map { "\($0.key)=\($0.value.displayText)" }.joined(separator: " ")
            return "diagnostic \(diagnostic.reason.rawValue): \(message)\(others.isEmpty ? "" : " [\(others)]")"
        case .action(let action):
            return
                "action reactor=\(action.reactorID) action=\(step(action.name, action.params)) source=\(action.envelope.source)"
        case .state(let state):
            return "state reactor=\(state.reactorID) seq=\(state.envelope.sequence) \(state.state.displayText)"
        case .snapshot(let snapshot):
            return
                "snapshot reactor=\(snapshot.reactorID) seq=\(snapshot.envelope.sequence) \(snapshot.state.displayText)"
        case .heartbeat(let heartbeat):
            return "heartbeat source=\(heartbeat.envelope.source)"
        case .ack(let ack):
            return "ack source=\(ack.acknowledgedSource) seq=\(ack.acknowledgedSequence)"
        default:
            return "\(message.kind) topic=\(message.topic)"
        }
    }

    /// One JSON object per message, with the topic, kind, envelope fields and body.
    public static func json(_ message: WireMessage) -> String {
        let envelope = message.envelope
        var object: WireParams = [
            "topic": .string(message.topic), "kind": .string("\(message.kind)"),
            "source": .string(envelope.source), "seq": .int(Int64(clamping: envelope.sequence)),
            "timestamp_us": .int(envelope.timestamp),
        ]
        switch message {
        case .step(let step):
            object["stepper"] = .string(step.stepperID)
            object["name"] = .string(step.name)
            object["params"] = .map(step.params)
        case .deepLink(let link):
            object["name"] = .string(link.name)
            object["params"] = .map(link.params)
        case .navigation(let event):
            object["flow"] = .string(event.flow)
            object["step"] = .string(event.stepName)
            object["params"] = .map(event.params)
            object["presentable"] = event.presentableID.map(WireValue.string) ?? .null
        case .navigationCommand(let command):
            object["flow"] = .string(command.flow)
            object["verb"] = .string(command.verb.rawValue)
            object["target"] = .string(command.target)
            object["container"] = command.container.map(WireValue.string) ?? .null
        case .diagnostic(let diagnostic):
            object["reason"] = .string(diagnostic.reason.rawValue)
            object["details"] = .map(diagnostic.details)
        case .action(let action):
            object["reactor"] = .string(action.reactorID)
            object["name"] = .string(action.name)
            object["params"] = .map(action.params)
        case .state(let state):
            object["reactor"] = .string(state.reactorID)
            object["state"] = state.state
        case .snapshot(let snapshot):
            object["reactor"] = .string(snapshot.reactorID)
            object["state"] = snapshot.state
        default:
            break
        }
        if let trace = message.traceContext {
            object["traceparent"] = .string(trace.traceparent)
            if !trace.tracestate.isEmpty { object["tracestate"] = .string(trace.tracestate) }
        }
        return (try? WireJSON.string(.map(object))) ?? "{}"
    }

    /// flowd's status for people: flows as an indented tree, then bindings and counters.
    public static func status(_ status: WireParams) -> String {
        var lines: [String] = []
        func node(_ value: WireValue, depth: Int) {
            guard let map = value.mapValue else { return }
            let visible = map["visible"]?.boolValue == true ? "visible" : "hidden"
            let flow = map["flow"]?.stringValue.map { " (flow \($0))" } ?? ""
            lines.append(
                String(repeating: "  ", count: depth)
                    + "- \(map["kind"]?.stringValue ?? "?") \(map["id"]?.stringValue ?? "?") [\(visible)]\(flow)")
            for child in map["children"]?.listValue ?? [] { node(child, depth: depth + 1) }
            if let presented = map["presented"] {
                lines.append(String(repeating: "  ", count: depth + 1) + "presented:")
                node(presented, depth: depth + 2)
            }
        }
        // flowd lists at most so many of each; the totals say how many there are.
        func more(_ key: String, listed: Int) {
            guard let total = status[key + "_total"]?.intValue, total > listed else { return }
            lines.append(
                "  … \(total - Int64(listed)) more (\(total) in all; `flowctl status --\(key)` pages through them)")
        }
        lines.append("flows:")
        for flow in status["flows"]?.listValue ?? [] {
            guard let map = flow.mapValue else { continue }
            let parent = map["parent"]?.stringValue.map { " child of \($0)" } ?? ""
            let ready = map["ready"]?.boolValue == true ? "ready" : "not ready"
            lines.append("  \(map["id"]?.stringValue ?? "?")\(parent) (\(ready))")
            if let root = map["root"] { node(root, depth: 2) }
        }
        more("flows", listed: status["flows"]?.listValue?.count ?? 0)
        lines.append("bindings:")
        for binding in status["bindings"]?.listValue ?? [] {
            guard let map = binding.mapValue else { continue }
            lines.append(
                "  \(map["stepper"]?.stringValue ?? "?") -> \(map["flow"]?.stringValue ?? "?") @ \(map["presentable"]?.stringValue ?? "?")"
            )
        }
        more("bindings", listed: status["bindings"]?.listValue?.count ?? 0)
        lines.append("steppers:")
        for (id, counters) in (status["steppers"]?.mapValue ?? [:]).sorted(by: { $0.key < $1.key }) {
            let accepted = counters.mapValue?["accepted"]?.displayText ?? "0"
            let dropped = counters.mapValue?["dropped"]?.displayText ?? "{}"
            lines.append("  \(id): accepted \(accepted), dropped \(dropped)")
        }
        more("steppers", listed: status["steppers"]?.mapValue?.count ?? 0)
        if let ingress = status["ingress"] { lines.append("ingress: \(ingress.displayText)") }
        if let events = status["events"]?.mapValue {
            // `unsubscribed` alone reads as an error: it is what no subscriber wanted, so not encoded.
            let published = events["published"]?.displayText ?? "0"
            let hwm = events["dropped_hwm"]?.displayText ?? "0"
            let unwanted = events["unsubscribed"]?.displayText ?? "0"
            lines.append(
                "events: published \(published), dropped at the high-water mark \(hwm), not sent (no subscriber wanted the topic) \(unwanted)"
            )
            if let head = events["head"]?.intValue {
                // Where a subscriber resumes from (`flowctl echo --since`).
                let kept = events["kept_in_memory"]?.displayText ?? "0"
                let oldest = events["oldest_in_memory"]?.intValue.map { ", from \($0)" } ?? ""
                lines.append("event sequence: \(head) (kept in memory: \(kept)\(oldest))")
            }
        }
        if let journal = status["journal"]?.mapValue {
            let restored = journal["restored"]?.displayText ?? "0"
            let appended = journal["appended"]?.displayText ?? "0"
            let checkpoint =
                journal["checkpoint"]?.mapValue?["entry"].map { ", checkpoint at entry \($0.displayText)" } ?? ""
            lines.append(
                "journal: \(journal["path"]?.stringValue ?? "?"): restored \(restored) entries, appended \(appended)\(checkpoint)"
            )
            let history = journal["lease"]?.mapValue?["history"]?.listValue?.compactMap(\.mapValue) ?? []
            for (index, record) in history.enumerated() {
                let acquired =
                    record["acquired"]?.doubleValue.map { Date(timeIntervalSince1970: $0).formatted(.iso8601) } ?? "?"
                let who =
                    "\(record["instance"]?.stringValue ?? "?") (pid \(record["pid"]?.displayText ?? "?") on \(record["host"]?.stringValue ?? "?"))"
                lines.append(
                    index == 0 ? "lease: held by \(who) since \(acquired)" : "  before: \(who) from \(acquired)")
            }
        }
        return lines.joined(separator: "\n")
    }
}
