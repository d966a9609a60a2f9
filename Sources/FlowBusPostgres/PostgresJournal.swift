#if PostgreSQL
import Dispatch
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusProtocol
import FlowBusWire
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// flowd's journal in a PostgreSQL database that several flowd instances share, one of them
/// active: `persistence: { postgres: "postgres://user:password@host:5432/database" }`.
///
/// It keeps what the SQLite ``StepJournal`` keeps with the same rules: one transaction per batch
/// (here one statement, so one round trip), the sources' last sequences in it (`flowbus_source`),
/// checkpoints (`flowbus_checkpoint`) and bounded compaction. A batch's entries are one row of
/// `flowbus_batch`, packed (``StepJournal/PackedEntries``), numbered `first...last`: a row per
/// entry cost the server about 2.7 µs of CPU per entry, 90 times what its share of a row costs.
/// Entries of earlier versions, a row each in `flowbus_entry`, are still read and compacted; new
/// ones follow them. The lease is a PostgreSQL advisory lock held by this journal's session: only
/// the holder commits, so only it acknowledges; a standby waits for it in
/// ``acquireLease(instance:waiting:following:)``, following the journal meanwhile.
///
/// Calls other than ``connect(url:lease:logger:)`` and the lease's block the
/// calling thread (flowd's loop thread or its checkpoint writer), at most ``callTimeout`` each.
public final class PostgresJournal: SharedJournal {
    private let session: PostgresSession
    public var location: String { session.location }
    /// How the lease is kept, once taken.
    public var lease: LeaseTimings { session.lease }

    /// The advisory lock key of flowd's lease ("FlowBus1").
    package static let leaseKey: Int64 = 0x466C_6F77_4275_7331
    /// Longest wait for an answer before the connection is given up (and flowd stops).
    public static let callTimeout: Duration = PostgresSession.callTimeout

    private init(session: PostgresSession) {
        self.session = session
    }

    /// What ``CoordinatorService`` calls to open `persistence.postgres`.
    public static let opener: CoordinatorService.JournalOpener = { persistence, logger in
        guard let url = persistence.postgres else {
            throw PostgresJournalError(.invalidURL, "persistence.postgres is not set")
        }
        return try await connect(url: url, lease: persistence.lease, logger: logger)
    }

    /// Connects to the database `url` names, creating flowd's tables if they are missing.
    /// - Parameter lease: how the lease is kept, once taken (``acquireLease(instance:waiting:following:)``).
    public static func connect(
        url: String, lease: LeaseTimings = .init(), logger: Logger
    ) async throws
        -> PostgresJournal
    {
        PostgresJournal(
            session: try await PostgresSession.connect(
                url: url, lease: lease, leaseKey: leaseKey, leaseName: "flowd", tables: tables, what: "flowd's",
                logger: logger))
    }

    /// flowd's tables (the lease history's are the session's).
    private static let tables = [
        // A row per entry: what earlier versions wrote; read, compacted, never written.
        """
        CREATE TABLE IF NOT EXISTS flowbus_entry (
            id BIGSERIAL PRIMARY KEY, kind INTEGER NOT NULL, target BYTEA NOT NULL, name BYTEA NOT NULL,
            params BYTEA NOT NULL, source BYTEA NOT NULL, sequence BIGINT NOT NULL)
        """,
        // A row per batch, stored uncompressed as the rows of single entries were: compression
        // would cost the server CPU at every commit.
        """
        DO $$ BEGIN
            IF to_regclass('flowbus_batch') IS NULL THEN
                CREATE TABLE flowbus_batch (first BIGINT PRIMARY KEY, last BIGINT NOT NULL, entries BYTEA NOT NULL);
                ALTER TABLE flowbus_batch ALTER COLUMN entries SET STORAGE EXTERNAL;
                CREATE INDEX flowbus_batch_last ON flowbus_batch (last);
            END IF;
        END $$
        """,
        // Ids as bytes: they may hold any UTF-8, NUL included, which TEXT refuses.
        "CREATE TABLE IF NOT EXISTS flowbus_source (id BYTEA PRIMARY KEY, last_sequence BIGINT NOT NULL)",
        """
        CREATE TABLE IF NOT EXISTS flowbus_checkpoint (
            id BIGSERIAL PRIMARY KEY, entry BIGINT NOT NULL, created DOUBLE PRECISION NOT NULL, state BYTEA NOT NULL)
        """,
        // One row per committed batch: its events packed as a replay reply carries them.
        """
        CREATE TABLE IF NOT EXISTS flowbus_event (
            first BIGINT PRIMARY KEY, last BIGINT NOT NULL, created DOUBLE PRECISION NOT NULL, events BYTEA NOT NULL)
        """,
        "CREATE INDEX IF NOT EXISTS flowbus_event_last ON flowbus_event (last)",
        // Events uncompressed too: compressing a busy commit's megabyte of events took the server
        // more CPU than writing it. Only where a table still compresses (an ALTER takes a lock).
        """
        DO $$ BEGIN
            IF (SELECT attstorage FROM pg_attribute
                WHERE attrelid = 'flowbus_event'::regclass AND attname = 'events') <> 'e' THEN
                ALTER TABLE flowbus_event ALTER COLUMN events SET STORAGE EXTERNAL;
            END IF;
        END $$
        """,
    ]

