import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Flows
import Foundation
import GRDB
import GRDBSQLite
import ZeroMQ

/// The coordinator's write-ahead journal: every step, deep link and renderer report flowd
/// applied, in order, and the last sequence dealt with per source, in one SQLite file (WAL
/// mode, through GRDB).
///
/// flowd appends one transaction per ingress batch and acknowledges the batch only after it is
/// committed, so an acknowledged step survives a crash. Every so often it also stores a
/// checkpoint of the engine (`CoordinatorCheckpoint`) and drops the entries it covers, so that
/// neither the file nor the restart time grows with history. On start it restores the newest
/// checkpoint, then replays the entries after it through the engine (which is deterministic given
/// the same inputs); the sources' last sequences are looked up on demand. Delete the file to
/// start from an empty tree.
///
/// Tools may open a journal read-only to inspect it (``open(readingAt:)``, ``entries(after:limit:)``).
public final class StepJournal: Journal {
    /// What kind of input an entry is.
    public enum Kind: Int, Sendable, Hashable {
        /// A step from a stepper: `target` is the stepper id.
        case step = 1
        /// A deep link: `target` is empty.
        case deepLink = 2
        /// A renderer report: `target` is the presentable id, `name` the event.
        case report = 15
    }

    /// One applied input.
    public struct Entry: Sendable, Hashable {
        /// Position in the journal, from 1.
        public var id: Int64
        public var kind: Kind
        /// The stepper id of a step, the presentable id of a report, empty for a deep link.
        public var target: String
        /// The step name, or the report's event.
        public var name: String
        /// The params as one FBV map (empty for none).
        public var params: [UInt8]
        /// The sender's source id and the message's sequence.
        public var source: String
        public var sequence: UInt64

        public init(
            id: Int64, kind: Kind, target: String, name: String, params: [UInt8], source: String, sequence: UInt64
        ) {
            self.id = id
            self.kind = kind
            self.target = target
            self.name = name
            self.params = params
            self.source = source
            self.sequence = sequence
        }

        /// The params decoded.
        public func decodeParams() throws -> WireParams {
            if params.isEmpty { return [:] }
            guard case .map(let map) = try FBV.decode(params) else {
                throw WireError(.badParams, "journal params are not a map")
            }
            return map
        }
    }

    /// An entry to append (no id yet).
    public struct Record: Sendable {
        public var kind: Kind
        public var target: String
        public var name: String
        public var params: Data
        public var source: String
        public var sequence: UInt64

        public init(kind: Kind, target: String, name: String, params: Data, source: String, sequence: UInt64) {
            self.kind = kind
            self.target = target
            self.name = name
            self.params = params
            self.source = source
            self.sequence = sequence
        }
    }

    /// How hard each commit is made durable (`persistence.synchronous`).
    public typealias Synchronous = JournalSynchronous

    /// The file's path.
    public let path: String
    public var location: String { path }
    private let database: DatabaseQueue

    /// Whether the file has the table of packed commits: one of an earlier version opened read-only
    /// has only a row per entry.
    private let hasCommits: Bool

    private init(path: String, database: DatabaseQueue, hasCommits: Bool = true) {
        self.path = path
        self.database = database
        self.hasCommits = hasCommits
    }

