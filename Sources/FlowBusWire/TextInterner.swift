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
        // FNV-1a: cheap, and good enough for a table that only saves allocations.
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        return Int(truncatingIfNeeded: hash)
    }

    private static func equal(_ text: String, _ bytes: UnsafeRawBufferPointer) -> Bool {
        text.utf8.withContiguousStorageIfAvailable { utf8 in
            utf8.count == bytes.count
                && (utf8.isEmpty || memcmp(utf8.baseAddress!, bytes.baseAddress!, utf8.count) == 0)
        } ?? false
    }
}