    // MARK: Lease

    public func acquireLease(
        instance: String, waiting: @escaping @Sendable (String) -> Void, following: @Sendable () async throws -> Void
    ) async throws {
        try await session.acquireLease(instance: instance, waiting: waiting, following: following)
    }

    public func whenLeaseLost(_ handler: @escaping @Sendable (String) -> Void) {
        session.whenLeaseLost(handler)
    }

    public func checkLease() throws {
        try session.checkLease()
    }

    public func verifyLease() throws {
        try session.verifyLease()
    }

    public func leaseHistory(limit: Int) throws -> [LeaseRecord] {
        try session.leaseHistory(limit: limit)
    }

    // MARK: Journal

    public func count(after: Int64) throws -> Int {
        let rows = try exclusive {
            try run(
                """
                SELECT (SELECT count(*) FROM flowbus_entry WHERE id > \(after))
                    + COALESCE((SELECT sum(last - GREATEST(first, \(after) + 1) + 1) FROM flowbus_batch
                        WHERE last > \(after)), 0)::int8
                """
            ).rows
        }
        return Int(try rows.first?.decode(Int64.self) ?? 0)
    }

    public func entryRange() throws -> ClosedRange<Int64>? {
        guard
            let row = try exclusive({
                try run(
                    """
                    SELECT LEAST((SELECT min(id) FROM flowbus_entry), (SELECT min(first) FROM flowbus_batch)),
                        GREATEST((SELECT max(id) FROM flowbus_entry), (SELECT max(last) FROM flowbus_batch))
                    """
                ).rows.first
            })
        else {
            return nil
        }
        let (first, last) = try row.decode((Int64?, Int64?).self)
        guard let first, let last else { return nil }
        return first...last
    }

    /// A sequence may skip ids (a batch rolled back), so the first id tells nothing: compaction
    /// only ever follows a stored checkpoint, and checkpoints are only ever replaced.
    public func mayHaveCompacted() throws -> Bool {
        try exclusive {
            try run("SELECT EXISTS (SELECT 1 FROM flowbus_checkpoint)").rows.first?.decode(Bool.self) ?? false
        }
    }

    public func entries(after: Int64, limit: Int) throws -> [StepJournal.Entry] {
        guard limit > 0 else { return [] }
        return try exclusive {
            let legacy = try legacyEntries(after: after, limit: limit)
            var entries = legacy.entries
            var cursor = legacy.last
            // Batches follow every entry of earlier versions: read them once those are all read.
            while legacy.rows < limit && entries.count < limit {
                // A few rows at a time: a batch holds up to thousands of entries.
                let rows = try run(
                    """
                    SELECT first, last, entries FROM flowbus_batch WHERE last > \(cursor) ORDER BY first LIMIT 4
                    """, timeout: .seconds(30)
                ).rows
                guard !rows.isEmpty else { break }
                for row in rows {
                    let (first, last, packed) = try row.decode((Int64, Int64, ByteBuffer).self)
                    do {
                        try packed.withUnsafeReadableBytes { bytes in
                            try StepJournal.PackedEntries.unpack(
                                bytes, first: first, count: Int(last - first + 1), after: cursor, into: &entries)
                        }
                    } catch {
                        throw PostgresJournalError(
                            .damaged, "the batch of entries \(first)...\(last) in \(location) is damaged: \(error)")
                    }
                    cursor = last
                }
            }
            if entries.count > limit { entries.removeLast(entries.count - limit) }
            return entries
        }
    }

