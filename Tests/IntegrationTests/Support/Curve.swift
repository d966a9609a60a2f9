import Foundation
import ZeroMQ

/// A free tcp endpoint on loopback (bound, read back, released).
func freeTCPEndpoint() throws -> String {
    let context = try ZeroMQ.Context(defaultLinger: 0)
    let socket = try context.socket(.router)
    try socket.bind("tcp://127.0.0.1:*")
    return try socket.lastEndpoint
}

/// CURVE key pairs written as `NAME.key` and `NAME.pub` in a fresh directory, as
/// `flowctl keygen` writes them; ``remove()`` deletes the directory.
struct TestKeys {
    let directory: URL
    /// Every secret key written, to check that none is ever logged.
    let secrets: [String]

    init(_ names: [String]) throws {
        directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(
            "flowbus-keys-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        var secrets: [String] = []
        for name in names {
            let pair = try CurveKeyPair.generate()
            secrets.append(pair.secretKey)
            try "\(pair.secretKey)\n".write(
                to: directory.appendingPathComponent("\(name).key"), atomically: true, encoding: .utf8)
            try "\(pair.publicKey)\n".write(
                to: directory.appendingPathComponent("\(name).pub"), atomically: true, encoding: .utf8)
        }
        self.secrets = secrets
    }

    var path: String { directory.path }

    func remove() {
        try? FileManager.default.removeItem(at: directory)
    }
}
