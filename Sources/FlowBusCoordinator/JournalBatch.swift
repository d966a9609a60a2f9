import GRDB
import GRDBSQLite

extension StepJournal {
    /// The entries of one transaction: their fields side by side, their params packed in one
    /// buffer. flowd keeps one and empties it after each commit, so that recording a step copies
    /// its params into storage that is already there.
    public struct Batch: Sendable {
        /// One entry; its params are ``Batch/paramBytes``[``params``].
        public struct Item: Sendable {
            public var kind: Kind
            public var target: String
            public var name: String
            public var params: Range<Int>
            public var source: String
            public var sequence: UInt64
        }

        public private(set) var items: [Item] = []
        /// Every entry's params, one after the other.
        public private(set) var paramBytes: [UInt8] = []

        /// Past this, an emptied batch gives its params' storage back: one batch of large params
        /// must not keep its memory for good.
        static let keptParamCapacity = 1 << 22

        public init() {}

        /// The batch of `records`, in order.
        public init(_ records: [Record]) {
            items.reserveCapacity(records.count)
            for record in records {
                append(
                    record.kind, target: record.target, name: record.name, params: record.params, source: record.source,
                    sequence: record.sequence)
            }
        }

        public var isEmpty: Bool { items.isEmpty }
        public var count: Int { items.count }

        /// Adds an entry, its params copied.
        public mutating func append(
            _ kind: Kind, target: String, name: String, params: some Collection<UInt8>, source: String,
            sequence: UInt64
        ) {
            let start = paramBytes.count
            paramBytes.append(contentsOf: params)
            items.append(
                Item(
                    kind: kind, target: target, name: name, params: start..<paramBytes.count, source: source,
                    sequence: sequence))
        }

        /// The params of `item`.
        public func params(of item: Item) -> ArraySlice<UInt8> {
            paramBytes[item.params]
        }

        /// Empties it, keeping its storage (up to 4 MB of params).
        public mutating func removeAll() {
            items.removeAll(keepingCapacity: true)
            paramBytes.removeAll(keepingCapacity: paramBytes.capacity <= Self.keptParamCapacity)
        }
    }
}

/// Binds and runs an `entry` insert with SQLite's own calls, the text and bytes bound in place
/// (`SQLITE_STATIC`: they outlive the step). GRDB's arguments box every value, per row.
enum SQLiteRow {
    static func insert(
        _ statement: SQLiteStatement, in db: Database, id: Int64?, kind: Int64, target: String, name: String,
        params: UnsafeRawBufferPointer, source: String, sequence: Int64
    ) throws {
        var target = target
        var name = name
        var source = source
        let code = target.withUTF8 { target in
            name.withUTF8 { name in
                source.withUTF8 { source -> Int32 in
                    sqlite3_reset(statement)
                    if let id { sqlite3_bind_int64(statement, 1, id) } else { sqlite3_bind_null(statement, 1) }
                    sqlite3_bind_int64(statement, 2, kind)
                    bindText(target, at: 3, to: statement)
                    bindText(name, at: 4, to: statement)
                    if let base = params.baseAddress, !params.isEmpty {
                        sqlite3_bind_blob(statement, 5, base, Int32(params.count), nil)
                    } else {
                        sqlite3_bind_zeroblob(statement, 5, 0)
                    }
                    bindText(source, at: 6, to: statement)
                    sqlite3_bind_int64(statement, 7, sequence)
                    return sqlite3_step(statement)
                }
            }
        }
        // Nothing bound may outlive this call: the pointers were only lent.
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
        guard code == SQLITE_DONE else {
            throw DatabaseError(
                resultCode: ResultCode(rawValue: code), message: db.lastErrorMessage,
                sql: String(cString: sqlite3_sql(statement)))
        }
    }

    private static let emptyText: StaticString = ""

    private static func bindText(_ utf8: UnsafeBufferPointer<UInt8>, at index: Int32, to statement: SQLiteStatement) {
        // A nil pointer would bind NULL: empty text is still text.
        let base = utf8.baseAddress ?? emptyText.utf8Start
        base.withMemoryRebound(to: CChar.self, capacity: max(utf8.count, 1)) { text in
            _ = sqlite3_bind_text(statement, index, text, Int32(utf8.count), nil)
        }
    }
}

extension StepJournal {
    /// A batch's entries in one value, as the PostgreSQL journal stores a batch in one row:
    /// a version byte (1), the entry count (u32), then per entry its kind (u8), its sequence
    /// (u64), and its target, name, params and source, each as a length (u32) and its bytes.
    /// Integers are big-endian. The entries' ids are the row's, in order.
    public enum PackedEntries {
        static let version: UInt8 = 1

