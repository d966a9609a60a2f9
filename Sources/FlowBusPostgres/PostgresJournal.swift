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
/// It keeps the tables the SQLite ``StepJournal`` keeps (`flowbus_entry`, `flowbus_source`,
/// `flowbus_checkpoint`) with the same rules: one transaction per batch (here one statement, so
/// one round trip), the sources' last sequences in it, checkpoints and bounded compaction. The lease is a PostgreSQL advisory lock
/// held by this journal's connection (session): a standby waits for it in
/// ``acquireLease(instance:waiting:following:)``. The holder runs a statement at least every
/// `lease.keepAliveMs` (``FlowBusConfiguration/LeaseTimings``); when it dies or is cut off, a
/// standby ends its session once it is idle past `lease.timeoutMs` (or PostgreSQL does, seconds
/// later), which frees the lock, and that instance can commit nothing more — hence acknowledge
/// nothing more — before the next one takes the lease. A holder whose session stays silent for
/// most of `lease.timeoutMs` gives the lease up itself (``whenLeaseLost(_:)``). Each taking is
/// recorded in `flowbus_lease`.
///
/// Calls other than ``connect(url:lease:logger:)`` and the lease's block the
/// calling thread (flowd's loop thread or its checkpoint writer), at most ``callTimeout`` each.
public final class PostgresJournal: SharedJournal {
    public let location: String
    private let connection: PostgresConnection
    private let logger: Logger
    /// Set once a call timed out or the connection failed: the lease can no longer be trusted.
    private let broken = Mutex<String?>(nil)
    /// One call (a whole transaction) at a time on the session: the loop's batches and the
    /// checkpoint writer's stores must not interleave inside one transaction.
    private let session = NSLock()
    /// When the session last answered (``ContinuousClock`` nanoseconds since ``epoch``): the
    /// keep-alive and ``verifyLease()`` need no statement of their own while commits come.
    private let lastAnswer = Atomic<Int64>(0)
    private let epoch = ContinuousClock.now

    /// The advisory lock key of the lease ("FlowBus1").
    static let leaseKey: Int64 = 0x466C_6F77_4275_7331
    /// Longest wait for an answer before the connection is given up (and flowd stops).
    public static let callTimeout: Duration = .seconds(5)
    /// How often the holder shows it is alive, and how long its session may stay idle before a
    /// standby ends it: an idle session means its machine or link is gone, long before the
    /// server's own TCP checks would tell.
    public let lease: LeaseTimings
    private let keepAlive: Duration
    private let leaseTimeout: Duration
    /// Called once when the holder's session stopped answering (see ``whenLeaseLost(_:)``).
    private let leaseLost = Mutex<(@Sendable (String) -> Void)?>(nil)
    /// Set by ``close()``: the keep-alive thread ends.
    private let closing = Atomic<Bool>(false)
    /// A standby said once that it may not end the holder's session.
    private let toldNotAllowed = Atomic<Bool>(false)

