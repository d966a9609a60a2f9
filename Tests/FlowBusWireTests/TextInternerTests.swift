import Testing

@testable import FlowBusWire

@Suite struct TextInternerTests {
    private func text(_ interner: TextInterner, _ bytes: [UInt8]) -> String? {
        bytes.withUnsafeBytes { interner.text($0) }
    }

    @Test func returnsTheTextOfTheBytesWhateverTheirLength() {
        let interner = TextInterner(slots: 64)
        for length in 0...40 {
            let text = String((0..<length).map { Character(UnicodeScalar(UInt8(97 + $0 % 26))) })
            #expect(self.text(interner, Array(text.utf8)) == text)
            #expect(self.text(interner, Array(text.utf8)) == text, "again, from the table")
        }
    }

    @Test func givesBackTheStringMadeTheFirstTime() {
        let interner = TextInterner()
        let bytes = Array("step/a-stepper-id-longer-than-fifteen-bytes".utf8)
        let first = text(interner, bytes)
        let second = text(interner, bytes)
        #expect(first == second)
        // One storage: the second call allocated no new string.
        let firstBase = first?.utf8.withContiguousStorageIfAvailable { $0.baseAddress }
        let secondBase = second?.utf8.withContiguousStorageIfAvailable { $0.baseAddress }
        #expect(firstBase != nil && firstBase == secondBase)
    }

    @Test func textsThatDifferInOneByteStayApart() {
        let interner = TextInterner(slots: 2)
        let names = (0..<200).map { "stepper-\($0 % 10)-of-a-fleet-\($0 / 10)" }
        for _ in 0..<2 {
            for name in names { #expect(text(interner, Array(name.utf8)) == name) }
        }
    }

    @Test func textsThatDifferInAnyByteSpreadOverTheTable() {
        // Texts kept in the table come back as the string made the first time; one that collided
        // was replaced. Heap strings (over 15 bytes) show which.
        for length in [16, 22, 23, 30, 31] {
            for position in 0..<length {
                let interner = TextInterner(slots: 1024)
                let texts = (0..<26).map { letter -> [UInt8] in
                    var bytes = Array(repeating: UInt8(ascii: "s"), count: length)
                    bytes[position] = UInt8(ascii: "a") + UInt8(letter)
                    return bytes
                }
                // Both kept alive while compared: a freed string's address may be reused.
                let first = texts.map { text(interner, $0) ?? "" }
                let again = texts.map { text(interner, $0) ?? "" }
                func address(_ text: String) -> UnsafePointer<UInt8>? {
                    text.utf8.withContiguousStorageIfAvailable { $0.baseAddress } ?? nil
                }
                let kept = zip(first, again).filter { address($0) == address($1) }.count
                #expect(kept >= 22, "length \(length), byte \(position): \(kept) of 26 kept")
            }
        }
    }

    @Test func refusesBytesThatAreNotUTF8() {
        #expect(text(TextInterner(), [0x61, 0xff, 0x62]) == nil)
    }

    @Test func validatesNames() throws {
        for name in ["moviePicked", "movie.Picked:2-x_y", String(repeating: "a", count: 255)] {
            try validateName(name, field: "step name", max: 255)
        }
        for name in ["movie picked", "é", "", String(repeating: "a", count: 256), "tab\t"] {
            #expect(throws: WireError.self) { try validateName(name, field: "step name", max: 255) }
        }
    }
}
