import FlowBusWire

/// Messages a publisher holds back until their batch is committed, copied into one store that
/// keeps its capacity: the buffers they were encoded in or received into stay their owner's own,
/// so that writing the next message into them copies nothing and allocates nothing.
///
/// The store is laid out as a replay packs events (PROTOCOL.md §4.6, `PackedEvents`): for each
/// message its event sequence (u64, big-endian; 0 until ``setLastSequence(_:patchingEnvelope:)``
/// numbers it), its frame count (u8), then each frame as its length (u32, big-endian) and its
/// bytes. Handing an event stream's batch to the commit is then one copy.
package struct HeldMessages: Sendable {
    @usableFromInline var bytes: [UInt8] = []
    /// Where each message starts in ``bytes``.
    private var starts: [Int] = []

    package init() {}

    /// How many messages are held.
    package var count: Int { starts.count }
    package var isEmpty: Bool { starts.isEmpty }
    /// Bytes held, packed.
    @inlinable package var byteCount: Int { bytes.count }

    /// Adds a copy of `frames` (at most 255 of them, as a packed event carries).
    package mutating func append(_ frames: FrameBuffer) {
        starts.append(bytes.count)
        let frameCount = min(frames.count, 255)
        // Packed on the stack (a message of up to a kilobyte), then appended in one copy: an
        // append per frame and per length costs more than the bytes.
        frames.storage.withUnsafeBytes { storage in
            withUnsafeTemporaryAllocation(byteCount: 9 + 4 * frameCount + storage.count, alignment: 8) { packed in
                packed.storeBytes(of: 0, toByteOffset: 0, as: UInt64.self)
                packed.storeBytes(of: UInt8(truncatingIfNeeded: frameCount), toByteOffset: 8, as: UInt8.self)
                var offset = 9
                for index in 0..<frameCount {
                    let range = frames.frameRange(index)
                    packed.storeBytes(
                        of: UInt32(truncatingIfNeeded: range.count).bigEndian, toByteOffset: offset, as: UInt32.self)
                    offset += 4
                    if !range.isEmpty {
                        (packed.baseAddress! + offset).copyMemory(
                            from: storage.baseAddress! + range.lowerBound, byteCount: range.count)
                    }
                    offset += range.count
                }
                bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: packed[..<offset]))
            }
        }
    }

    /// Numbers the last message added with the event `sequence`; `patchingEnvelope`: also writes it
    /// into its envelope (frame 1, bytes 4 to 12, big-endian), as the publisher's own events carry it.
    package mutating func setLastSequence(_ sequence: UInt64, patchingEnvelope: Bool) {
        guard !starts.isEmpty else { return }
        let start = starts[starts.count - 1]
        bytes.withUnsafeMutableBytes { raw in
            raw.storeBytes(of: sequence.bigEndian, toByteOffset: start, as: UInt64.self)
            guard patchingEnvelope, raw[start + 8] >= 2 else { return }
            let readOnly = UnsafeRawBufferPointer(raw)
            let envelopeLengthAt = start + 13 + Int(Self.length(readOnly, at: start + 9))
            guard Self.length(readOnly, at: envelopeLengthAt) >= 12 else { return }
            raw.storeBytes(of: sequence.bigEndian, toByteOffset: envelopeLengthAt + 8, as: UInt64.self)
        }
    }

    /// Past this, an emptied store gives its bytes' storage back: one burst of events (a large
    /// tree built at once) must not keep its memory for good.
    static let keptCapacity = 4 << 20

    /// Forgets every message, keeping the capacity (up to 4 MB of bytes).
    package mutating func removeAll() {
        bytes.removeAll(keepingCapacity: bytes.capacity <= Self.keptCapacity)
        starts.removeAll(keepingCapacity: starts.capacity <= Self.keptCapacity / 8)
    }

    /// The messages as packed events, numbered as ``setLastSequence(_:patchingEnvelope:)`` did.
    package func withPacked<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        bytes.withUnsafeBytes(body)
    }

    /// Calls `body` with each message, in the order they were added, and its index.
    package func forEach(_ body: (Int, Message) -> Void) {
        bytes.withUnsafeBytes { raw in
            for index in starts.indices {
                let end = index + 1 < starts.count ? starts[index + 1] : raw.count
                body(index, Message(packed: UnsafeRawBufferPointer(rebasing: raw[starts[index]..<end])))
            }
        }
    }

    /// Calls `body` with the message at `index`, in the order they were added.
    package func withMessage<Result>(_ index: Int, _ body: (Message) -> Result) -> Result {
        bytes.withUnsafeBytes { raw in
            let end = index + 1 < starts.count ? starts[index + 1] : raw.count
            return body(Message(packed: UnsafeRawBufferPointer(rebasing: raw[starts[index]..<end])))
        }
    }

    fileprivate static func length(_ raw: UnsafeRawBufferPointer, at offset: Int) -> UInt32 {
        UInt32(bigEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
    }

    /// One held message, valid inside the call that hands it: its bytes as packed.
    package struct Message {
        fileprivate let packed: UnsafeRawBufferPointer

        /// Its number of frames.
        package var frameCount: Int { Int(packed[8]) }

        /// Calls `body` with the bytes of frame `index` (from 0).
        package func withFrame<Result>(_ index: Int, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
            var offset = 9
            for _ in 0..<index { offset += 4 + Int(HeldMessages.length(packed, at: offset)) }
            let length = Int(HeldMessages.length(packed, at: offset))
            return body(UnsafeRawBufferPointer(rebasing: packed[offset + 4..<offset + 4 + length]))
        }
    }
}