        /// `batch`'s entries packed.
        public static func packed(_ batch: Batch) -> [UInt8] {
            var size = 5 + batch.paramBytes.count
            for item in batch.items {
                size += 25 + item.target.utf8.count + item.name.utf8.count + item.source.utf8.count
            }
            var bytes: [UInt8] = []
            bytes.reserveCapacity(size)
            bytes.append(version)
            appendBigEndian(UInt32(batch.count), to: &bytes)
            for item in batch.items {
                bytes.append(UInt8(item.kind.rawValue))
                appendBigEndian(UInt32(truncatingIfNeeded: item.sequence >> 32), to: &bytes)
                appendBigEndian(UInt32(truncatingIfNeeded: item.sequence), to: &bytes)
                appendText(item.target, to: &bytes)
                appendText(item.name, to: &bytes)
                appendBigEndian(UInt32(item.params.count), to: &bytes)
                bytes.append(contentsOf: batch.paramBytes[item.params])
                appendText(item.source, to: &bytes)
            }
            return bytes
        }

        /// The entries packed in `bytes`, numbered from `first`, those with ids after `after` only.
        /// An entry of a kind this version does not know is skipped, as a row of one is.
        /// - Throws: ``Damaged`` when the bytes are not whole or not of this format, or do not
        ///   hold `count` entries.
        public static func unpack(
            _ bytes: UnsafeRawBufferPointer, first: Int64, count expected: Int, after: Int64,
            into entries: inout [Entry]
        ) throws(Damaged) {
            var reader = Reader(bytes: bytes)
            let version = try reader.u8()
            guard version == Self.version else {
                throw Damaged("it is of format \(version); this flowd reads format \(Self.version)")
            }
            let count = Int(try reader.u32())
            guard count == expected else {
                throw Damaged("it holds \(count) entries where its ids say \(expected)")
            }
            for index in 0..<count {
                let kind = try reader.u8()
                let sequence = UInt64(try reader.u32()) << 32 | UInt64(try reader.u32())
                let target = try reader.text()
                let name = try reader.text()
                let params = try reader.field()
                let source = try reader.text()
                let id = first + Int64(index)
                guard id > after, let kind = Kind(rawValue: Int(kind)) else { continue }
                entries.append(
                    Entry(
                        id: id, kind: kind, target: target, name: name, params: Array(params), source: source,
                        sequence: sequence))
            }
            guard reader.offset == bytes.count else {
                throw Damaged("\(bytes.count - reader.offset) bytes follow its last entry")
            }
        }

        /// Why packed entries cannot be read.
        public struct Damaged: Error, CustomStringConvertible, Sendable {
            public var description: String

            init(_ description: String) {
                self.description = description
            }
        }

        private static func appendBigEndian(_ value: UInt32, to bytes: inout [UInt8]) {
            bytes.append(UInt8(truncatingIfNeeded: value >> 24))
            bytes.append(UInt8(truncatingIfNeeded: value >> 16))
            bytes.append(UInt8(truncatingIfNeeded: value >> 8))
            bytes.append(UInt8(truncatingIfNeeded: value))
        }

        private static func appendText(_ text: String, to bytes: inout [UInt8]) {
            appendBigEndian(UInt32(text.utf8.count), to: &bytes)
            bytes.append(contentsOf: text.utf8)
        }

        private struct Reader {
            let bytes: UnsafeRawBufferPointer
            var offset = 0

            mutating func u8() throws(Damaged) -> UInt8 {
                try need(1)
                defer { offset += 1 }
                return bytes[offset]
            }

            mutating func u32() throws(Damaged) -> UInt32 {
                try need(4)
                var value: UInt32 = 0
                for index in offset..<offset + 4 { value = value << 8 | UInt32(bytes[index]) }
                offset += 4
                return value
            }

            /// A length (u32) and that many bytes.
            mutating func field() throws(Damaged) -> UnsafeRawBufferPointer {
                let count = Int(try u32())
                try need(count)
                defer { offset += count }
                return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
            }

            mutating func text() throws(Damaged) -> String {
                let raw = try field()
                guard let text = String(validating: raw, as: UTF8.self) else {
                    throw Damaged("a text at byte \(offset - raw.count) is not valid UTF-8")
                }
                return text
            }

            private func need(_ count: Int) throws(Damaged) {
                guard count <= bytes.count - offset else {
                    throw Damaged("it ends in the middle of an entry (byte \(offset) of \(bytes.count))")
                }
            }
        }
    }
}
