/// A reusable multipart message: one contiguous byte storage plus the end offset of each frame.
///
/// Encoders write frames in place (``beginFrame()`` then ``appendToCurrentFrame(_:)`` or
/// ``withCurrentFrame(_:)``), the receive loop copies each `zmq_msg_t` in with
/// ``append(frame:)-(UnsafeRawBufferPointer)``, decoders read frames through
/// ``withFrame(_:_:)`` without copying. After ``removeAll(keepingCapacity:)`` the storage is
/// reused, so once the buffer has grown to the size of the largest message, building or
/// receiving a message allocates nothing.
///
/// Frames are only ever appended at the end; the current frame is the last one.
public struct FrameBuffer: Sendable, Hashable {
    /// All frames' bytes, back to back.
    public private(set) var storage: [UInt8]
    /// The end offset of each frame in ``storage``.
    @usableFromInline var ends: [Int]

    /// Creates an empty buffer.
    /// - Parameters:
    ///   - byteCapacity: Bytes to reserve for frame contents.
    ///   - frameCapacity: Frames to reserve room for.
    public init(byteCapacity: Int = 512, frameCapacity: Int = 8) {
        storage = []
        storage.reserveCapacity(byteCapacity)
        ends = []
        ends.reserveCapacity(frameCapacity)
    }

    /// Creates a buffer holding copies of `frames`.
    public init(frames: [[UInt8]]) {
        self.init(byteCapacity: frames.reduce(0) { $0 + $1.count }, frameCapacity: frames.count)
        for frame in frames { append(frame: frame) }
    }

    /// The number of frames.
    public var count: Int { ends.count }

    /// Whether the buffer holds no frame.
    public var isEmpty: Bool { ends.isEmpty }

    /// The total number of bytes in all frames.
    public var byteCount: Int { storage.count }

    /// Removes every frame.
    /// - Parameter keepingCapacity: Keep the storage for reuse (the default).
    public mutating func removeAll(keepingCapacity: Bool = true) {
        storage.removeAll(keepingCapacity: keepingCapacity)
        ends.removeAll(keepingCapacity: keepingCapacity)
    }

    /// Appends a frame copied from raw bytes (e.g. a received `zmq_msg_t`).
    public mutating func append(frame: UnsafeRawBufferPointer) {
        storage.append(contentsOf: frame)
        ends.append(storage.count)
    }

    /// Appends a frame copied from a collection of bytes.
    public mutating func append(frame: some Collection<UInt8>) {
        storage.append(contentsOf: frame)
        ends.append(storage.count)
    }

    /// Appends a frame holding the UTF-8 bytes of `text`.
    public mutating func append(text: String) {
        storage.append(contentsOf: text.utf8)
        ends.append(storage.count)
    }

    /// Starts a new, empty frame at the end; later `appendToCurrentFrame` calls extend it.
    public mutating func beginFrame() {
        ends.append(storage.count)
    }

    /// Appends one byte to the current (last) frame.
    /// - Precondition: a frame has been begun.
    @inline(__always)
    public mutating func appendToCurrentFrame(_ byte: UInt8) {
        precondition(!ends.isEmpty, "appendToCurrentFrame without a frame; call beginFrame() first")
        storage.append(byte)
        ends[ends.count - 1] = storage.count
    }

    /// Appends bytes to the current (last) frame.
    /// - Precondition: a frame has been begun.
    @inline(__always)
    public mutating func appendToCurrentFrame(contentsOf bytes: some Sequence<UInt8>) {
        precondition(!ends.isEmpty, "appendToCurrentFrame without a frame; call beginFrame() first")
        storage.append(contentsOf: bytes)
        ends[ends.count - 1] = storage.count
    }

    /// Lets `body` append to the current (last) frame through the storage array itself, with no
    /// temporary array. `body` MUST only append: bytes before its start belong to other frames.
    /// - Precondition: a frame has been begun.
    @inline(__always)
    public mutating func withCurrentFrame<R, E: Error>(
        _ body: (inout [UInt8]) throws(E) -> R
    ) throws(E) -> R {
        precondition(!ends.isEmpty, "withCurrentFrame without a frame; call beginFrame() first")
        let start = ends.count == 1 ? 0 : ends[ends.count - 2]
        defer {
            precondition(storage.count >= start, "withCurrentFrame body removed bytes of earlier frames")
            ends[ends.count - 1] = storage.count
        }
        return try body(&storage)
    }

    /// The byte range of frame `index` in ``storage``.
    /// - Precondition: `0 <= index < count`.
    @inlinable @inline(__always)
    public func frameRange(_ index: Int) -> Range<Int> {
        precondition(index >= 0 && index < ends.count, "frame \(index) out of range 0..<\(ends.count)")
        return (index == 0 ? 0 : ends[index - 1])..<ends[index]
    }

    /// The size of frame `index` in bytes.
    public func frameSize(_ index: Int) -> Int { frameRange(index).count }

    /// The bytes of frame `index`, sharing the storage (no copy).
    public func frameBytes(_ index: Int) -> ArraySlice<UInt8> { storage[frameRange(index)] }

    /// Calls `body` with the bytes of frame `index`, valid only during the call.
    @inlinable @inline(__always)
    public func withFrame<R, E: Error>(
        _ index: Int, _ body: (UnsafeRawBufferPointer) throws(E) -> R
    ) throws(E) -> R {
        let range = frameRange(index)
        let result: Result<R, E> = storage.withUnsafeBytes { raw in
            Result { () throws(E) -> R in try body(UnsafeRawBufferPointer(rebasing: raw[range])) }
        }
        return try result.get()
    }

    /// Copies of all frames (allocates; for tests and tools).
    public var frames: [[UInt8]] { (0..<count).map { Array(frameBytes($0)) } }

    public static func == (lhs: FrameBuffer, rhs: FrameBuffer) -> Bool {
        lhs.storage == rhs.storage && lhs.ends == rhs.ends
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(storage)
        hasher.combine(ends)
    }
}

extension FrameBuffer: CustomStringConvertible {
    /// One line per frame in lowercase hex, as in the golden vector files.
    public var description: String {
        (0..<count).map { WireHex.string(frameBytes($0)) }.joined(separator: "\n")
    }
}
