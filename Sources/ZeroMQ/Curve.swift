import CZeroMQ

/// A CURVE key pair in Z85 text (40 characters each), as libzmq's socket options take them.
public struct CurveKeyPair: Sendable, Hashable, CustomStringConvertible {
    /// The public key: safe to share.
    public let publicKey: String
    /// The secret key: never log it.
    public let secretKey: String

    /// Generates a fresh key pair.
    public static func generate() throws(ZMQError) -> CurveKeyPair {
        var publicKey = [CChar](repeating: 0, count: 41)
        var secretKey = [CChar](repeating: 0, count: 41)
        _ = try retryingInterrupts("generate a CURVE key pair") { zmq_curve_keypair(&publicKey, &secretKey) }
        return CurveKeyPair(
            publicKey: String(decoding: publicKey.prefix(40).map { UInt8(bitPattern: $0) }, as: UTF8.self),
            secretKey: String(decoding: secretKey.prefix(40).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        )
    }

    /// Rebuilds a key pair from its secret key, deriving the public key.
    public init(secretKey: String) throws(ZMQError) {
        guard secretKey.utf8.count == 40 else {
            throw ZMQError(
                operation: "derive a CURVE public key",
                message: "a Z85 secret key has 40 characters, this one has \(secretKey.utf8.count)")
        }
        var publicKey = [CChar](repeating: 0, count: 41)
        _ = try retryingInterrupts("derive a CURVE public key") { zmq_curve_public(&publicKey, secretKey) }
        self.publicKey = String(decoding: publicKey.prefix(40).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        self.secretKey = secretKey
    }

    init(publicKey: String, secretKey: String) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    /// Shows the public key only.
    public var description: String { "CurveKeyPair(public: \(publicKey), secret: <redacted>)" }
}

/// Z85, ZeroMQ's printable encoding of binary keys (RFC 32).
public enum Z85 {
    /// Encodes bytes whose count is a multiple of 4.
    public static func encode(_ bytes: [UInt8]) -> String? {
        guard bytes.count % 4 == 0 else { return nil }
        var text = [CChar](repeating: 0, count: bytes.count * 5 / 4 + 1)
        guard zmq_z85_encode(&text, bytes, bytes.count) != nil else { return nil }
        return String(decoding: text.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Decodes text whose length is a multiple of 5, or returns `nil` for anything else.
    public static func decode(_ text: String) -> [UInt8]? {
        let count = text.utf8.count
        guard count % 5 == 0, text.utf8.allSatisfy({ $0 >= 0x21 && $0 <= 0x7D }) else { return nil }
        var bytes = [UInt8](repeating: 0, count: count * 4 / 5)
        guard zmq_z85_decode(&bytes, text) != nil else { return nil }
        return bytes
    }
}
