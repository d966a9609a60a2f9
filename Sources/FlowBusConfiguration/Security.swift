import FlowBusClient
import FlowBusWire
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

    public init(
        serverKey: String? = nil, serverPublicKey: String? = nil, clientKey: String? = nil,
        allowedClients: [String]? = nil
    ) {
        self.serverKey = serverKey
        self.serverPublicKey = serverPublicKey
        self.clientKey = clientKey
        self.allowedClients = allowedClients
    }
}

extension CurveKeys {
    /// Loads the keys a config names; paths are relative to `directory`.
    public static func load(_ config: SecurityConfig, relativeTo directory: String) throws(ConfigError) -> CurveKeys {
        func text(_ reference: String, what: String) throws(ConfigError) -> String {
            let trimmed = reference.trimmingCharacters(in: .whitespaces)
            if trimmed.utf8.count == 40, Z85.decode(trimmed) != nil { return trimmed }
            let path = trimmed.hasPrefix("/") ? trimmed : (directory as NSString).appendingPathComponent(trimmed)
            guard let contents = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigError(
                    .unreadable, "security.\(what): cannot read \(path): write it with `flowctl keygen NAME --dir DIR`")
            }
            let key =
                contents.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
                .first { !$0.isEmpty && !$0.hasPrefix("#") } ?? ""
            guard key.utf8.count == 40, Z85.decode(key) != nil else {
                throw ConfigError(.invalid, "security.\(what): \(path) does not hold a 40-character Z85 key")
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
                throw ConfigError(.invalid, "security.\(what): \(error)")
            }
        }
        var allowed = Set<String>()
        for reference in config.allowedClients ?? [] { allowed.insert(try text(reference, what: "allowedClients")) }
        return CurveKeys(
            server: try pair(config.serverKey, what: "serverKey"),
            serverPublicKey: try config.serverPublicKey.map { (reference) throws(ConfigError) in
                try text(reference, what: "serverPublicKey")
            },
            client: try pair(config.clientKey, what: "clientKey"),
            allowedClients: allowed)
    }
}
