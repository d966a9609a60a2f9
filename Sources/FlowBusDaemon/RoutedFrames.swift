import FlowBusClient
import FlowBusConfiguration
import FlowBusProtocol
import FlowBusWire
import ZeroMQ

/// A multipart message from a ROUTER: the peer's routing id, then the FlowBus frames.
package struct RoutedFrames: ReceiveBuffer {
    package var routingID: [UInt8] = []
    package var frames = FrameBuffer()
    private var sawRoutingID = false

    package init() {}

    package mutating func removeAllFrames() {
        routingID.removeAll(keepingCapacity: true)
        frames.removeAll(keepingCapacity: true)
        sawRoutingID = false
    }

    package mutating func appendFrame(_ bytes: UnsafeRawBufferPointer) {
        if sawRoutingID {
            frames.append(frame: bytes)
        } else {
            routingID.append(contentsOf: bytes)
            sawRoutingID = true
        }
    }
}
