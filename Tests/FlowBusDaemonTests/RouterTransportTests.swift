import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import Foundation
import Testing
import ZeroMQ

@Suite("A daemon's ROUTER socket")
struct RouterTransportTests {
    @Test("It queues limits.receiveHighWaterMark messages per peer on receipt and highWaterMark for sending")
    func highWaterMarks() throws {
        let context = try Context()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("router-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let router = try ZMQRouterTransport(
            context: context, endpoint: "ipc://\(directory.path)/ingress", what: "endpoints.ingress",
            limits: FlowBusConfig.Limits(highWaterMark: 9, receiveHighWaterMark: 5), curve: CurveKeys())
        defer { router.close(linger: 0) }
        #expect(try router.socket.receiveHighWaterMark == 5)
        #expect(try router.socket.sendHighWaterMark == 9)
    }
}