    /// Up to `limit` entries of earlier versions (a row each) after `after`, the id of the last
    /// row read (`after` if none) and how many rows were read.
    private func legacyEntries(
        after: Int64, limit: Int
    ) throws -> (entries: [StepJournal.Entry], last: Int64, rows: Int) {
        let rows = try run(
            """
            SELECT id, kind, target, name, params, source, sequence FROM flowbus_entry
            WHERE id > \(after) ORDER BY id LIMIT \(Int64(limit))
            """
        ).rows
        var last = after
        let entries = try rows.compactMap { row -> StepJournal.Entry? in
            let (id, kind, target, name, params, source, sequence) = try row.decode(
                (Int64, Int32, ByteBuffer, ByteBuffer, ByteBuffer, ByteBuffer, Int64).self)
            last = id
            guard let kind = StepJournal.Kind(rawValue: Int(kind)) else { return nil }
            return StepJournal.Entry(
                id: id, kind: kind, target: String(buffer: target), name: String(buffer: name),
                params: Array(buffer: params),
                source: String(buffer: source), sequence: UInt64(bitPattern: sequence))
        }
        return (entries, last, rows.count)
    }

    public func latestCheckpoint() throws -> StepJournal.Checkpoint? {
        // A large tree's checkpoint takes a while to arrive.
        guard
            let row = try exclusive({
                try run(
                    "SELECT entry, created, state FROM flowbus_checkpoint ORDER BY id DESC LIMIT 1",
                    timeout: .seconds(120)
                ).rows.first
            })
        else {
            return nil
        }
        let (entry, created, state) = try row.decode((Int64, Double, ByteBuffer).self)
        return StepJournal.Checkpoint(
            entry: entry, created: Date(timeIntervalSince1970: created), state: Data(Array(buffer: state)))
    }

    public func latestCheckpointEntry() throws -> Int64? {
        try exclusive {
            try run("SELECT entry FROM flowbus_checkpoint ORDER BY id DESC LIMIT 1").rows.first?.decode(Int64.self)
        }
    }

    public func store(_ checkpoint: StepJournal.Checkpoint) throws {
        let state = ByteBuffer(bytes: checkpoint.state)
        // Five seconds, and one more per 5 MB: a large tree's checkpoint must not look like a lost server.
        let timeout = PostgresJournal.callTimeout + .seconds(checkpoint.state.count / 5_000_000)
        _ = try exclusive {
            try run(
                """
                WITH stored AS (
                    INSERT INTO flowbus_checkpoint (entry, created, state)
                    VALUES (\(checkpoint.entry), \(checkpoint.created.timeIntervalSince1970), \(state)) RETURNING id)
                DELETE FROM flowbus_checkpoint WHERE id < (SELECT id FROM stored)
                """, timeout: timeout)
        }
    }

    /// One statement, so one round trip, for the whole commit; prepared once per session, so that
    /// PostgreSQL does not plan it again at every batch. A commit that compacts runs a statement of
    /// its own, so that the others do not carry its deletes.
    public func append(
        _ batch: StepJournal.Batch, events: JournalEvents?, lastSequences: [String: UInt64],
        compaction: StepJournal.Compaction?
    ) throws -> (last: Int64, compacted: Int) {
        guard !batch.isEmpty || !lastSequences.isEmpty || compaction != nil || events != nil else { return (0, 0) }
        let dealtWith = Array(lastSequences.keys)
        let statement = AppendStatement(
            count: Int64(batch.count),
            entries: ByteBuffer(bytes: batch.isEmpty ? [] : StepJournal.PackedEntries.packed(batch)),
            dealtWithIDs: dealtWith.map { ByteBuffer(string: $0) },
            dealtWithSequences: dealtWith.map { Int64(bitPattern: lastSequences[$0] ?? 0) },
            eventsFirst: Int64(clamping: events?.batch.first ?? 1),
            eventsLast: Int64(clamping: events?.batch.last ?? 0),
            eventsCreated: events?.batch.created ?? 0, events: ByteBuffer(bytes: events?.batch.events.bytes ?? []),
            eventsKeepFrom: Int64(clamping: events?.keepFrom ?? 0))
        let row: (Int64?, Int64)? = try exclusive {
            if let compaction {
                return try runPrepared(
                    CompactingAppendStatement(
                        append: statement, below: compaction.below, limit: Int64(compaction.limit)))
            }
            return try runPrepared(statement).map { ($0, 0) }
        }
        guard let (last, compacted) = row else { return (0, 0) }
        return (last ?? 0, Int(compacted))
    }

