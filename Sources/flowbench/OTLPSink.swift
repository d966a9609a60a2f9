#if Tracing
import Foundation
import Hummingbird
import Logging
import Synchronization

/// A local OTLP/HTTP endpoint for the traced scenarios: it takes every export flowd sends to
/// `/v1/traces` and answers 200 with an empty ExportTraceServiceResponse, counting what came. It
/// does not decode: the cost measured is flowd's (making, batching, encoding and sending spans).
final class OTLPSink: Sendable {
    private let state = Mutex((requests: 0, bytes: 0, port: 0))

    /// `http://127.0.0.1:PORT`, the base address for `tracing.endpoint`.
    var endpoint: String { "http://127.0.0.1:\(state.withLock { $0.port })" }

    /// What arrived so far.
    var received: (requests: Int, bytes: Int) { state.withLock { ($0.requests, $0.bytes) } }

    /// One sink for the whole run, started on first use.
    static let shared: OTLPSink = {
        let sink = OTLPSink()
        sink.start()
        return sink
    }()

    private func start() {
        let ready = DispatchSemaphore(value: 0)
        let router = Router()
        router.post("/v1/traces") { [self] request, _ -> Response in
            let body = try await request.body.collect(upTo: 64 << 20)
            state.withLock {
                $0.requests += 1
                $0.bytes += body.readableBytes
            }
            return Response(status: .ok, headers: [.contentType: "application/x-protobuf"])
        }
        var logger = Logger(label: "otlp-sink")
        logger.logLevel = .warning
        let app = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { [self] channel in
                state.withLock { $0.port = channel.localAddress?.port ?? 0 }
                ready.signal()
            },
            logger: logger)
        // The server runs on the cooperative pool for the rest of the run; this thread is
        // flowbench's own, not one of the pool's, so it may wait for the port.
        Task { try await app.run() }
        ready.wait()
    }
}
#endif
