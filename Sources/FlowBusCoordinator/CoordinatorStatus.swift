import FlowBusProtocol
import FlowBusWire
import Flows
import Foundation
import ZeroMQ

/// flowd's status reply (PROTOCOL.md §4.3): the summary, and the lists a ``StatusQuery`` asks for,
/// each bounded so that a status flood or a huge topology cannot stall the loop (the counts stay
/// complete).
struct CoordinatorStatus {
    /// Children of a node listed at most (the lists are paged, see ``StatusQuery``).
    static let listLimit = StatusQuery.maxPageLimit

    /// The engine's tree and bindings: the pages the query asks for.
    var snapshot: CoordinatorSnapshot
    var started: Date
    var counters: IngressCounters
    var peers: [String: Intake.Liveness]
    var events: Publication.Counters
    /// The replay's part of `events`: the newest event sequence and the oldest kept (PROTOCOL.md §4.6).
    var eventStream: WireParams = [:]
    /// The control endpoint's, the metrics' and the journal's parts, as built by their owners.
    var control: WireValue
    var metrics: WireValue
    var journal: WireValue

    /// The reply to `query`.
    func reply(to query: StatusQuery) -> WireParams {
        func counts(_ counters: StepperCounters) -> WireValue {
            .map([
                "accepted": .int(Int64(counters.accepted)),
                "dropped": .map(
                    Dictionary(
                        uniqueKeysWithValues: counters.dropped.map { ($0.key.rawValue, WireValue.int(Int64($0.value))) }
                    )),
            ])
        }
        var status: WireParams = [
            "uptime_s": .double(Date().timeIntervalSince(started)),
            "flows_total": .int(Int64(snapshot.flowCount)),
            "bindings_total": .int(Int64(snapshot.bindingCount)),
            "steppers_total": .int(Int64(snapshot.stepperCount)),
            "totals": counts(snapshot.totals),
            "ingress": .map([
                "received": .int(Int64(counters.received)), "accepted": .int(Int64(counters.accepted)),
                "duplicates": .int(Int64(counters.duplicates)), "out_of_order": .int(Int64(counters.outOfOrder)),
                "journal_adopted": .int(Int64(counters.journalAdopted)),
                "journal_lost": .int(Int64(clamping: counters.journalLost)),
                "held_dropped": .int(Int64(counters.heldDropped)),
                "refused": .map(
                    Dictionary(
                        uniqueKeysWithValues: counters.refused.map { ($0.key.rawValue, WireValue.int(Int64($0.value))) }
                    )),
            ]),
            "peers_total": .int(Int64(peers.count)),
            "events": .map(
                [
                    "published": .int(Int64(events.published)), "dropped_hwm": .int(Int64(events.dropped)),
                    "unsubscribed": .int(Int64(events.unwanted)),
                ].merging(eventStream) { _, stream in stream }),
            "control": control,
            "metrics": metrics,
            "journal": journal,
        ]
        var pages: WireParams = [:]
        func page(_ name: String, _ page: StatusQuery.Page, matching: Int, listed: Int) {
            let next = page.offset + listed
            pages[name] = .map([
                "offset": .int(Int64(page.offset)), "limit": .int(Int64(page.limit)), "matching": .int(Int64(matching)),
                "next": next < matching ? .int(Int64(next)) : .null,
            ])
        }
        if query.sections.contains("flows") {
            page("flows", query.flows, matching: snapshot.flowsMatching, listed: snapshot.flows.count)
            status["flows"] = .list(snapshot.flows.map(\.statusEntry))
        }
        if query.sections.contains("bindings") {
            page("bindings", query.bindings, matching: snapshot.bindingsMatching, listed: snapshot.bindings.count)
            status["bindings"] = .list(snapshot.bindings.map(\.statusEntry))
        }
        if query.sections.contains("steppers") {
            // The engine took the page.
            status["steppers"] = .map(snapshot.steppers.mapValues(counts))
            page("steppers", query.steppers, matching: snapshot.steppersMatching, listed: snapshot.steppers.count)
        }
        if query.sections.contains("peers") {
            // One page, by source id: the reply stays bounded however many sources flowd holds.
            let wanted = query.peers
            let now = ContinuousClock.now
            let ids = peers.compactMap { source, peer -> String? in
                if let prefix = wanted.prefix, !source.hasPrefix(prefix) { return nil }
                if let alive = wanted.alive, alive == peer.isDead { return nil }
                return source
            }.sorted()
            let listed = ids.dropFirst(wanted.offset).prefix(wanted.limit)
            status["peers"] = .map(
                Dictionary(
                    uniqueKeysWithValues: listed.map { source in
                        let peer = peers[source]!
                        return (
                            source,
                            WireValue.map([
                                "alive": .bool(!peer.isDead), "heartbeats": .bool(peer.sendsHeartbeats),
                                "silent_ms": .int(Int64((now - peer.lastHeard).wholeMilliseconds)),
                                "role": .string(peer.role),
                            ])
                        )
                    }))
            page("peers", wanted, matching: ids.count, listed: listed.count)
        }
        status["pages"] = .map(pages)
        return status
    }
}

extension BindingInfo {
    /// This binding as an entry of a status reply's `bindings` (PROTOCOL.md §4.3).
    package var statusEntry: WireValue {
        .map([
            "stepper": .string(stepperID), "flow": .string(flow.description), "presentable": .string(presentableID),
            "remote": .bool(isRemote), "allowStepWhenNotPresented": .bool(allowStepWhenNotPresented),
            "allowStepWhenDismissed": .bool(allowStepWhenDismissed),
        ])
    }
}

extension FlowSnapshot {
    /// This flow as an entry of a status reply's `flows` (PROTOCOL.md §4.3).
    package var statusEntry: WireValue {
        func tree(_ node: NodeSnapshot) -> WireValue {
            var map: WireParams = [
                "id": .string(node.id), "kind": .string(node.kind.rawValue), "visible": .bool(node.isVisible),
                "children": .list(node.children.map(tree)),
            ]
            if let flow = node.childFlow { map["flow"] = .string(flow.description) }
            if let selected = node.selectedIndex { map["selected"] = .int(Int64(selected)) }
            if let presented = node.presented { map["presented"] = tree(presented) }
            if let reported = node.reportedVisibility { map["reported"] = .bool(reported) }
            return .map(map)
        }
        return .map([
            "id": .string(id.description), "name": .string(id.name),
            "parent": parent.map { .string($0.description) } ?? .null,
            "ready": .bool(isReady), "root": tree(root),
        ])
    }
}