    /// Parts of the statements that append: a batch's entries numbered after the last entry
    /// there is (one packed row), its sources' last sequences, its events and their retention.
    /// Common table expressions, applied together or not at all (a statement is its own
    /// transaction).
    private enum AppendSQL {
        static let parts = """
            previous AS (
                SELECT GREATEST(
                    (SELECT last FROM flowbus_batch ORDER BY first DESC LIMIT 1),
                    (SELECT max(id) FROM flowbus_entry), 0) AS last),
            added AS (
                INSERT INTO flowbus_batch (first, last, entries)
                SELECT last + 1, last + $1::int8, $2::bytea FROM previous WHERE $1::int8 > 0
                RETURNING last),
            dealt AS (
                INSERT INTO flowbus_source (id, last_sequence)
                SELECT * FROM unnest($3::bytea[], $4::int8[])
                ON CONFLICT (id) DO UPDATE SET last_sequence = GREATEST(flowbus_source.last_sequence, excluded.last_sequence)
                RETURNING 1),
            events AS (
                INSERT INTO flowbus_event (first, last, created, events)
                SELECT $5::int8, $6::int8, $7::float8, $8::bytea WHERE $6::int8 >= $5::int8
                RETURNING 1),
            expired AS (DELETE FROM flowbus_event WHERE last < $9::int8 RETURNING 1)
            """

        /// Compaction's part: the entries below `below`, whole batches, oldest first, while fewer
        /// than `limit` went (the last batch may take it past), and rows of earlier versions.
        static func compaction(below: String, limit: String) -> String {
            """
            deleted AS (
                DELETE FROM flowbus_batch WHERE first IN (
                    SELECT first FROM (
                        SELECT first, sum(last - first + 1) OVER (ORDER BY first) - (last - first + 1) AS before
                        FROM flowbus_batch WHERE last < \(below) ORDER BY first LIMIT \(limit)) oldest
                    WHERE before < \(limit))
                RETURNING last - first + 1 AS count),
            deletedRows AS (
                DELETE FROM flowbus_entry WHERE id IN (
                    SELECT id FROM flowbus_entry WHERE id < \(below) ORDER BY id LIMIT \(limit))
                RETURNING 1)
            """
        }

        static let compacted =
            "(SELECT COALESCE(sum(count), 0) FROM deleted)::int8 + (SELECT count(*) FROM deletedRows)"
    }

    private struct AppendStatement: PostgresPreparedStatement {
        static let name = "flowbus_append_batch"
        static let sql = "WITH \(AppendSQL.parts) SELECT (SELECT last FROM added)"
        typealias Row = Int64?

