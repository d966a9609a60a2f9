import FlowBusProtocol
import FlowBusWire
import ZeroMQ

// FrameBuffer is FlowBus's reusable multipart buffer; ZeroMQ receives into it and sends from it.
extension FrameBuffer: ReceiveBuffer, FrameSource {
    public mutating func removeAllFrames() {
        removeAll(keepingCapacity: true)
    }

    public mutating func appendFrame(_ bytes: UnsafeRawBufferPointer) {
        append(frame: bytes)
    }

    public var frameCount: Int { count }

    // Not through the generic `withFrame`: this runs once per frame sent.
    public func withFrameBytes<Result>(_ index: Int, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        let range = frameRange(index)
        return storage.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[range])) }
    }
}
