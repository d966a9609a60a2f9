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
