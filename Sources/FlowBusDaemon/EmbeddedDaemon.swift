import FlowBusProtocol
import FlowBusWire
import Logging

/// A ``DaemonLoop`` without sockets or a clock, for deterministic tests of what the daemons
/// carry out, in the spirit of NIO's `EmbeddedChannel`: messages are handed to ``router``, a turn
/// is run with ``turn()`` at ``now`` (moved on with ``advance(by:)``), and what the daemon sent
/// to each peer and published is read back from ``router`` and ``events``. Look-ups in the durable
/// ledger run on the turn's thread, so their answers are in at the next turn.
package final class EmbeddedDaemon {
    /// The data endpoint's socket: deliver messages, take what was sent.
    package let router = EmbeddedRouterTransport()
    /// The publisher's socket: subscribe, take what was published.
    package let events = EmbeddedPublisherTransport()
    package let loop: DaemonLoop
    private let time: Time

    private final class Time {
        var now = ContinuousClock.now
    }

    /// The loop's clock.
    package var now: ContinuousClock.Instant { time.now }

    /// A loop running `role` behind an endpoint named `name` with `intake`.
    package init(
        role: any DaemonRole, intake: Intake, settings: DaemonLoop.Settings, name: String = "ingress",
        sourceID: String = "daemon#embedded", refusalDetails: WireParams = [:],
        logger: Logger = Logger(label: "flowbus.embedded")
    ) {
        let time = Time()
        self.time = time
        var settings = settings
        settings.looksUpInline = true
        let publisher = BusPublisher(
            transport: events, name: "events", sourceID: sourceID, contentType: .json, logger: logger)
        let replier = RouterReplier(
            name: name, transport: router, publisher: publisher, sourceID: sourceID, refusalDetails: refusalDetails,
            logger: logger)
        let endpoint = RouterEndpoint(replier: replier, intake: intake, limits: .default, logger: logger)
        // Without sockets to poll, making the loop cannot fail.
        loop = try! DaemonLoop(
            data: endpoint, publisher: publisher, control: DaemonControl(), role: role, settings: settings,
            logger: logger,
            clock: { time.now })
    }

    /// Runs one turn at ``now``.
    package func turn() {
        loop.turn(mayWait: false)
    }

    /// Moves the clock on.
    package func advance(by duration: Duration) {
        time.now += duration
    }
}
