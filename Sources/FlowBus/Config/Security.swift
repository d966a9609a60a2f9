import Foundation
import ZeroMQ

/// CURVE settings of a topology: who the daemons are, who may connect.
///
/// ```yaml
/// security:
///   serverKey: keys/flowd.key        # daemons: their key pair (written by `flowctl keygen flowd`)
///   serverPublicKey: keys/flowd.pub  # clients: the daemons' public key
///   clientKey: keys/client.key       # clients: their own key pair
///   allowedClients: [keys/client.pub] # daemons: the only client keys ZAP admits
/// ```
/// Paths are relative to the config file; a value of 40 Z85 characters is taken as the key
/// itself. CURVE applies to `tcp://` endpoints; `ipc://` socket files are made private to the
/// user (mode 0600) instead.
public struct SecurityConfig: Codable, Sendable, Hashable {
    public var serverKey: String?
    public var serverPublicKey: String?
    public var clientKey: String?
    public var allowedClients: [String]?

    public init(serverKey: String? = nil, serverPublicKey: String? = nil, clientKey: String? = nil, allowedClients: [String]? = nil) {
        self.serverKey = serverKey
        self.serverPublicKey = serverPublicKey
        self.clientKey = clientKey
        self.allowedClients = allowedClients
    }
}

/// Keys loaded from a ``SecurityConfig``, ready to apply to sockets.
public struct CurveKeys: Sendable, Hashable {
    /// The daemons' key pair (only in a daemon's config).
    public var server: CurveKeyPair?
    /// The daemons' public key, for clients.
    public var serverPublicKey: String?
    /// This client's key pair.
    public var client: CurveKeyPair?
    /// Client public keys the ZAP handler admits.
    public var allowedClients: Set<String>

    public init(server: CurveKeyPair? = nil, serverPublicKey: String? = nil, client: CurveKeyPair? = nil, allowedClients: Set<String> = []) {
        self.server = server
        self.serverPublicKey = serverPublicKey
        self.client = client
        self.allowedClients = allowedClients
    }

    /// The ZAP domain FlowBus daemons use.
    public static let zapDomain = "flowbus"

    /// Loads the keys a config names; paths are relative to `directory`.
    public static func load(_ config: SecurityConfig, relativeTo directory: String) throws(ConfigError) -> CurveKeys {
        func text(_ reference: String, what: String) throws(ConfigError) -> String {
            let trimmed = reference.trimmingCharacters(in: .whitespaces)
            if trimmed.utf8.count == 40, Z85.decode(trimmed) != nil { return trimmed }
            let path = trimmed.hasPrefix("/") ? trimmed : (directory as NSString).appendingPathComponent(trimmed)
            guard let contents = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigError("security.\(what): cannot read \(path): write it with `flowctl keygen NAME --dir DIR`")
            }
            let key = contents.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
                .first { !$0.isEmpty && !$0.hasPrefix("#") } ?? ""
            guard key.utf8.count == 40, Z85.decode(key) != nil else {
                throw ConfigError("security.\(what): \(path) does not hold a 40-character Z85 key")
            }
            return key
        }
        func pair(_ reference: String?, what: String) throws(ConfigError) -> CurveKeyPair? {
            guard let reference else { return nil }
            do {
                return try CurveKeyPair(secretKey: try text(reference, what: what))
            } catch let error as ConfigError {
                throw error
            } catch {
                throw ConfigError("security.\(what): \(error)")
            }
        }
        var allowed = Set<String>()
        for reference in config.allowedClients ?? [] { allowed.insert(try text(reference, what: "allowedClients")) }
        return CurveKeys(
            server: try pair(config.serverKey, what: "serverKey"),
            serverPublicKey: try config.serverPublicKey.map { (reference) throws(ConfigError) in try text(reference, what: "serverPublicKey") },
            client: try pair(config.clientKey, what: "clientKey"),
            allowedClients: allowed)
    }

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
        try socket.setOptions([.curveServerKey(serverPublicKey), .curvePublicKey(client.publicKey), .curveSecretKey(client.secretKey)])
    }

    /// Whether daemons must authenticate clients.
    public var requiresAuthentication: Bool { server != nil }

    /// The ZAP decision for a connecting client.
    public func decide(_ request: ZAPRequest) -> ZAPDecision {
        guard let key = request.curvePublicKey else {
            return .deny(reason: "\(request.mechanism) is not allowed: CURVE is required")
        }
        return allowedClients.contains(key) ? .allow(userID: String(key.prefix(8))) : .deny(reason: "client key \(key.prefix(8))… is not in security.allowedClients")
    }
}

