import FlowBusWire
import ZeroMQ

/// A reusable multipart message for the benchmark's hot loops: frames back to back in one
/// array, their end offsets in another. Receiving into it and sending from it allocate nothing
/// once it has grown to the largest message, and a sender can patch bytes (the sequence) in
/// place between sends.
struct FrameStore: ReceiveBuffer, FrameSource {
    private(set) var storage: [UInt8] = []
    private(set) var ends: [Int] = []
    /// Frames before this index are not sent (e.g. the routing id a ROUTER received).
    var firstSentFrame = 0

    init(byteCapacity: Int = 1024, frameCapacity: Int = 8) {
        storage.reserveCapacity(byteCapacity)
        ends.reserveCapacity(frameCapacity)
    }

    /// Copies the frames of an encoded FlowBus message.
    init(_ buffer: FrameBuffer) {
        self.init(byteCapacity: buffer.byteCount, frameCapacity: buffer.count)
        for index in 0..<buffer.count {
            buffer.withFrame(index) { appendFrame($0) }
        }
    }

    /// One frame holding all of `other`'s frames back to back (same bytes, one frame).
    init(concatenating other: FrameStore) {
        self.init(byteCapacity: other.storage.count, frameCapacity: 1)
        storage.append(contentsOf: other.storage)
        ends.append(storage.count)
    }

    var count: Int { ends.count }
    var byteCount: Int { storage.count }

    func frameStart(_ index: Int) -> Int { index == 0 ? 0 : ends[index - 1] }
    func frameSize(_ index: Int) -> Int { ends[index] - frameStart(index) }
    var frameSizes: [Int] { (0..<count).map(frameSize) }

    // MARK: ReceiveBuffer

    mutating func removeAllFrames() {
        storage.removeAll(keepingCapacity: true)
        ends.removeAll(keepingCapacity: true)
    }

    mutating func appendFrame(_ bytes: UnsafeRawBufferPointer) {
        storage.append(contentsOf: bytes)
        ends.append(storage.count)
    }

    // MARK: FrameSource

    var frameCount: Int { ends.count - firstSentFrame }

    func withFrameBytes<Result>(_ index: Int, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        let frame = index + firstSentFrame
        let range = frameStart(frame)..<ends[frame]
        return storage.withUnsafeBytes { raw in body(UnsafeRawBufferPointer(rebasing: raw[range])) }
    }

    // MARK: Fixed-offset fields

    /// Writes `value` big-endian at byte `offset` of the storage.
    @inline(__always)
    mutating func storeBigEndian(_ value: UInt64, at offset: Int) {
        storage.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: value.bigEndian, toByteOffset: offset, as: UInt64.self)
        }
    }

    /// Overwrites `bytes.count` bytes of the storage from byte `offset` (frames keep their sizes).
    @inline(__always)
    mutating func storeBytes(_ bytes: UnsafeRawBufferPointer, at offset: Int) {
        storage.withUnsafeMutableBytes { raw in
            UnsafeMutableRawBufferPointer(rebasing: raw[offset..<offset + bytes.count]).copyMemory(from: bytes)
        }
    }

    /// Reads a big-endian u64 at byte `offset` of the storage, or `nil` if the storage is too short.
    @inline(__always)
    func loadBigEndian(at offset: Int) -> UInt64? {
        guard offset >= 0, offset + 8 <= storage.count else { return nil }
        return storage.withUnsafeBytes { raw in
            UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        }
    }
}
