import FlowBusWire
import ZeroMQ

/// The connections a client's DEALER holds to flowd instances, kept from its monitor's events,
/// and what they mean for its ``ReliableOutbox``.
///
/// Only the active instance binds its endpoints, so a connection to a second instance means the
/// first one lost the lease: its machine is gone even if that connection does not know it yet
/// (a cut link closes nothing). That stale connection is dropped at once, and its endpoint
/// connected again to follow that instance when it is active again; otherwise the DEALER would
/// keep handing every other message to a peer that will never read it.
struct FlowdLinks {
    /// The endpoints the socket connected to, to drop and reconnect them by the same name.
    let endpoints: [String]
    /// Endpoints connected now, oldest first.
    private(set) var connected: [String] = []

    init(endpoints: [String]) {
        self.endpoints = endpoints
    }

    /// What a monitor event asks of the socket and the outbox.
    struct Change: Equatable {
        /// Connections to drop (and endpoints to connect again): each one is gone for the outbox.
        var stale: [String] = []
        /// A connection the outbox did not count yet.
        var isNew = false
        /// A counted connection ended.
        var isLost = false
    }

    mutating func connected(_ endpoint: String) -> Change {
        guard !connected.contains(endpoint) else { return Change() }
        let stale = connected.filter { endpoints.contains($0) }
        connected.removeAll { stale.contains($0) }
        connected.append(endpoint)
        return Change(stale: stale, isNew: true)
    }

    mutating func disconnected(_ endpoint: String) -> Change {
        guard let index = connected.firstIndex(of: endpoint) else { return Change() }
        connected.remove(at: index)
        return Change(isLost: true)
    }
}

extension Socket {
    /// Applies `event` (from this DEALER's monitor) to `links` and `outbox`: drops stale
    /// connections, counts connections. Returns what the outbox says to send.
    func follow(_ event: MonitorEvent, links: inout FlowdLinks, outbox: inout ReliableOutbox) throws(ZMQError) -> ReliableOutbox.Action {
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
