import FlowBusWire
import Glibc
import ZeroMQ

#if canImport(Glibc)
#endif

// FrameBuffer is FlowBus's reusable multipart buffer; ZeroMQ receives into it and sends from it.
extension FrameBuffer: ReceiveBuffer, FrameSource {
    public mutating func removeAllFrames() {
        removeAll(keepingCapacity: true)
    }

    public mutating func appendFrame(_ bytes: UnsafeRawBufferPointer) {
        append(frame: bytes)
    }

    public var frameCount: Int { count }

    public func withFrameBytes<Result>(_ index: Int, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        withFrame(index) { bytes in body(bytes) }
    }
}