    /// Opens (creating it if needed) the journal at `path` for writing.
    public static func open(path: String, synchronous: Synchronous = .full) throws -> StepJournal {
        let directory = (path as NSString).deletingLastPathComponent
        if !directory.isEmpty {
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            } catch {
                throw JournalError.unopenable(
                    path: path, cause: "its directory \(directory) cannot be created (\(error.localizedDescription))")
            }
        }
        var configuration = Configuration()
        configuration.journalMode = .wal
        configuration.label = "flowd-journal"
        let pragma = synchronous == .full ? "FULL" : "NORMAL"
        configuration.prepareDatabase { db in
            // A new journal's pages: a commit is mostly two blobs (its entries and its events),
            // written a page at a time twice (log, then file), and 16 KB pages took a quarter less
            // CPU per commit than 4 KB ones. First: a pragma that sets up the file (auto_vacuum) fixes
            // the size. An existing journal keeps its own.
            try db.execute(sql: "PRAGMA page_size = 16384")
            // The write-ahead log is folded into the file at about 4 MB, whatever the page size.
            let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
            try db.execute(sql: "PRAGMA wal_autocheckpoint = \(max(1, (4 << 20) / max(pageSize, 512)))")
            // Lets compaction give pages back to the file system (takes effect in a new file only).
            try db.execute(sql: "PRAGMA auto_vacuum = INCREMENTAL")
            // The write-ahead log shrinks back after it grew (it is only ever rewound otherwise).
            try db.execute(sql: "PRAGMA journal_size_limit = 33554432")
            // Debian builds SQLite to zero every page compaction frees, one more page written each
            // (a quarter of the journal's bytes): FAST still clears what is deleted from the pages
            // a commit writes anyway.
            try db.execute(sql: "PRAGMA secure_delete = FAST")
        }
        do {
            let database = try DatabaseQueue(path: path, configuration: configuration)
            // Only now: GRDB sets `synchronous = NORMAL` as it turns WAL on, after prepareDatabase.
            try database.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = \(pragma)") }
            // Steps may carry anything their senders put in params: private to flowd's user, like
            // its ipc endpoints (SQLite gives the -wal and -shm files the same mode).
            chmod(path, 0o600)
            try migrator.migrate(database)
            // A damaged page may only show when read: read everything once, before serving.
            let check = try database.read { db in try String.fetchAll(db, sql: "PRAGMA quick_check") }
            guard check == ["ok"] else {
                throw JournalError.damaged(path: path, cause: check.prefix(3).joined(separator: "; "))
            }
            return StepJournal(path: path, database: database)
        } catch let error as DatabaseError where [.SQLITE_CORRUPT, .SQLITE_NOTADB].contains(error.resultCode) {
            throw JournalError.damaged(path: path, cause: "SQLite: \(error.message ?? "\(error.resultCode)")")
        } catch let error as DatabaseError
            where [.SQLITE_CANTOPEN, .SQLITE_READONLY, .SQLITE_PERM, .SQLITE_IOERR, .SQLITE_FULL]
            .contains(error.resultCode)
        {
            throw JournalError.unopenable(path: path, cause: openFailure(path, error))
        }
    }

    /// Why a journal could not be opened, in words.
    private static func openFailure(_ path: String, _ error: DatabaseError) -> String {
        var isDirectory: ObjCBool = false
        let directory =
            (path as NSString).deletingLastPathComponent.isEmpty ? "." : (path as NSString).deletingLastPathComponent
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            return "it is a directory"
        }
        if access(directory, W_OK) != 0 {
            return
                "its directory \(directory) is not writable by this user (uid \(getuid())): \(String(cString: strerror(errno)))"
        }
        if FileManager.default.fileExists(atPath: path), access(path, R_OK | W_OK) != 0 {
            return "the file is not readable and writable by this user (uid \(getuid()))"
        }
        if error.resultCode == .SQLITE_FULL { return "the disk is full" }
        return "SQLite: \(error.message ?? "\(error.resultCode)")"
    }

    /// Opens an existing journal read-only (e.g. to inspect it while flowd is down).
    public static func open(readingAt path: String) throws -> StepJournal {
        var configuration = Configuration()
        configuration.readonly = true
        let database = try DatabaseQueue(path: path, configuration: configuration)
        let hasCommits = try database.read { db in try db.tableExists("batch") }
        return StepJournal(path: path, database: database, hasCommits: hasCommits)
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE entry (
                        id INTEGER PRIMARY KEY,
                        kind INTEGER NOT NULL,
                        target TEXT NOT NULL,
                        name TEXT NOT NULL,
                        params BLOB NOT NULL,
                        source TEXT NOT NULL,
                        sequence INTEGER NOT NULL
                    );
                    CREATE TABLE source (
                        id TEXT PRIMARY KEY NOT NULL,
                        lastSequence INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v2-checkpoint") { db in
            // `entry` is the id of the last entry the checkpoint covers.
            try db.execute(
                sql: """
                    CREATE TABLE checkpoint (
                        id INTEGER PRIMARY KEY,
                        entry INTEGER NOT NULL,
                        created REAL NOT NULL,
                        state BLOB NOT NULL
                    );
                    """)
        }
        migrator.registerMigration("v3-events") { db in
            // One row per committed batch: its events packed as a replay reply carries them.
            try db.execute(
                sql: """
                    CREATE TABLE event (
                        first INTEGER PRIMARY KEY,
                        last INTEGER NOT NULL,
                        created REAL NOT NULL,
                        events BLOB NOT NULL
                    );
                    CREATE INDEX event_last ON event (last);
                    """)
        }
        migrator.registerMigration("v4-batches") { db in
            // A commit's entries in one row, packed (``PackedEntries``), numbered `first...last`;
            // `entry` keeps the rows of earlier versions, of salvaged journals and reserved ids.
            try db.execute(
                sql: """
                    CREATE TABLE batch (
                        first INTEGER PRIMARY KEY,
                        last INTEGER NOT NULL,
                        entries BLOB NOT NULL
                    );
                    """)
        }
        migrator.registerMigration("v5-reservations") { db in
            // Each id a salvage numbered past (``reserveIDs(through:)``), apart from `entry`: when a
            // later salvage loses the end of `entry` and `batch`, it still knows where numbering
            // jumped, and numbers past the ids the lost entries could have had.
            // Those made before are the reserved ids' rows of `entry` (kind 0).
            try db.execute(
                sql: """
                    CREATE TABLE reservation (through INTEGER PRIMARY KEY);
                    INSERT INTO reservation (through) SELECT id FROM entry WHERE kind = 0;
                    """)
        }
        return migrator
    }

    // MARK: Events

    public func eventRange() throws -> ClosedRange<UInt64>? {
        try database.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT min(first), max(last) FROM event"),
                let first = row[0] as Int64?, let last = row[1] as Int64?
            else { return nil }
            return UInt64(first)...UInt64(max(first, last))
        }
    }

    public func eventBatches(after since: UInt64, limit: Int) throws -> [EventBatch] {
        try database.read { db in
            var batches: [EventBatch] = []
            let rows = try Row.fetchCursor(
                db, sql: "SELECT first, last, created, events FROM event WHERE last > ? ORDER BY first LIMIT ?",
                arguments: [Int64(clamping: since), limit])
            while let row = try rows.next() {
                let bytes: Data = row[3]
                batches.append(
                    EventBatch(
                        first: UInt64(row[0] as Int64), last: UInt64(row[1] as Int64), created: row[2],
                        events: try PackedEvents(bytes: bytes)))
            }
            return batches
        }
    }

    public func trimEvents(committedBefore before: Double) throws -> Int {
        try database.write { db in
            // Rows are in commit order: the first one young enough bounds the deletion. The newest
            // row stays whatever its age: the next instance numbers its events after it.
            guard
                let keep = try Int64.fetchOne(
                    db, sql: "SELECT first FROM event WHERE created >= ? ORDER BY first LIMIT 1", arguments: [before])
                    ?? Int64.fetchOne(db, sql: "SELECT max(first) FROM event")
            else { return 0 }
            try db.execute(sql: "DELETE FROM event WHERE first < ?", arguments: [keep])
            return db.changesCount
        }
    }

    /// All entries, in order (a small journal's, in tests and tools).
    public func entries() throws -> [Entry] {
        try entries(after: 0, limit: .max)
    }

    /// SQLite's `synchronous` on the journal's connection: 2 is FULL (a sync per commit), 1 NORMAL.
    package func synchronousLevel() throws -> Int {
        try database.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    /// The number of entries.
    public func count() throws -> Int {
        try count(after: 0)
    }

    /// The number of entries after the one with id `after`.
    public func count(after: Int64) throws -> Int {
        try database.read { db in
            // Reserved ids (kind 0) are no entries.
            let rows =
                try Int.fetchOne(db, sql: "SELECT count(*) FROM entry WHERE id > ? AND kind != 0", arguments: [after])
                ?? 0
            guard hasCommits else { return rows }
            // By the table's key, from the commit holding `after`.
            let packed =
                try Int.fetchOne(
                    db,
                    sql: """
                        SELECT COALESCE(sum(last - max(first, ?) + 1), 0) FROM batch
                        WHERE first >= COALESCE((SELECT max(first) FROM batch WHERE first <= ?), 0) AND last > ?
                        """,
                    arguments: [after + 1, after, after]) ?? 0
            return rows + packed
        }
    }

    /// The ids of the first and the last entry, nil when there is none.
    public func entryRange() throws -> ClosedRange<Int64>? {
        try database.read { db in
            // A query each: min and max together would read the whole table.
            var firsts = [try Int64.fetchOne(db, sql: "SELECT min(id) FROM entry")].compactMap { $0 }
            var lasts = [try Int64.fetchOne(db, sql: "SELECT max(id) FROM entry")].compactMap { $0 }
            if hasCommits {
                // Both by the table's key: the last commit holds the largest id.
                if let first = try Int64.fetchOne(db, sql: "SELECT min(first) FROM batch") { firsts.append(first) }
                if let last = try Int64.fetchOne(db, sql: "SELECT last FROM batch ORDER BY first DESC LIMIT 1") {
                    lasts.append(last)
                }
            }
            guard let first = firsts.min(), let last = lasts.max() else { return nil }
            return first...last
        }
    }

    /// The id of the last entry there is (0 if none): a commit numbers its entries after it.
    private static func lastID(in db: Database) throws -> Int64 {
        let row = try db.cachedStatement(sql: "SELECT max(id) FROM entry")
        let batch = try db.cachedStatement(sql: "SELECT last FROM batch ORDER BY first DESC LIMIT 1")
        return max(try Int64.fetchOne(row) ?? 0, try Int64.fetchOne(batch) ?? 0)
    }

    /// Entries are numbered from 1, each after the largest id present: a first id above 1 means
    /// entries before it were deleted (only a salvage leaves a gap, and it keeps a checkpoint).
    public func mayHaveCompacted() throws -> Bool {
        (try entryRange()?.lowerBound ?? 1) > 1
    }

    /// A stored checkpoint: the engine's state once the entries up to `entry` were applied.
    public struct Checkpoint: Sendable {
        /// The id of the last entry it covers.
        public var entry: Int64
        /// When it was written.
        public var created: Date
        /// The `CoordinatorCheckpoint`, as JSON.
        public var state: Data

        public init(entry: Int64, created: Date, state: Data) {
            self.entry = entry
            self.created = created
            self.state = state
        }
    }

    /// The newest checkpoint, nil if none was written.
    public func latestCheckpoint() throws -> Checkpoint? {
        try database.read { db in
            try Row.fetchOne(db, sql: "SELECT entry, created, state FROM checkpoint ORDER BY id DESC LIMIT 1").map {
                row in
                Checkpoint(entry: row[0], created: Date(timeIntervalSince1970: row[1]), state: row[2])
            }
        }
    }

    public func latestCheckpointEntry() throws -> Int64? {
        try database.read { db in try Int64.fetchOne(db, sql: "SELECT entry FROM checkpoint ORDER BY id DESC LIMIT 1") }
    }

    /// Stores `checkpoint` and removes older ones. The entries it covers go later, a bounded
    /// number per commit (``Compaction``): deleting millions of rows at once would stall flowd.
    public func store(_ checkpoint: Checkpoint) throws {
        try database.write { db in
            try db.execute(
                sql: "INSERT INTO checkpoint (entry, created, state) VALUES (?, ?, ?)",
                arguments: [checkpoint.entry, checkpoint.created.timeIntervalSince1970, checkpoint.state])
            try db.execute(sql: "DELETE FROM checkpoint WHERE id < ?", arguments: [db.lastInsertedRowID])
        }
    }

    /// Entries a checkpoint covers, to delete: those with an id below `below`, rows of single
    /// entries first, then whole commits, while fewer than `limit` went in one call. `below`
    /// never passes the checkpoint's own entry, whose commit stays: new commits are numbered
    /// after the largest id left, and the ids must keep growing.
    public struct Compaction: Sendable {
        public var below: Int64
        public var limit: Int

        public init(below: Int64, limit: Int) {
            self.below = below
            self.limit = limit
        }

        /// What a checkpoint of entry `entry` lets go, keeping the `keepEntries` before it.
        public init(checkpointOf entry: Int64, keepEntries: Int, limit: Int) {
            below = max(0, entry - Int64(clamping: max(0, keepEntries)))
            self.limit = limit
        }
    }

    /// Makes sure later entries are numbered after `id`: adds an entry of no kind (skipped when
    /// read) with that id if no entry has it or a larger one, and notes the jump in the table of
    /// reservations.
    package func reserveIDs(through id: Int64) throws {
        try database.write { db in
            guard try Self.lastID(in: db) < id else { return }
            try db.execute(
                sql:
                    "INSERT INTO entry (id, kind, target, name, params, source, sequence) VALUES (?, 0, '', '', x'', '', 0)",
                arguments: [id])
            try db.execute(sql: "INSERT OR IGNORE INTO reservation (through) VALUES (?)", arguments: [id])
        }
    }

    /// Notes reservations made in another journal (the one this one was salvaged from).
    package func noteReservations(_ throughs: [Int64]) throws {
        guard !throughs.isEmpty else { return }
        try database.write { db in
            for through in throughs {
                try db.execute(sql: "INSERT OR IGNORE INTO reservation (through) VALUES (?)", arguments: [through])
            }
        }
    }

    /// The ids numbering jumped past, lowest first (empty for a journal of a version before they
    /// were noted).
    package func reservations() throws -> [Int64] {
        try database.read { db in
            guard try db.tableExists("reservation") else { return [] }
            return try Int64.fetchAll(db, sql: "SELECT through FROM reservation ORDER BY through")
        }
    }

    /// Deletes entries as `compaction` says, in a commit of its own.
    /// - Returns: how many were deleted (fewer than the limit: it is done).
    public func compact(_ compaction: Compaction) throws -> Int {
        try database.write { db in try Self.compact(compaction, in: db) }
    }

    /// Rows of single entries first (they come from earlier versions), then whole commits, oldest
    /// first, while fewer than the limit went (the last commit may take it past).
    private static func compact(_ compaction: Compaction, in db: Database) throws -> Int {
        try db.execute(
            sql: "DELETE FROM entry WHERE id IN (SELECT id FROM entry WHERE id < ? ORDER BY id LIMIT ?)",
            arguments: [compaction.below, compaction.limit])
        var compacted = db.changesCount
        guard compacted < compaction.limit else { return compacted }
        let batches = try Row.fetchAll(
            db, sql: "SELECT first, last FROM batch WHERE first < ? AND last < ? ORDER BY first LIMIT ?",
            arguments: [compaction.below, compaction.below, compaction.limit - compacted])
        var through: Int64?
        for row in batches where compacted < compaction.limit {
            let (first, last): (Int64, Int64) = (row[0], row[1])
            compacted += Int(last - first + 1)
            through = first
        }
        if let through {
            try db.execute(sql: "DELETE FROM batch WHERE first <= ?", arguments: [through])
        }
        return compacted
    }

    /// The last sequence dealt with of one source, nil if the journal has none.
    public func lastSequence(of source: String) throws -> UInt64? {
        try database.read { db in
            try Int64.fetchOne(db, sql: "SELECT lastSequence FROM source WHERE id = ?", arguments: [source])
                .map { UInt64(bitPattern: $0) }
        }
    }

    public func lastSequences(of sources: [String]) throws -> [String: UInt64] {
        try database.read { db in
            var found: [String: UInt64] = [:]
            // SQLite binds at most 32,766 parameters a statement.
            for start in stride(from: 0, to: sources.count, by: 500) {
                let chunk = Array(sources[start..<min(start + 500, sources.count)])
                let marks = Array(repeating: "?", count: chunk.count).joined(separator: ",")
                let rows = try Row.fetchCursor(
                    db, sql: "SELECT id, lastSequence FROM source WHERE id IN (\(marks))",
                    arguments: StatementArguments(chunk))
                while let row = try rows.next() {
                    found[row[0]] = UInt64(bitPattern: row[1])
                }
            }
            return found
        }
    }

    /// Up to `limit` entries after the one with id `after`, in order.
    /// - Throws: ``JournalError/damaged(path:cause:)`` when a commit's packed entries cannot be read.
    public func entries(after: Int64, limit: Int) throws -> [Entry] {
        guard limit > 0 else { return [] }
        return try database.read { db in
            let single = try Self.singleEntries(after: after, limit: limit, in: db)
            var packed: [Entry] = []
            var cursor = after
            // By the table's key, from the commit holding `after`; a few rows at a time: a commit
            // holds up to thousands of entries.
            var from =
                hasCommits
                ? try Int64.fetchOne(db, sql: "SELECT max(first) FROM batch WHERE first <= ?", arguments: [after]) ?? 0
                : Int64.max
            while packed.count < limit, from < Int64.max {
                let rows = try Row.fetchAll(
                    db, sql: "SELECT first, last, entries FROM batch WHERE first >= ? ORDER BY first LIMIT 4",
                    arguments: [from])
                guard !rows.isEmpty else { break }
                for row in rows {
                    let first: Int64 = row[0]
                    guard let last = row[1] as Int64? else {
                        throw JournalError.damaged(
                            path: path, cause: "the commit of entries from \(first) has no last id")
                    }
                    from = first + 1
                    guard last > cursor else { continue }
                    try Self.unpack(row, first: first, last: last, after: cursor, into: &packed, path: path)
                    cursor = last
                }
            }
            // Single entries sit before, between or after commits (salvaged journals, reserved ids).
            var entries = single
            if !packed.isEmpty {
                entries += packed
                if !single.isEmpty { entries.sort { $0.id < $1.id } }
            }
            if entries.count > limit { entries.removeLast(entries.count - limit) }
            return entries
        }
    }

    private static func unpack(
        _ row: Row, first: Int64, last: Int64, after: Int64, into entries: inout [Entry], path: String
    ) throws {
        guard let bytes = row[2] as Data?, last >= first else {
            throw JournalError.damaged(path: path, cause: "the commit of entries \(first)...\(last) has no entries")
        }
        do {
            try bytes.withUnsafeBytes { raw in
                try PackedEntries.unpack(raw, first: first, count: Int(last - first + 1), after: after, into: &entries)
            }
        } catch {
            throw JournalError.damaged(path: path, cause: "the commit of entries \(first)...\(last): \(error)")
        }
    }

    /// Up to `limit` entries stored a row each, after `after`.
    private static func singleEntries(after: Int64, limit: Int, in db: Database) throws -> [Entry] {
        var entries: [Entry] = []
        let rows = try Row.fetchCursor(
            db,
            sql: "SELECT id, kind, target, name, params, source, sequence FROM entry WHERE id > ? ORDER BY id LIMIT ?",
            arguments: [after, limit])
        while let row = try rows.next() {
            guard let kind = Kind(rawValue: row[1]) else { continue }
            let params: Data = row[4]
            entries.append(
                Entry(
                    id: row[0], kind: kind, target: row[2], name: row[3], params: [UInt8](params), source: row[5],
                    sequence: UInt64(bitPattern: row[6])))
        }
        return entries
    }

    /// Appends `batch` and its events, raises the sources' last sequences, deletes entries as
    /// `compaction` says and events the retention lets go, in one transaction.
    /// - Returns: the id of the last entry (0 if there is none) and how many entries were compacted.
    @discardableResult
    public func append(
        _ batch: Batch, events: JournalEvents?, lastSequences: [String: UInt64], compaction: Compaction?
    ) throws -> (last: Int64, compacted: Int) {
        try append(batch, ids: nil, events: events, lastSequences: lastSequences, compaction: compaction)
    }

    /// ``append(_:events:lastSequences:compaction:)``, with the entries' ids given (when copying a journal).
    /// - Parameter ids: the entries' ids; numbered after the last by default.
    @discardableResult
    package func append(
        _ batch: Batch, ids: [Int64]? = nil, events: JournalEvents? = nil, lastSequences: [String: UInt64],
        compaction: Compaction? = nil
    ) throws -> (last: Int64, compacted: Int) {
        guard !batch.isEmpty || !lastSequences.isEmpty || compaction != nil || events != nil else { return (0, 0) }
        return try database.write { db in
            if let events {
                try Self.insert(events, in: db)
            }
            let last: Int64
            if let ids {
                try Self.insertRows(batch, ids: ids, in: db)
                last = ids.last ?? 0
            } else if batch.isEmpty {
                last = 0
            } else {
                let first = try Self.lastID(in: db) + 1
                last = first + Int64(batch.count) - 1
                try Self.insertPacked(batch, first: first, last: last, in: db)
            }
            let upsert = try db.cachedStatement(
                sql: """
                    INSERT INTO source (id, lastSequence) VALUES (?, ?)
                    ON CONFLICT(id) DO UPDATE SET lastSequence = max(lastSequence, excluded.lastSequence)
                    """)
            for (source, sequence) in lastSequences {
                upsert.setUncheckedArguments([source, Int64(bitPattern: sequence)])
                try upsert.execute()
            }
            return (last, try compaction.map { try Self.compact($0, in: db) } ?? 0)
        }
    }

    /// A commit's entries in one row: a row each cost flowd about 0.6 µs of CPU per step, mostly SQLite's.
    private static func insertPacked(_ batch: Batch, first: Int64, last: Int64, in db: Database) throws {
        let insert = try db.cachedStatement(sql: "INSERT INTO batch (first, last, entries) VALUES (?, ?, ?)")
        try PackedEntries.packed(batch).withUnsafeBytes { raw in
            try SQLiteRow.run(insert.sqliteStatement, in: db) { statement in
                sqlite3_bind_int64(statement, 1, first)
                sqlite3_bind_int64(statement, 2, last)
                sqlite3_bind_blob(statement, 3, raw.baseAddress, Int32(raw.count), nil)
            }
        }
    }

    /// Entries a row each, under the ids given (a salvaged journal keeps its ids, gaps included).
    private static func insertRows(_ batch: Batch, ids: [Int64], in db: Database) throws {
        precondition(ids.count == batch.count, "one id per entry")
        let insert = try db.cachedStatement(
            sql: "INSERT INTO entry (id, kind, target, name, params, source, sequence) VALUES (?, ?, ?, ?, ?, ?, ?)")
        // Bound straight from the batch's storage: no boxed argument or copy per entry.
        try batch.paramBytes.withUnsafeBytes { params in
            for (index, item) in batch.items.enumerated() {
                try SQLiteRow.insert(
                    insert.sqliteStatement, in: db,
                    id: ids[index], kind: Int64(item.kind.rawValue), target: item.target, name: item.name,
                    params: UnsafeRawBufferPointer(rebasing: params[item.params]), source: item.source,
                    sequence: Int64(bitPattern: item.sequence))
            }
        }
    }

    private static func insert(_ events: JournalEvents, in db: Database) throws {
        let insert = try db.cachedStatement(sql: "INSERT INTO event (first, last, created, events) VALUES (?, ?, ?, ?)")
        let batch = events.batch
        try batch.events.bytes.withUnsafeBytes { raw in
            try SQLiteRow.run(insert.sqliteStatement, in: db) { statement in
                sqlite3_bind_int64(statement, 1, Int64(clamping: batch.first))
                sqlite3_bind_int64(statement, 2, Int64(clamping: batch.last))
                sqlite3_bind_double(statement, 3, batch.created)
                sqlite3_bind_blob(statement, 4, raw.baseAddress, Int32(raw.count), nil)
            }
        }
        if events.keepFrom > 1 {
            let trim = try db.cachedStatement(sql: "DELETE FROM event WHERE last < ?")
            trim.setUncheckedArguments([Int64(clamping: events.keepFrom)])
            try trim.execute()
        }
    }

    /// Gives the pages compaction freed back to the file system and folds the write-ahead log
    /// into the main file (at a clean shutdown).
    public func flush() {
        _ = try? database.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA incremental_vacuum") }
        _ = try? database.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
    }

    /// Closes the file.
    public func close() {
        try? database.close()
    }
}