        var count: Int64
        var entries: ByteBuffer
        var dealtWithIDs: [ByteBuffer]
        var dealtWithSequences: [Int64]
        /// The batch's events (none when `eventsLast` < `eventsFirst`) and the retention.
        var eventsFirst: Int64
        var eventsLast: Int64
        var eventsCreated: Double
        var events: ByteBuffer
        var eventsKeepFrom: Int64

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 9)
            append(to: &bindings)
            return bindings
        }

        func append(to bindings: inout PostgresBindings) {
            bindings.append(count)
            bindings.append(entries)
            bindings.append(dealtWithIDs)
            bindings.append(dealtWithSequences)
            bindings.append(eventsFirst)
            bindings.append(eventsLast)
            bindings.append(eventsCreated)
            bindings.append(events)
            bindings.append(eventsKeepFrom)
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            try row.decode(Row.self)
        }
    }

    private struct CompactingAppendStatement: PostgresPreparedStatement {
        static let name = "flowbus_append_batch_compacting"
        static let sql = """
            WITH \(AppendSQL.parts), \(AppendSQL.compaction(below: "$10::int8", limit: "$11::int8"))
            SELECT (SELECT last FROM added), \(AppendSQL.compacted)
            """
        typealias Row = (Int64?, Int64)

        var append: AppendStatement
        var below: Int64
        var limit: Int64

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 11)
            append.append(to: &bindings)
            bindings.append(below)
            bindings.append(limit)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            try row.decode(Row.self)
        }
    }

    // MARK: Events

    public func eventRange() throws -> ClosedRange<UInt64>? {
        guard let row = try exclusive({ try run("SELECT min(first), max(last) FROM flowbus_event").rows.first }) else {
            return nil
        }
        let (first, last) = try row.decode((Int64?, Int64?).self)
        guard let first, let last else { return nil }
        return UInt64(first)...UInt64(max(first, last))
    }

    public func eventBatches(after since: UInt64, limit: Int) throws -> [EventBatch] {
        let rows = try exclusive {
            try run(
                """
                SELECT first, last, created, events FROM flowbus_event
                WHERE last > \(Int64(clamping: since)) ORDER BY first LIMIT \(Int64(limit))
                """, timeout: .seconds(30)
            ).rows
        }
        return try rows.map { row in
            let (first, last, created, events) = try row.decode((Int64, Int64, Double, ByteBuffer).self)
            return EventBatch(
                first: UInt64(first), last: UInt64(last), created: created,
                events: try PackedEvents(bytes: Array(buffer: events)))
        }
    }

    public func trimEvents(committedBefore before: Double) throws -> Int {
        let rows = try exclusive {
            try run(
                """
                WITH deleted AS (
                    DELETE FROM flowbus_event WHERE first < COALESCE(
                        (SELECT first FROM flowbus_event WHERE created >= \(before) ORDER BY first LIMIT 1),
                        (SELECT max(first) FROM flowbus_event), 0)
                    RETURNING 1)
                SELECT count(*) FROM deleted
                """
            ).rows
        }
        return Int(try rows.first?.decode(Int64.self) ?? 0)
    }

    public func compact(_ compaction: StepJournal.Compaction) throws -> Int {
        let compacted = try exclusive {
            try runPrepared(CompactStatement(below: compaction.below, limit: Int64(compaction.limit)))
        }
        return Int(compacted ?? 0)
    }

    /// Compaction in a transaction of its own.
    private struct CompactStatement: PostgresPreparedStatement {
        static let name = "flowbus_compact"
        static let sql =
            "WITH \(AppendSQL.compaction(below: "$1::int8", limit: "$2::int8")) SELECT \(AppendSQL.compacted)"
        typealias Row = Int64

        var below: Int64
        var limit: Int64

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 2)
            bindings.append(below)
            bindings.append(limit)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            try row.decode(Row.self)
        }
    }

    public func lastSequence(of source: String) throws -> UInt64? {
        try exclusive {
            try run("SELECT last_sequence FROM flowbus_source WHERE id = \(ByteBuffer(string: source))").rows.first
        }
        .map { UInt64(bitPattern: try $0.decode(Int64.self)) }
    }

    public func lastSequences(of sources: [String]) throws -> [String: UInt64] {
        guard !sources.isEmpty else { return [:] }
        let ids = sources.map { ByteBuffer(string: $0) }
        let rows = try exclusive {
            try run("SELECT id, last_sequence FROM flowbus_source WHERE id = ANY(\(ids))").rows
        }
        var found: [String: UInt64] = [:]
        for row in rows {
            let (id, last) = try row.decode((ByteBuffer, Int64).self)
            found[String(buffer: id)] = UInt64(bitPattern: last)
        }
        return found
    }

    public func flush() {}

    /// Closes the connection (ending the session frees the lease), waiting at most 2 s.
    public func close() {
        session.close()
    }

    // MARK: Calls

    private func exclusive<T>(_ body: () throws -> T) rethrows -> T {
        try session.exclusive(body)
    }

    private func run(
        _ query: PostgresQuery, timeout: Duration = PostgresJournal.callTimeout
    ) throws -> PostgresQueryResult {
        try session.run(query, timeout: timeout)
    }

    private func runPrepared<Statement: PostgresPreparedStatement>(
        _ statement: Statement, timeout: Duration = PostgresJournal.callTimeout
    ) throws -> Statement.Row? where Statement.Row: Sendable {
        try session.runPrepared(statement, timeout: timeout)
    }
}

/// Why the PostgreSQL journal failed.
///
/// ``code`` says what went wrong, so that a caller can match it (`error.code == .connectionLost`);
/// ``description`` says it for a person, naming the server (without the password). New codes do
/// not break callers.
public struct PostgresJournalError: Error, CustomStringConvertible, Sendable, Hashable {
    /// What went wrong.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String {
            case invalidURL = "invalid-url"
            case cannotConnect = "cannot-connect"
            case connectionLost = "connection-lost"
            case noAnswer = "no-answer"
            case queryFailed = "query-failed"
            case damaged
        }

        private let value: Value

        private init(_ value: Value) {
            self.value = value
        }

        /// `persistence.postgres` is not set, or is not `postgres://user:password@host:port/database`.
        public static let invalidURL = Code(.invalidURL)
        /// No connection to the server could be made (down, unreachable, or refusing the login).
        public static let cannotConnect = Code(.cannotConnect)
        /// The connection broke, or broke earlier: the lease can no longer be trusted, and every
        /// later call fails at once.
        public static let connectionLost = Code(.connectionLost)
        /// The server did not answer within ``PostgresJournal/callTimeout``: the connection is
        /// given up, and later calls fail with ``connectionLost``.
        public static let noAnswer = Code(.noAnswer)
        /// The server answered with an error (its message is in the description): permissions, a
        /// constraint, a table it cannot create.
        public static let queryFailed = Code(.queryFailed)
        /// What the journal holds cannot be read back: a batch of entries is not whole or not of
        /// a format this version reads.
        public static let damaged = Code(.damaged)

        public var description: String { value.rawValue }
    }

    /// What went wrong, to match.
    public var code: Code
    /// What went wrong, in words.
    public var description: String

    init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}
#endif
