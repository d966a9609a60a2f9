import FlowBusProtocol
import FlowBusWire
import ZeroMQ

extension Socket {
    /// Applies `event` (from this DEALER's monitor) to `links` and `outbox`: drops stale
    /// connections, counts connections. Returns what the outbox says to send.
    package func follow(
        _ event: MonitorEvent, links: inout FlowdLinks, outbox: inout ReliableOutbox
    ) throws(ZMQError) -> ReliableOutbox.Action {
        let change: FlowdLinks.Change
        switch event.kind {
        case .connected?: change = links.connected(event.endpoint)
        case .disconnected?: change = links.disconnected(event.endpoint)
        default: return .none
        }
        for endpoint in change.stale {
            try disconnect(endpoint)
            try connect(endpoint)
            outbox.disconnected()
        }
        if change.isLost { outbox.disconnected() }
        return change.isNew ? outbox.connected() : .none
    }
}
