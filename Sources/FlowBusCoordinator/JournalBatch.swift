import FlowBusWire
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

/// Inserts run with SQLite's own calls, text and bytes bound in place (`SQLITE_STATIC`: they
/// outlive the step): GRDB's arguments box every value, per row.
enum SQLiteRow {
    /// Runs `statement` once with what `bind` binds to it, then lets go of the bindings: the
    /// pointers bound were only lent.
    static func run(_ statement: SQLiteStatement, in db: Database, bind: (SQLiteStatement) -> Void) throws {
        sqlite3_reset(statement)
        bind(statement)
        let code = sqlite3_step(statement)
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
        guard code == SQLITE_DONE else {
            throw DatabaseError(
                resultCode: ResultCode(rawValue: code), message: db.lastErrorMessage,
                sql: String(cString: sqlite3_sql(statement)))
        }
    }

    /// An `entry` row (a row per entry, under its id).
    static func insert(
        _ statement: SQLiteStatement, in db: Database, id: Int64, kind: Int64, target: String, name: String,
        params: UnsafeRawBufferPointer, source: String, sequence: Int64
    ) throws {
        var target = target
        var name = name
        var source = source
        try target.withUTF8 { target in
            try name.withUTF8 { name in
                try source.withUTF8 { source in
                    try run(statement, in: db) { statement in
                        sqlite3_bind_int64(statement, 1, id)
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
                    }
                }
            }
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
        /// The fewest bytes an entry takes packed: its kind, its sequence and four empty fields.
        public static let minimumEntryBytes = 25

        /// `batch`'s entries packed.
        public static func packed(_ batch: Batch) -> [UInt8] {
            var size = 5 + batch.paramBytes.count
            for item in batch.items {
                size += 25 + item.target.utf8.count + item.name.utf8.count + item.source.utf8.count
            }
            var bytes: [UInt8] = []
            bytes.reserveCapacity(size)
            bytes.append(version)
            bytes.appendBigEndian(UInt32(batch.count))
            for item in batch.items {
                bytes.append(UInt8(item.kind.rawValue))
                bytes.appendBigEndian(item.sequence)
                appendField(item.target.utf8, to: &bytes)
                appendField(item.name.utf8, to: &bytes)
                appendField(batch.paramBytes[item.params], to: &bytes)
                appendField(item.source.utf8, to: &bytes)
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
            var reader = ByteReader(bytes, what: "packed entries")
            do {
                let version = try reader.u8("version")
                guard version == Self.version else {
                    throw Damaged("it is of format \(version); this flowd reads format \(Self.version)")
                }
                let count = Int(try reader.u32("count"))
                guard count == expected else {
                    throw Damaged("it holds \(count) entries where its ids say \(expected)")
                }
                for index in 0..<count {
                    let kind = try reader.u8("kind")
                    let sequence = try reader.u64("sequence")
                    let target = try text(&reader, "target")
                    let name = try text(&reader, "name")
                    let params = try field(&reader, "params")
                    let source = try text(&reader, "source")
                    let id = first + Int64(index)
                    guard id > after, let kind = Kind(rawValue: Int(kind)) else { continue }
                    entries.append(
                        Entry(
                            id: id, kind: kind, target: target, name: name, params: Array(params), source: source,
                            sequence: sequence))
                }
            } catch let error as Damaged {
                throw error
            } catch {
                // The reader's: a field longer than what is left.
                throw Damaged("it ends in the middle of an entry (\(error))")
            }
            guard reader.isAtEnd else {
                throw Damaged("\(reader.remaining) bytes follow its last entry")
            }
        }

        /// Why packed entries cannot be read.
        public struct Damaged: Error, CustomStringConvertible, Sendable {
            public var description: String

            init(_ description: String) {
                self.description = description
            }
        }

        private static func appendField(_ field: some Collection<UInt8>, to bytes: inout [UInt8]) {
            bytes.appendBigEndian(UInt32(field.count))
            bytes.append(contentsOf: field)
        }

        /// A length (u32) and that many bytes.
        private static func field(
            _ reader: inout ByteReader, _ name: String
        ) throws(WireError)
            -> UnsafeRawBufferPointer
        {
            try reader.slice(Int(try reader.u32(name)), name)
        }

        private static func text(_ reader: inout ByteReader, _ name: String) throws -> String {
            let raw = try field(&reader, name)
            guard let text = validUTF8(raw) else {
                throw Damaged("its \(name) at byte \(reader.offset - raw.count) is not valid UTF-8")
            }
            return text
        }
    }
}
