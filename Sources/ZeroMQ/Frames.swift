/// Something a multipart message can be received into, frame by frame.
///
/// Implement it over a reusable buffer to receive without allocating per message.
public protocol ReceiveBuffer {
    /// Forgets the previous message; called before the first frame of each message.
    mutating func removeAllFrames()
    /// Appends one frame; the bytes are valid only during the call.
    mutating func appendFrame(_ bytes: UnsafeRawBufferPointer)
}

/// Something a multipart message can be sent from, frame by frame.
public protocol FrameSource {
    /// The number of frames; a message has at least one.
    var frameCount: Int { get }
    /// Calls `body` with the bytes of frame `index`.
    func withFrameBytes<Result>(_ index: Int, _ body: (UnsafeRawBufferPointer) -> Result) -> Result
}

/// The simplest multipart message: an array of frames.
extension Array: ReceiveBuffer where Element == [UInt8] {
    public mutating func removeAllFrames() {
        removeAll(keepingCapacity: true)
    }

    public mutating func appendFrame(_ bytes: UnsafeRawBufferPointer) {
        append([UInt8](bytes))
    }
}

extension Array: FrameSource where Element == [UInt8] {
    public var frameCount: Int { count }

    public func withFrameBytes<Result>(_ index: Int, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        self[index].withUnsafeBytes(body)
    }
}
