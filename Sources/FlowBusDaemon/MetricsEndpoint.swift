import FlowBusClient
import FlowBusConfiguration
import FlowBusProtocol
import FlowBusWire
import Foundation
import Logging
import Synchronization
import ZeroMQ

/// Serves a process's metrics to Prometheus: HTTP/1.x `GET /metrics` on a `tcp://` address,
/// answered `200` with the ``MetricsExposition`` (and `404` for any other path).
///
/// The HTTP is read and written on a ZeroMQ `STREAM` socket (raw TCP), owned by a thread of its
/// own, so no HTTP server library is needed and a slow scraper never holds up the bus. Each
/// response says `Connection: close` and carries a `Content-Length`; the client closes, or the
/// endpoint does `closeAfter` later (closing at once could cut off a response libzmq has not
/// written out yet).
public final class MetricsEndpoint: Sendable {
    /// The address as configured, e.g. `tcp://127.0.0.1:9464`.
    public let endpoint: String
    private let exposition: MetricsExposition
    private let logger: Logger
    private let wake = WakeSignal()
    private let stopping = Atomic<Bool>(false)
    private let running = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let resolved = Mutex<String?>(nil)

    /// Longest request head read before answering `431`.
    package static let maxRequestBytes = 8192
    /// Connections served at once; later ones are closed on arrival.
    package static let maxConnections = 64
    /// How long after its response a connection the client keeps open is closed.
    package static let closeAfter: Duration = .seconds(1)
    /// How long a connection may take to send its request.
    package static let requestTimeout: Duration = .seconds(10)

    public init(endpoint: String, exposition: MetricsExposition, logger: Logger) {
        self.endpoint = endpoint
        self.exposition = exposition
        self.logger = logger
    }

    /// The address bound, with a wildcard port (`tcp://127.0.0.1:*`) resolved; nil before ``start()``.
    public var boundEndpoint: String? { resolved.withLock { $0 } }

    /// Binds the address and starts serving on a thread of its own.
    /// - Throws: when the address cannot be bound (e.g. the port is in use).
    public func start() throws {
        let bound = DispatchSemaphore(value: 0)
        let failure = Mutex<(any Error)?>(nil)
        let thread = Thread { [self] in
            defer { finished.signal() }
            let context: Context
            let socket: Socket
            do {
                context = try Context(defaultLinger: 0)
                socket = try context.socket(.stream)
                try socket.bind(endpoint)
                let address = try socket.lastEndpoint
                resolved.withLock { $0 = address }
            } catch {
                failure.withLock { $0 = error }
                bound.signal()
                return
            }
            bound.signal()
            serve(socket)
            socket.close()
        }
        thread.name = "metrics-http"
        running.store(true, ordering: .releasing)
        thread.start()
        bound.wait()
        if let error = failure.withLock({ $0 }) {
            running.store(false, ordering: .releasing)
            throw error
        }
    }

    /// Stops serving and waits for the thread; safe to call twice, or without ``start()``.
    public func stop() {
        guard running.exchange(false, ordering: .acquiringAndReleasing) else { return }
        stopping.store(true, ordering: .releasing)
        wake.signal()
        finished.wait()
    }

    private struct Connection {
        package var opened: ContinuousClock.Instant
        package var request: [UInt8] = []
        /// When the response went out; later bytes from the peer are ignored.
        package var answered: ContinuousClock.Instant?
    }

