import FlowBusClient
import FlowBusProtocol
import Logging
import ZeroMQ

/// The ZAP handler of a daemon whose topology has a server key: it admits only
/// `security.allowedClients`, and reports each connection it refuses to the daemon's loop, which
/// refuses it like any message (counted, logged, published as `unauthorized`).
package enum DaemonAuthenticator {
    /// Starts the handler on `context`; nil when the topology has no server key. It must run before
    /// any CURVE socket binds: without it CURVE admits everyone.
    package static func start(
        context: Context, curve: CurveKeys, inbox: LoopInbox, logger: Logger
    ) throws -> ZAPHandler? {
        guard curve.requiresAuthentication else { return nil }
        return try ZAPHandler(context: context, policy: curve.decide) { request, decision in
            guard case .deny(let reason) = decision else { return }
            inbox.inject(
                Refusal(
                    reason: .unauthorized, detail: "connection from \(request.address) refused: \(reason)",
                    endpoint: "zap"))
        }
    }
}
