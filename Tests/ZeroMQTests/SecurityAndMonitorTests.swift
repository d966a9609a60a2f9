import Foundation
import Synchronization
import Testing

@testable import ZeroMQ

@Suite("CURVE, ZAP and the socket monitor")
struct SecurityAndMonitorTests {
    @Test("Key pairs are 40-character Z85 and the public key derives from the secret")
    func keyPairs() throws {
        let pair = try CurveKeyPair.generate()
        #expect(pair.publicKey.utf8.count == 40)
        #expect(pair.secretKey.utf8.count == 40)
        #expect(try CurveKeyPair(secretKey: pair.secretKey).publicKey == pair.publicKey)
        #expect(!pair.description.contains(pair.secretKey))
        let raw = try #require(Z85.decode(pair.publicKey))
        #expect(raw.count == 32)
        #expect(Z85.encode(raw) == pair.publicKey)
        #expect(Z85.decode("not z85!") == nil)
    }

    /// A CURVE server admitting only `allowed`, and a client using `clientKeys`.
    func exchange(clientKeys: CurveKeyPair, allowed: [String]) throws -> (delivered: Bool, denied: Bool) {
        #expect(ZeroMQLibrary.has("curve"))
        let context = try Context(defaultLinger: 0)
        let serverKeys = try CurveKeyPair.generate()
        let decisions = Mutex<[ZAPDecision]>([])
        let handler = try ZAPHandler(
            context: context,
            policy: { request in
                guard let key = request.curvePublicKey, allowed.contains(key) else {
                    return .deny(reason: "unknown key")
                }
                return .allow(userID: key)
            },
            onDecision: { _, decision in decisions.withLock { $0.append(decision) } }
        )
        defer { handler.stop() }
        let server = try context.socket(.pull)
        try server.setOptions([.curveServer(true), .curveSecretKey(serverKeys.secretKey), .zapDomain("flowbus")])
        try server.bind("tcp://127.0.0.1:*")
        let monitor = try SocketMonitor(watching: server, context: context)
        let client = try context.socket(.push)
        try client.setOptions([
            .curveServerKey(serverKeys.publicKey), .curvePublicKey(clientKeys.publicKey),
            .curveSecretKey(clientKeys.secretKey),
        ])
        try client.connect(server.lastEndpoint)
        _ = try client.send(bytes("secret step"), mode: .nonBlocking)
        let delivered = try server.receiveMessage(mode: .timeout(milliseconds: 1000)) == [bytes("secret step")]
        var denied = false
        if !delivered {
            denied = try monitor.waitFor(.handshakeFailedAuth, timeout: 2000) != nil
        }
        #expect(try server.mechanism == "CURVE")
        #expect(!decisions.withLock { $0 }.isEmpty, "the ZAP handler was asked")
        return (delivered, denied)
    }

    @Test("CURVE with ZAP admits a known client key")
    func curveAllow() throws {
        let clientKeys = try CurveKeyPair.generate()
        let outcome = try exchange(clientKeys: clientKeys, allowed: [clientKeys.publicKey])
        #expect(outcome.delivered)
    }

    @Test("CURVE with ZAP refuses an unknown client key, and the monitor reports it")
    func curveDeny() throws {
        let clientKeys = try CurveKeyPair.generate()
        let outcome = try exchange(clientKeys: clientKeys, allowed: [try CurveKeyPair.generate().publicKey])
        #expect(!outcome.delivered)
        #expect(outcome.denied)
    }

    @Test("The monitor reports connected and disconnected peers", arguments: [Transport.ipc, .tcp])
    func monitorEvents(transport: Transport) throws {
        let context = try Context(defaultLinger: 0)
        let server = try context.socket(.router)
        try server.bind(transport.bindEndpoint())
        let monitor = try SocketMonitor(watching: server, context: context)
        let client = try context.socket(.dealer)
        try client.connect(server.lastEndpoint)
        #expect(try monitor.waitFor(.accepted, timeout: 2000) != nil)
        #expect(try monitor.waitFor(.handshakeSucceeded, timeout: 2000) != nil)
        client.close()
        #expect(try monitor.waitFor(.disconnected, timeout: 2000) != nil)
    }

    @Test("A ZAP request that is not version 1.0 gets status 500")
    func malformedZAPRequest() {
        let reply = ZAPHandler.answer([bytes("9.9"), bytes("id")], policy: { _ in .allow() }, onDecision: { _, _ in })
        #expect(reply[2] == bytes("500"))
        #expect(reply[1] == bytes("id"))
    }
}