    private init(location: String, connection: PostgresConnection, lease: LeaseTimings, logger: Logger) {
        self.location = location
        self.connection = connection
        self.lease = lease
        keepAlive = .milliseconds(lease.keepAliveMs)
        leaseTimeout = .milliseconds(lease.timeoutMs)
        self.logger = logger
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
        guard let components = URLComponents(string: url), let host = components.host, !host.isEmpty,
            let user = components.user, !user.isEmpty
        else {
            throw PostgresJournalError(
                .invalidURL,
                "persistence.postgres '\(redacted(url))' is not postgres://user:password@host:port/database")
        }
        let database = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        let configuration = PostgresConnection.Configuration(
            host: host, port: components.port ?? 5432, username: user, password: components.password,
            database: database.isEmpty ? nil : database, tls: .disable)
        let location = redacted(url)
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: logger)
        } catch {
            throw PostgresJournalError(.cannotConnect, "cannot connect to \(location): \(String(reflecting: error))")
        }
        // The server notices a vanished flowd within seconds, not hours, and frees its lease.
        for setting in [
            "tcp_keepalives_idle = 1", "tcp_keepalives_interval = 1", "tcp_keepalives_count = 2",
            "tcp_user_timeout = 2000",
        ] {
            do {
                try await connection.query(PostgresQuery(unsafeSQL: "SET \(setting)"), logger: logger)
            } catch {
                try? await connection.close()
                throw PostgresJournalError(
                    .queryFailed, "cannot SET \(setting) on \(location): \(String(reflecting: error))")
            }
        }
        let journal = PostgresJournal(location: location, connection: connection, lease: lease, logger: logger)
        do {
            try await journal.createTables()
        } catch {
            journal.close()
            throw PostgresJournalError(
                .queryFailed, "cannot create flowd's tables in \(location): \(String(reflecting: error))")
        }
        return journal
    }

    /// `url` without its password.
    static func redacted(_ url: String) -> String {
        guard var components = URLComponents(string: url), components.password != nil else { return url }
        components.password = "…"
        return components.string ?? url
    }

    // MARK: Lease

    public func acquireLease(
        instance: String, waiting: @escaping @Sendable (String) -> Void, following: @Sendable () async throws -> Void
    ) async throws {
        var told = false
        while true {
            let rows = try await connection.query("SELECT pg_try_advisory_lock(\(Self.leaseKey))", logger: logger)
            var held = false
            for try await granted in rows.decode(Bool.self) { held = granted }
            if held { break }
            if !told {
                told = true
                waiting(await holder())
            }
            if try await endSilentHolder() {
                continue
            }
            try await following()
            try await Task.sleep(for: .milliseconds(100))
        }
        let host = ProcessInfo.processInfo.hostName
        let pid = Int64(ProcessInfo.processInfo.processIdentifier)
        try await connection.query(
            "INSERT INTO flowbus_lease (instance, host, pid, acquired) VALUES (\(instance), \(host), \(pid), \(Date().timeIntervalSince1970))",
            logger: logger)
        // The lease's silence is counted from here: the statements above ran outside ``call``.
        lastAnswer.store(Self.nanoseconds(epoch.duration(to: .now)), ordering: .relaxed)
        startKeepAlive()
    }

    /// Ends the lease holder's session when it has been idle past `lease.timeoutMs` (its machine
    /// was cut off: the server would notice only seconds later). Ending it frees the lock, and
    /// the holder can commit, so acknowledge, nothing more.
    /// - Returns: whether a session was ended.
    private func endSilentHolder() async throws -> Bool {
        let key = UInt64(bitPattern: Self.leaseKey)
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    SELECT a.pid, a.state, EXTRACT(EPOCH FROM clock_timestamp() - a.state_change)::float8
                    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                      AND l.classid = \(key >> 32) AND l.objid = \(key & 0xFFFF_FFFF)
                    """), logger: logger)
        var silent: (pid: Int32, seconds: Double)?
        for try await (pid, state, seconds) in rows.decode((Int32, String?, Double?).self) {
            // A statement under way is no silence, however long it takes.
            guard let state, state != "active", let seconds, seconds * 1000 > Double(lease.timeoutMs)
            else { continue }
            silent = (pid, seconds)
        }
        guard let silent else { return false }
        logger.warning(
            "the lease holder's session (server pid \(silent.pid)) has been silent for \(Int(silent.seconds * 1000)) ms: ending it to take over"
        )
        do {
            try await connection.query("SELECT pg_terminate_backend(\(silent.pid))", logger: logger)
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "42501" {
            // Not this role's session to end: the server's own TCP checks end it, in seconds.
            if !toldNotAllowed.exchange(true, ordering: .relaxed) {
                logger.warning(
                    "not allowed to end the lease holder's session (give every instance the same role, or pg_signal_backend): waiting for the server to notice it is gone"
                )
            }
            return false
        }
        // The lock is free once that backend has exited.
        try await Task.sleep(for: .milliseconds(20))
        return true
    }

    /// While this instance holds the lease: a statement at least every `lease.keepAliveMs` on its
    /// session, so that standbys can tell it is alive (see ``endSilentHolder()``).
    private func startKeepAlive() {
        let thread = Thread { [self] in
            while !closing.load(ordering: .relaxed), broken.withLock({ $0 }) == nil {
                Thread.sleep(forTimeInterval: Double(lease.keepAliveMs) / 1000 / 2)
                guard !closing.load(ordering: .relaxed) else { return }
                // Commits keep the session busy: a keep-alive would only delay the next one.
                guard !answered(within: keepAlive / 2) else { continue }
                do {
                    _ = try exclusive { try run("SELECT 1", timeout: answerDeadline()) }
                } catch {
                    guard !closing.load(ordering: .relaxed) else { return }
                    // The lease cannot be relied on: this instance stops before a standby may serve.
                    let reason = "keep-alive failed: \(error)"
                    broken.withLock { $0 = $0 ?? reason }
                    logger.error("the lease's session does not answer: \(error)")
                    leaseLost.withLock { $0 }?(reason)
                    return
                }
            }
        }
        thread.name = "flowbus-lease-keepalive"
        thread.start()
    }

    /// How long the keep-alive may wait for its answer: until nine tenths of `lease.timeoutMs`
    /// after the session's last answer, when a standby may be about to end the session.
    private func answerDeadline() -> Duration {
        let last = lastAnswer.load(ordering: .relaxed)
        guard last > 0 else { return leaseTimeout * 0.9 }
        let silent = Duration.nanoseconds(Self.nanoseconds(epoch.duration(to: .now)) - last)
        return max(.milliseconds(10), leaseTimeout * 0.9 - silent)
    }

    /// Registers what to call, once and from another thread, when the holder's session stopped
    /// answering for most of `lease.timeoutMs`: flowd stops at once rather than at its next check.
    public func whenLeaseLost(_ handler: @escaping @Sendable (String) -> Void) {
        leaseLost.withLock { $0 = handler }
    }

    /// The newest lease holder on record, in words.
    private func holder() async -> String {
        guard
            let rows = try? await connection.query(
                "SELECT instance, host, pid FROM flowbus_lease ORDER BY id DESC LIMIT 1", logger: logger)
        else { return "another flowd" }
        do {
            for try await (instance, host, pid) in rows.decode((String, String, Int64).self) {
                return "\(instance) (pid \(pid) on \(host))"
            }
        } catch {}
        return "another flowd"
    }

    /// Creates the tables if they are missing, one instance at a time (a transaction-level
    /// advisory lock): a standby reads them before it holds the lease.
    private func createTables() async throws {
        try await connection.query("BEGIN", logger: logger)
        try await connection.query("SELECT pg_advisory_xact_lock(\(Self.leaseKey - 1))", logger: logger)
        for statement in [
            """
            CREATE TABLE IF NOT EXISTS flowbus_entry (
                id BIGSERIAL PRIMARY KEY, kind INTEGER NOT NULL, target BYTEA NOT NULL, name BYTEA NOT NULL,
                params BYTEA NOT NULL, source BYTEA NOT NULL, sequence BIGINT NOT NULL)
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
            """
            CREATE TABLE IF NOT EXISTS flowbus_lease (
                id BIGSERIAL PRIMARY KEY, instance TEXT NOT NULL, host TEXT NOT NULL, pid BIGINT NOT NULL,
                acquired DOUBLE PRECISION NOT NULL)
            """,
        ] {
            try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
        try await connection.query("COMMIT", logger: logger)
    }

    public func checkLease() throws {
        if let reason = broken.withLock({ $0 }) {
            throw PostgresJournalError(.connectionLost, "the connection to \(location) is gone: \(reason)")
        }
    }

    public func verifyLease() throws {
        try checkLease()
        // An answer on this session means the session, and so the lock, is still there. One within
        // the keep-alive interval will do: a standby takes the lock only after a silence of
        // `lease.timeoutMs`, or once the session is ended, which fails the next commit.
        guard !answered(within: keepAlive) else { return }
        _ = try exclusive { try run("SELECT 1", timeout: answerDeadline()) }
    }

    /// Whether the session answered a statement in the last `interval`.
    private func answered(within interval: Duration) -> Bool {
        let last = lastAnswer.load(ordering: .relaxed)
        guard last > 0 else { return false }
        return Self.nanoseconds(epoch.duration(to: .now)) - last < Self.nanoseconds(interval)
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    }

    public func leaseHistory(limit: Int) throws -> [LeaseRecord] {
        try exclusive {
            try run("SELECT instance, host, pid, acquired FROM flowbus_lease ORDER BY id DESC LIMIT \(Int64(limit))")
                .rows.map { row in
                    let (instance, host, pid, acquired) = try row.decode((String, String, Int64, Double).self)
                    return LeaseRecord(
                        instance: instance, host: host, pid: Int(pid), acquired: Date(timeIntervalSince1970: acquired))
                }
        }
    }

    // MARK: Journal

    public func count(after: Int64) throws -> Int {
        let rows = try exclusive { try run("SELECT count(*) FROM flowbus_entry WHERE id > \(after)").rows }
        return Int(try rows.first?.decode(Int64.self) ?? 0)
    }

    public func entryRange() throws -> ClosedRange<Int64>? {
        guard let row = try exclusive({ try run("SELECT min(id), max(id) FROM flowbus_entry").rows.first }) else {
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
        let rows = try exclusive {
            try run(
                """
                SELECT id, kind, target, name, params, source, sequence FROM flowbus_entry
                WHERE id > \(after) ORDER BY id LIMIT \(Int64(limit))
                """
            ).rows
        }
        return try rows.compactMap { row in
            let (id, kind, target, name, params, source, sequence) = try row.decode(
                (Int64, Int32, ByteBuffer, ByteBuffer, ByteBuffer, ByteBuffer, Int64).self)
            guard let kind = StepJournal.Kind(rawValue: Int(kind)) else { return nil }
            return StepJournal.Entry(
                id: id, kind: kind, target: String(buffer: target), name: String(buffer: name),
                params: Array(buffer: params),
                source: String(buffer: source), sequence: UInt64(bitPattern: sequence))
        }
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
    /// PostgreSQL does not plan it again at every batch.
    public func append(
        _ batch: StepJournal.Batch, events: JournalEvents?, lastSequences: [String: UInt64],
        compaction: StepJournal.Compaction?
    ) throws -> (last: Int64, compacted: Int) {
        guard !batch.isEmpty || !lastSequences.isEmpty || compaction != nil || events != nil else { return (0, 0) }
        let dealtWith = Array(lastSequences.keys)
        // No compaction: nothing is below id 0.
        let statement = AppendStatement(
            kinds: batch.items.map { Int32($0.kind.rawValue) },
            targets: batch.items.map { ByteBuffer(string: $0.target) },
            names: batch.items.map { ByteBuffer(string: $0.name) },
            params: batch.items.map { ByteBuffer(bytes: batch.params(of: $0)) },
            sources: batch.items.map { ByteBuffer(string: $0.source) },
            sequences: batch.items.map { Int64(bitPattern: $0.sequence) },
            dealtWithIDs: dealtWith.map { ByteBuffer(string: $0) },
            dealtWithSequences: dealtWith.map { Int64(bitPattern: lastSequences[$0] ?? 0) },
            below: compaction?.below ?? 0, limit: Int64(compaction?.limit ?? 0),
            eventsFirst: Int64(clamping: events?.batch.first ?? 1),
            eventsLast: Int64(clamping: events?.batch.last ?? 0),
            eventsCreated: events?.batch.created ?? 0, events: ByteBuffer(bytes: events?.batch.events.bytes ?? []),
            eventsKeepFrom: Int64(clamping: events?.keepFrom ?? 0))
        guard let (last, compacted) = try exclusive({ try runPrepared(statement) }) else { return (0, 0) }
        return (last ?? 0, Int(compacted))
    }

    /// A batch's entries (arrays in, rows numbered in their order), its sources' last sequences and
    /// the entries compaction drops: common table expressions, applied together or not at all (a
    /// statement is its own transaction).
    private struct AppendStatement: PostgresPreparedStatement {
        static let name = "flowbus_append"
        static let sql = """
            WITH added AS (
                INSERT INTO flowbus_entry (kind, target, name, params, source, sequence)
                SELECT k, t, n, p, s, q FROM unnest($1::int4[], $2::bytea[], $3::bytea[],
                    $4::bytea[], $5::bytea[], $6::int8[]) WITH ORDINALITY AS u(k, t, n, p, s, q, o)
                ORDER BY o RETURNING id),
            dealt AS (
                INSERT INTO flowbus_source (id, last_sequence)
                SELECT * FROM unnest($7::bytea[], $8::int8[])
                ON CONFLICT (id) DO UPDATE SET last_sequence = GREATEST(flowbus_source.last_sequence, excluded.last_sequence)
                RETURNING 1),
            deleted AS (
                DELETE FROM flowbus_entry WHERE id IN (
                    SELECT id FROM flowbus_entry WHERE id < $9::int8 ORDER BY id LIMIT $10::int8)
                RETURNING 1),
            events AS (
                INSERT INTO flowbus_event (first, last, created, events)
                SELECT $11::int8, $12::int8, $13::float8, $14::bytea WHERE $12::int8 >= $11::int8
                RETURNING 1),
            expired AS (DELETE FROM flowbus_event WHERE last < $15::int8 RETURNING 1)
            SELECT (SELECT max(id) FROM added), (SELECT count(*) FROM deleted)
            """
        typealias Row = (Int64?, Int64)

        var kinds: [Int32]
        var targets: [ByteBuffer]
        var names: [ByteBuffer]
        var params: [ByteBuffer]
        var sources: [ByteBuffer]
        var sequences: [Int64]
        var dealtWithIDs: [ByteBuffer]
        var dealtWithSequences: [Int64]
        var below: Int64
        var limit: Int64
        /// The batch's events (none when `eventsLast` < `eventsFirst`) and the retention.
        var eventsFirst: Int64
        var eventsLast: Int64
        var eventsCreated: Double
        var events: ByteBuffer
        var eventsKeepFrom: Int64

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 15)
            bindings.append(kinds)
            bindings.append(targets)
            bindings.append(names)
            bindings.append(params)
            bindings.append(sources)
            bindings.append(sequences)
            bindings.append(dealtWithIDs)
            bindings.append(dealtWithSequences)
            bindings.append(below)
            bindings.append(limit)
            bindings.append(eventsFirst)
            bindings.append(eventsLast)
            bindings.append(eventsCreated)
            bindings.append(events)
            bindings.append(eventsKeepFrom)
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
                        (SELECT max(last) + 1 FROM flowbus_event), 0)
                    RETURNING 1)
                SELECT count(*) FROM deleted
                """
            ).rows
        }
        return Int(try rows.first?.decode(Int64.self) ?? 0)
    }

    public func compact(_ compaction: StepJournal.Compaction) throws -> Int {
        try exclusive { try deleteCovered(compaction) }
    }

    private func deleteCovered(_ compaction: StepJournal.Compaction) throws -> Int {
        let rows = try run(
            """
            WITH deleted AS (
                DELETE FROM flowbus_entry WHERE id IN (
                    SELECT id FROM flowbus_entry WHERE id < \(compaction.below) ORDER BY id LIMIT \(Int64(compaction.limit)))
                RETURNING 1)
            SELECT count(*) FROM deleted
            """
        ).rows
        return Int(try rows.first?.decode(Int64.self) ?? 0)
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
        self.closing.store(true, ordering: .relaxed)
        broken.withLock { $0 = $0 ?? "closed" }
        let closing: EventLoopFuture<Void> = connection.close()
        let closed = DispatchSemaphore(value: 0)
        closing.whenComplete { _ in closed.signal() }
        _ = closed.wait(timeout: .now() + .seconds(2))
    }

    // MARK: Calls

    private func exclusive<T>(_ body: () throws -> T) rethrows -> T {
        session.lock()
        defer { session.unlock() }
        return try body()
    }

    /// Runs `query` and waits for its rows, at most `timeout`; after a timeout or a lost
    /// connection every later call fails at once.
    private func run(
        _ query: PostgresQuery, timeout: Duration = PostgresJournal.callTimeout
    ) throws -> PostgresQueryResult {
        let connection = connection
        let logger = logger
        return try call(timeout: timeout) { done in
            let future: EventLoopFuture<PostgresQueryResult> = connection.query(query, logger: logger)
            future.whenComplete(done)
        }
    }

    /// Runs a prepared statement (preparing it first in this session) and waits for its first row.
    private func runPrepared<Statement: PostgresPreparedStatement>(
        _ statement: Statement, timeout: Duration = PostgresJournal.callTimeout
    ) throws -> Statement.Row? where Statement.Row: Sendable {
        let connection = connection
        let logger = logger
        return try call(timeout: timeout) { done in
            // postgres-nio runs prepared statements only from async code. The caller's thread (the
            // daemon loop's, not the cooperative pool's) waits for this task, which awaits I/O only.
            Task {
                do {
                    var first: Statement.Row?
                    for try await row in try await connection.execute(statement, logger: logger) where first == nil {
                        first = row
                    }
                    done(.success(first))
                } catch {
                    done(.failure(error))
                }
            }
        }
    }

    /// Starts a call and waits for its answer, at most `timeout`; maps PostgreSQL's errors.
    private func call<Answer: Sendable>(
        timeout: Duration, _ start: (@escaping @Sendable (Result<Answer, any Error>) -> Void) -> Void
    ) throws -> Answer {
        if let reason = broken.withLock({ $0 }) {
            throw PostgresJournalError(.connectionLost, "the connection to \(location) is gone: \(reason)")
        }
        let outcome = Mutex<Result<Answer, any Error>?>(nil)
        let answered = DispatchSemaphore(value: 0)
        start { result in
            outcome.withLock { $0 = result }
            answered.signal()
        }
        let milliseconds = Int(
            timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        guard answered.wait(timeout: .now() + .milliseconds(milliseconds)) == .success else {
            let reason = "no answer within \(timeout)"
            broken.withLock { $0 = reason }
            let closing: EventLoopFuture<Void> = connection.close()
            _ = closing
            throw PostgresJournalError(.noAnswer, "\(location): \(reason)")
        }
        do {
            let result = try outcome.withLock { $0! }.get()
            lastAnswer.store(Self.nanoseconds(epoch.duration(to: .now)), ordering: .relaxed)
            return result
        } catch let error as PSQLError where error.code == .serverClosedConnection || error.code == .connectionError {
            broken.withLock { $0 = "\(error.code)" }
            throw PostgresJournalError(
                .connectionLost, "the connection to \(location) is gone: \(String(reflecting: error))")
        } catch let error as PSQLError {
            throw PostgresJournalError(
                .queryFailed, "\(location): \(error.serverInfo?[.message] ?? String(reflecting: error))")
        }
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
