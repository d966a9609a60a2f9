import FlowBusWire

/// The connections a client's DEALER holds to flowd instances, kept from its monitor's events,
/// and what they mean for its ``ReliableOutbox``.
///
/// Only the active instance binds its endpoints, so a connection to a second instance means the
/// first one lost the lease: its machine is gone even if that connection does not know it yet
/// (a cut link closes nothing). That stale connection is dropped at once, and its endpoint
/// connected again to follow that instance when it is active again; otherwise the DEALER would
/// keep handing every other message to a peer that will never read it.
package struct FlowdLinks {
    /// The endpoints the socket connected to, to drop and reconnect them by the same name.
    package let endpoints: [String]
    /// Endpoints connected now, oldest first.
    package private(set) var connected: [String] = []

    package init(endpoints: [String]) {
        self.endpoints = endpoints
    }

    /// What a monitor event asks of the socket and the outbox.
    package struct Change: Equatable {
        /// Connections to drop (and endpoints to connect again): each one is gone for the outbox.
        package var stale: [String] = []
        /// A connection the outbox did not count yet.
        package var isNew = false
        /// A counted connection ended.
        package var isLost = false
    }

    package mutating func connected(_ endpoint: String) -> Change {
        guard !connected.contains(endpoint) else { return Change() }
        let stale = connected.filter { endpoints.contains($0) }
        connected.removeAll { stale.contains($0) }
        connected.append(endpoint)
        return Change(stale: stale, isNew: true)
    }

    package mutating func disconnected(_ endpoint: String) -> Change {
        guard let index = connected.firstIndex(of: endpoint) else { return Change() }
        connected.remove(at: index)
        return Change(isLost: true)
    }
}
