import CZeroMQ
import Foundation
import Synchronization

/// One authentication request from libzmq (RFC 27, ZAP 1.0).
public struct ZAPRequest: Sendable, Hashable {
    /// The server socket's ZAP domain.
    public var domain: String
    /// The peer's address, e.g. `127.0.0.1`.
    public var address: String
    /// The routing id the peer announced.
    public var routingID: [UInt8]
    /// `NULL`, `PLAIN` or `CURVE`.
    public var mechanism: String
    /// Mechanism-specific credentials: for CURVE, the client's 32-byte public key.
    public var credentials: [[UInt8]]

    /// For CURVE: the client's public key in Z85, as configuration files list it.
    public var curvePublicKey: String? {
        guard mechanism == "CURVE", let key = credentials.first, key.count == 32 else { return nil }
        return Z85.encode(key)
    }
}

/// The handler's answer to a ``ZAPRequest``.
public enum ZAPDecision: Sendable, Hashable {
    /// Admit the peer; `userID` is attached to its messages.
    case allow(userID: String = "")
    /// Refuse the peer with a reason (status 400).
    case deny(reason: String)
}

/// Answers libzmq's authentication requests for one context on a thread of its own.
///
/// Start it before binding any CURVE server socket in the same context: a CURVE server with no
/// handler admits every client (encryption without authentication).
public final class ZAPHandler: Sendable {
    private final class Lifecycle: Sendable {
        let stopping = Atomic<Bool>(false)
        let finished = DispatchSemaphore(value: 0)
    }

    private let lifecycle = Lifecycle()

    /// Binds `inproc://zeromq.zap.01` in `context` and starts answering with `policy`.
    /// - Parameter onDecision: called after each decision (for logs and counters), on the handler's thread.
    public init(
        context: Context,
        policy: @escaping @Sendable (ZAPRequest) -> ZAPDecision,
        onDecision: @escaping @Sendable (ZAPRequest, ZAPDecision) -> Void = { _, _ in }
    ) throws(ZMQError) {
        let bound = DispatchSemaphore(value: 0)
        let bindError = Mutex<ZMQError?>(nil)
        let thread = Thread { [lifecycle] in
            defer { lifecycle.finished.signal() }
            let socket: Socket
            do throws(ZMQError) {
                socket = try context.socket(.rep)
                try socket.setOption(.linger(0))
                try socket.bind("inproc://zeromq.zap.01")
            } catch {
                bindError.withLock { $0 = error }
                bound.signal()
                return
            }
            bound.signal()
            ZAPHandler.serve(socket: socket, stopping: lifecycle.stopping, policy: policy, onDecision: onDecision)
            socket.close()
        }
        thread.name = "zap-handler"
        thread.start()
        bound.wait()
        if let error = bindError.withLock({ $0 }) { throw error }
    }

    /// Stops answering and waits for the handler's thread to finish.
    public func stop() {
        if lifecycle.stopping.exchange(true, ordering: .acquiringAndReleasing) == false {
            lifecycle.finished.wait()
        }
    }

    deinit {
        stop()
    }

    private static func serve(
        socket: Socket,
        stopping: borrowing Atomic<Bool>,
        policy: (ZAPRequest) -> ZAPDecision,
        onDecision: (ZAPRequest, ZAPDecision) -> Void
    ) {
        var frames: [[UInt8]] = []
        while !stopping.load(ordering: .acquiring) {
            do {
                guard try socket.receive(into: &frames, mode: .timeout(milliseconds: 50)) else { continue }
                try socket.send(message: answer(frames, policy: policy, onDecision: onDecision))
            } catch {
                // ETERM: the context is shutting down; nothing else can be answered.
                return
            }
        }
    }

    static func answer(
        _ frames: [[UInt8]],
        policy: (ZAPRequest) -> ZAPDecision,
        onDecision: (ZAPRequest, ZAPDecision) -> Void
    ) -> [[UInt8]] {
        func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }
        let requestID = frames.count > 1 ? frames[1] : []
        // Frames: version, request id, domain, address, identity, mechanism, credentials...
        guard frames.count >= 6, text(frames[0]) == "1.0" else {
            return [Array("1.0".utf8), requestID, Array("500".utf8), Array("malformed ZAP request".utf8), [], []]
        }
        let request = ZAPRequest(
            domain: text(frames[2]),
            address: text(frames[3]),
            routingID: frames[4],
            mechanism: text(frames[5]),
            credentials: Array(frames.dropFirst(6))
        )
        let decision = policy(request)
        onDecision(request, decision)
        switch decision {
        case .allow(let userID):
            return [Array("1.0".utf8), requestID, Array("200".utf8), Array("OK".utf8), Array(userID.utf8), []]
        case .deny(let reason):
            return [Array("1.0".utf8), requestID, Array("400".utf8), Array(reason.utf8), [], []]
        }
    }
}
