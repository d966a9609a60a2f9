import FlowBusWire

/// Messages a publisher holds back until their batch is committed, copied into one store that
/// keeps its capacity: the buffers they were encoded in or received into stay their owner's own,
/// so that writing the next message into them copies nothing and allocates nothing.
package struct HeldMessages: Sendable {
    private var bytes: [UInt8] = []
    /// The end of each frame in ``bytes``.
    private var frameEnds: [Int] = []
    /// The end of each message in ``frameEnds``.
    private var messageEnds: [Int] = []

    package init() {}

    /// How many messages are held.
    package var count: Int { messageEnds.count }
    /// The bytes they hold, and their frames: what packing them takes (`PackedEvents`).
    package var byteCount: Int { bytes.count }
    package var frameCount: Int { frameEnds.count }
    package var isEmpty: Bool { messageEnds.isEmpty }

    /// Adds a copy of `frames`.
    package mutating func append(_ frames: FrameBuffer) {
        let base = bytes.count
        bytes.append(contentsOf: frames.storage)
        for index in 0..<frames.count { frameEnds.append(base + frames.frameRange(index).upperBound) }
        messageEnds.append(frameEnds.count)
    }

    /// Writes `sequence` into the envelope (frame 1, bytes 4 to 12, big-endian) of the last message
    /// added: an event's number, given when it is held.
    package mutating func setLastEnvelopeSequence(_ sequence: UInt64) {
        guard let end = messageEnds.last else { return }
        let firstFrame = messageEnds.count > 1 ? messageEnds[messageEnds.count - 2] : 0
        guard end - firstFrame >= 2 else { return }
        let envelopeStart = frameEnds[firstFrame]
        guard frameEnds[firstFrame + 1] - envelopeStart >= 12 else { return }
        for index in 0..<8 {
            bytes[envelopeStart + 4 + index] = UInt8(truncatingIfNeeded: sequence >> (56 - 8 * UInt64(index)))
        }
    }

    /// Past this, an emptied store gives its bytes' storage back: one burst of events (a large
    /// tree built at once) must not keep its memory for good.
    static let keptCapacity = 4 << 20

    /// Forgets every message, keeping the capacity (up to 4 MB of bytes).
    package mutating func removeAll() {
        bytes.removeAll(keepingCapacity: bytes.capacity <= Self.keptCapacity)
        frameEnds.removeAll(keepingCapacity: frameEnds.capacity <= Self.keptCapacity / 8)
        messageEnds.removeAll(keepingCapacity: messageEnds.capacity <= Self.keptCapacity / 8)
    }

    /// The message at `index`, in the order they were added.
    package func message(_ index: Int) -> Message {
        Message(held: self, firstFrame: index == 0 ? 0 : messageEnds[index - 1], endFrame: messageEnds[index])
    }

    /// One held message, to send.
    package struct Message {
        fileprivate let held: HeldMessages
        fileprivate let firstFrame: Int
        fileprivate let endFrame: Int

        /// Its number of frames.
        package var frameCount: Int { endFrame - firstFrame }

        /// Calls `body` with the bytes of frame `index` (from 0).
        package func withFrame<Result>(_ index: Int, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
            let frame = firstFrame + index
            let start = frame == 0 ? 0 : held.frameEnds[frame - 1]
            return held.bytes.withUnsafeBytes {
                body(UnsafeRawBufferPointer(rebasing: $0[start..<held.frameEnds[frame]]))
            }
        }
    }
}
