import FlowBusProtocol
import FlowBusWire
import Logging
import ZeroMQ

/// A daemon's ROUTER endpoint for queries that change nothing (flowd's `control`): each request
/// is answered on its own, unnumbered in any ledger, and each peer is held to a rate.
///
/// The control plane never starves the data plane: a turn answers a bounded number of requests
/// and reads a bounded number (refused and dropped ones cost little, so a flood drains fast).
/// Past its rate a peer's request is refused as `rate-limited` or dropped before anything is built
/// for it (``RateLimiter``); one `rate-limited` diagnostic per interval stands for all of them.
/// Used by one thread, like its socket.
package final class QueryEndpoint {
    /// What the endpoint counted.
    package struct Counters: Sendable, Equatable {
        package var requests = 0
        package var answered = 0
        /// Requests whose peer was gone (or not reading) when the reply was due: no reply built.
        package var peerGone = 0
    }

    package let replier: RouterReplier
    package private(set) var counters = Counters()
    private var limiter: RateLimiter
    private let accepts: Set<MessageKind>
    private let limits: WireLimits
    private let logger: Logger
    private let reportInterval: Duration
    private var nextReport: ContinuousClock.Instant?
    private var received = RoutedFrames()

    /// - Parameters:
    ///   - accepts: The kinds it answers; any other is refused as `unknown-kind`.
    ///   - limiter: Each peer's rate.
    ///   - reportInterval: How often the refusals and drops over the rate are reported, at most.
    package init(
        replier: RouterReplier, accepts: Set<MessageKind>, limiter: RateLimiter, limits: WireLimits,
        reportInterval: Duration, logger: Logger
    ) {
        self.replier = replier
        self.accepts = accepts
        self.limiter = limiter
        self.limits = limits
        self.reportInterval = reportInterval
        self.logger = logger
    }

    /// Reads requests until `maxAnswered` of them were handed to `answer`, `maxRead` were read, or
    /// none is left. `answer` replies with ``reply(to:building:)`` or refuses with ``refuse(_:_:request:)``.
    package func read(
        now: ContinuousClock.Instant, maxAnswered: Int, maxRead: Int, answer: (InboundMessage) -> Void
    ) throws(ZMQError) {
        var answered = 0
        var read = 0
        while answered < maxAnswered, read < maxRead, try replier.transport.receive(into: &received) {
            read += 1
            counters.requests += 1
            let peer = received.routingID
            let header: RoutedHeader
            do {
                header = try RoutedHeader.decode(from: received.frames, limits: limits)
            } catch {
                if limiter.admit(peer, now: now) == .allow {
                    replier.refuse(
                        Refusal(error, frames: received.frames, endpoint: replier.name, limits: limits), to: peer)
                }
                continue
            }
            switch limiter.admit(peer, now: now) {
            case .allow:
                break
            case .refuse(let retryAfter):
                // To the requester only: the interval's report stands for all of them on the bus.
                let milliseconds = max(1, Int64(retryAfter.wholeMilliseconds))
                let refusal = Refusal(
                    .rateLimited,
                    "more than \(Int(limiter.burst)) control requests at once or \(limiter.rate) per second: "
                        + "not answered; retry after \(milliseconds) ms (limits.controlRate, limits.controlBurst)",
                    endpoint: replier.name, header: header, extra: ["retry_after_ms": .int(milliseconds)])
                replier.refuse(refusal, to: peer, count: 0, publish: false, log: false)
                continue
            case .drop:
                continue
            }
            guard accepts.contains(header.kind) else {
                let names = accepts.map { "\($0)" }.sorted().joined(separator: ", ")
                replier.refuse(
                    Refusal(
                        .unknownKind, "the \(replier.name) endpoint answers \(names) only, not \(header.kind)",
                        endpoint: replier.name, header: header),
                    to: peer)
                continue
            }
            answered += 1
            answer(InboundMessage(header: header, frames: received.frames, peer: peer))
        }
    }

    /// Refuses a request the daemon cannot answer (its params are wrong).
    package func refuse(_ reason: DiagnosticReason, _ detail: String, request: InboundMessage) {
        replier.refuse(Refusal(reason, detail, endpoint: replier.name, header: request.header), to: request.peer)
    }

    /// Replies to `peer` with what `build` makes, built only if the peer is still there.
    package func reply(to peer: [UInt8], building build: () -> FrameBuffer) {
        do {
            if try replier.transport.send(to: peer, building: build) {
                counters.answered += 1
                return
            }
        } catch {
            logger.debug("reply on \(replier.name) not sent: \(error)")
        }
        counters.peerGone += 1
    }

    /// A fresh envelope of this socket's sequence.
    package func envelope(_ kind: MessageKind, contentType: ContentType) -> Envelope {
        replier.envelope(kind, contentType: contentType)
    }

    /// Once per interval: one log line and one `rate-limited` diagnostic for all the requests
    /// refused or dropped meanwhile, never one per request.
    package func reportRateLimited(now: ContinuousClock.Instant) {
        if let nextReport, now < nextReport { return }
        nextReport = now + reportInterval
        guard let report = limiter.takeReport() else { return }
        let busiest = report.busiest.peer.map { String($0, radix: 16, uppercase: false) }.joined()
        let message =
            "\(report.refused + report.dropped) control request(s) from \(report.peers) peer(s) over limits.controlRate "
            + "\(limiter.rate)/s (burst \(Int(limiter.burst))): \(report.refused) refused, "
            + "\(report.dropped) dropped unanswered; most from peer \(busiest) (\(report.busiest.count))"
        logger.warning("rate-limited: \(message)")
        replier.publisher.publishDiagnostic(
            .rateLimited, message,
            details: [
                "endpoint": .string(replier.name), "refused": .int(Int64(report.refused)),
                "dropped": .int(Int64(report.dropped)), "peers": .int(Int64(report.peers)),
                "retry_after_ms": .int(Int64((1000 / limiter.rate).rounded(.up))),
            ])
    }

    /// The endpoint's counts, as a status reply carries them.
    package var status: WireValue {
        let limited = limiter.counters
        return .map([
            "requests": .int(Int64(counters.requests)), "answered": .int(Int64(counters.answered)),
            "rate_limited": .map(["refused": .int(Int64(limited.refused)), "dropped": .int(Int64(limited.dropped))]),
            "peer_gone": .int(Int64(counters.peerGone)), "peers_tracked": .int(Int64(limiter.peerCount)),
            "rate": .double(limiter.rate), "burst": .int(Int64(limiter.burst)),
        ])
    }

    /// Requests refused and dropped over the rate.
    package var rateLimited: RateLimiter.Counters { limiter.counters }
}