    private func serve(_ socket: Socket) {
        let poller = Poller()
        do {
            try poller.add(socket)
        } catch {
            logger.error("metrics endpoint cannot poll its socket: \(error)")
            return
        }
        let wakeIndex = poller.add(fileDescriptor: wake.fileDescriptor)
        var connections: [[UInt8]: Connection] = [:]
        // Ids this side closed: libzmq may still announce their disconnection.
        var closed: [[UInt8]: ContinuousClock.Instant] = [:]
        var frames: [[UInt8]] = []

        func close(_ id: [UInt8], now: ContinuousClock.Instant) {
            connections.removeValue(forKey: id)
            closed[id] = now
            do {
                if try socket.send(id, more: true, mode: .nonBlocking) {
                    try socket.send([UInt8](), mode: .nonBlocking)
                }
            } catch {
                // Already gone (EHOSTUNREACH): nothing to close.
            }
        }

        while !stopping.load(ordering: .acquiring) {
            do {
                // Idle, it sleeps until a peer or stop() wakes it; with connections open it wakes
                // to close those past their time.
                try poller.poll(timeout: connections.isEmpty ? -1 : 250)
            } catch {
                if !error.isContextTerminated { logger.error("metrics endpoint poll failed: \(error)") }
                return
            }
            if poller.isReadable(wakeIndex) { wake.clear() }
            let now = ContinuousClock.now
            do {
                while try socket.receive(into: &frames, mode: .nonBlocking) {
                    guard frames.count == 2 else { continue }
                    let id = frames[0]
                    let data = frames[1]
                    if data.isEmpty {
                        // A connection opening, or closing (by the peer, or the end of one this side closed).
                        if connections.removeValue(forKey: id) != nil || closed.removeValue(forKey: id) != nil {
                            continue
                        }
                        if connections.count >= Self.maxConnections {
                            close(id, now: now)
                        } else {
                            connections[id] = Connection(opened: now)
                        }
                        continue
                    }
                    guard closed[id] == nil else { continue }
                    var connection = connections[id] ?? Connection(opened: now)
                    guard connection.answered == nil else { continue }
                    connection.request += data
                    guard let response = respond(to: connection.request) else {
                        connections[id] = connection
                        continue
                    }
                    connection.answered = now
                    connection.request = []
                    connections[id] = connection
                    do {
                        // A peer too slow to take its response (send queue full) is closed instead.
                        guard try socket.send(id, more: true, mode: .nonBlocking),
                            try socket.send(response, mode: .nonBlocking)
                        else {
                            close(id, now: now)
                            continue
                        }
                    } catch {
                        connections.removeValue(forKey: id)
                    }
                }
            } catch {
                if !error.isContextTerminated { logger.error("metrics endpoint receive failed: \(error)") }
                return
            }
            for (id, connection) in connections {
                let expired =
                    connection.answered.map { now - $0 >= Self.closeAfter }
                    ?? (now - connection.opened >= Self.requestTimeout)
                if expired { close(id, now: now) }
            }
            closed = closed.filter { now - $0.value < .seconds(60) }
        }
    }

    /// The response to a request head, or nil while the head is incomplete.
    package func respond(to request: [UInt8]) -> [UInt8]? {
        guard let headEnd = Self.endOfHead(request) else {
            return request.count > Self.maxRequestBytes
                ? Self.response(status: "431 Request Header Fields Too Large", body: "request head too large\n") : nil
        }
        let head = String(decoding: request[..<headEnd], as: UTF8.self)
        let requestLine = head.split(whereSeparator: \.isNewline).first.map(String.init) ?? ""
        let parts = requestLine.split(separator: " ")
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else {
            return Self.response(status: "400 Bad Request", body: "not an HTTP/1.x request\n")
        }
        let method = parts[0]
        let path = parts[1].split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        guard path == "/metrics" else {
            return Self.response(status: "404 Not Found", body: "not found: metrics are served at /metrics\n")
        }
        guard method == "GET" || method == "HEAD" else {
            return Self.response(
                status: "405 Method Not Allowed", body: "use GET\n", extraHeaders: "Allow: GET, HEAD\r\n")
        }
        return Self.response(
            status: "200 OK", contentType: exposition.contentType, body: exposition.render(),
            includeBody: method == "GET")
    }

    /// The index just past the blank line ending a request head (CRLF or bare LF), if there is one.
    package static func endOfHead(_ bytes: [UInt8]) -> Int? {
        var index = 0
        while index < bytes.count {
            if bytes[index] == 10 {
                if index + 1 < bytes.count, bytes[index + 1] == 10 { return index + 2 }
                if index + 2 < bytes.count, bytes[index + 1] == 13, bytes[index + 2] == 10 { return index + 3 }
            }
            index += 1
        }
        return nil
    }

    package static func response(
        status: String, contentType: String = "text/plain; charset=utf-8", body: String, extraHeaders: String = ""
    ) -> [UInt8] {
        response(status: status, contentType: contentType, body: Array(body.utf8), extraHeaders: extraHeaders)
    }

    package static func response(
        status: String, contentType: String, body: [UInt8], includeBody: Bool = true, extraHeaders: String = ""
    ) -> [UInt8] {
        let head =
            "HTTP/1.1 \(status)\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.count)\r\n\(extraHeaders)Connection: close\r\n\r\n"
        return Array(head.utf8) + (includeBody ? body : [])
    }
}

/// Starts a metrics endpoint on `address` (a config's `metrics` key), if it names one.
/// - Parameter what: The config key, for the warning when there is no `exposition` to serve.
/// - Throws: when the address cannot be bound.
package func startMetricsEndpoint(
    _ address: String?, exposition: MetricsExposition?, what: String, logger: Logger
) throws -> MetricsEndpoint? {
    guard let address else { return nil }
    guard let exposition else {
        logger.warning(
            "\(what) is \(address), but this process was given no metrics to serve (bootstrap MetricsSystem with a Prometheus registry and pass its MetricsExposition)"
        )
        return nil
    }
    let endpoint = MetricsEndpoint(endpoint: address, exposition: exposition, logger: logger)
    try endpoint.start()
    let bound = endpoint.boundEndpoint ?? address
    logger.info("metrics served at http://\(bound.dropFirst("tcp://".count))/metrics")
    return endpoint
}
