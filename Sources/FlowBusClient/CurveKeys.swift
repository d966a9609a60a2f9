import FlowBusProtocol
import FlowBusWire
import ZeroMQ

/// Keys loaded from a `SecurityConfig`, ready to apply to sockets.
public struct CurveKeys: Sendable, Hashable {
    /// The daemons' key pair (only in a daemon's config).
    public var server: CurveKeyPair?
    /// The daemons' public key, for clients.
    public var serverPublicKey: String?
    /// This client's key pair.
    public var client: CurveKeyPair?
    /// Client public keys the ZAP handler admits.
    public var allowedClients: Set<String>

    public init(
        server: CurveKeyPair? = nil, serverPublicKey: String? = nil, client: CurveKeyPair? = nil,
        allowedClients: Set<String> = []
    ) {
        self.server = server
        self.serverPublicKey = serverPublicKey
        self.client = client
        self.allowedClients = allowedClients
    }

    /// The ZAP domain FlowBus daemons use.
    public static let zapDomain = "flowbus"

    /// Makes `socket` a CURVE server when `endpoint` is tcp and a server key is configured.
    public func secureServer(_ socket: Socket, endpoint: String) throws(ZMQError) {
        guard endpoint.hasPrefix("tcp://"), let server else { return }
        try socket.setOptions([.curveServer(true), .curveSecretKey(server.secretKey), .zapDomain(Self.zapDomain)])
    }

    /// Gives `socket` this client's keys when `endpoint` is tcp and the server's key is configured.
    public func secureClient(_ socket: Socket, endpoint: String) throws(ZMQError) {
        guard endpoint.hasPrefix("tcp://"), let serverPublicKey else { return }
        // A client without a configured key gets a fresh one: encrypted, but admitted only if allowed.
        let client: CurveKeyPair
        if let configured = self.client { client = configured } else { client = try CurveKeyPair.generate() }
        try socket.setOptions([
            .curveServerKey(serverPublicKey), .curvePublicKey(client.publicKey), .curveSecretKey(client.secretKey),
        ])
    }

    /// Whether daemons must authenticate clients.
    public var requiresAuthentication: Bool { server != nil }

    /// The ZAP decision for a connecting client.
    public func decide(_ request: ZAPRequest) -> ZAPDecision {
        guard let key = request.curvePublicKey else {
            return .deny(reason: "\(request.mechanism) is not allowed: CURVE is required")
        }
        return allowedClients.contains(key)
            ? .allow(userID: String(key.prefix(8)))
            : .deny(reason: "client key \(key.prefix(8))… is not in security.allowedClients")
    }
}
