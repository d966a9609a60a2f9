#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The texts a receiver decodes over and over — sources, topics, names, stepper ids — made once:
/// a message whose source or topic came before gets the `String` made then, so decoding it
/// allocates nothing (a text over 15 bytes is otherwise a heap allocation each time).
///
/// A fixed table of `slots` texts by hash of their bytes; a text that collides replaces the one in
/// its slot. Memory stays bounded however many distinct texts arrive. Used by one thread.
public final class TextInterner {
    // Unchecked exclusivity: one thread, and read for every text a message carries.
    @exclusivity(unchecked) private var slots: [String?]
    private let mask: Int

    /// A table of `slots` texts (rounded up to a power of two).
    public init(slots: Int = 1024) {
        var count = 1
        while count < max(1, slots) { count <<= 1 }
        self.slots = Array(repeating: nil, count: count)
        mask = count - 1
    }

    /// The text of the UTF-8 `bytes`; nil when they are not valid UTF-8.
    public func text(_ bytes: UnsafeRawBufferPointer) -> String? {
        let index = Self.hash(bytes) & mask
        if let cached = slots[index], Self.equal(cached, bytes) { return cached }
        guard let text = validUTF8(bytes) else { return nil }
        slots[index] = text
        return text
    }

    /// `text` as a `String`, the one made last time when it came before.
    public func text(_ text: Substring) -> String {
        text.utf8.withContiguousStorageIfAvailable { self.text(UnsafeRawBufferPointer($0)) ?? String(text) }
            ?? String(text)
    }

    private static func hash(_ bytes: UnsafeRawBufferPointer) -> Int {
        // Eight bytes at a time, multiplied and folded: a few instructions per word for the texts of
        // every message, and good enough for a table that only saves allocations.
        let multiplier: UInt64 = 0x9e37_79b9_7f4a_7c15
        var hash = UInt64(bytes.count) &* multiplier
        var offset = 0
        while offset + 8 <= bytes.count {
            hash = (hash ^ bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) &* multiplier
            hash ^= hash >> 29
            offset += 8
        }
        var tail: UInt64 = 0
        while offset < bytes.count {
            tail = tail << 8 | UInt64(bytes[offset])
            offset += 1
        }
        hash = (hash ^ tail) &* multiplier
        // Folded, multiplied and folded again: a product's high bits come from every input bit, and
        // the slot is taken from the low ones.
        hash ^= hash >> 32
        hash &*= 0xbf58_476d_1ce4_e5b9
        return Int(truncatingIfNeeded: hash ^ hash >> 29)
    }

    private static func equal(_ text: String, _ bytes: UnsafeRawBufferPointer) -> Bool {
        text.utf8.withContiguousStorageIfAvailable { utf8 in
            utf8.count == bytes.count
                && (utf8.isEmpty || memcmp(utf8.baseAddress!, bytes.baseAddress!, utf8.count) == 0)
        } ?? false
    }
}
