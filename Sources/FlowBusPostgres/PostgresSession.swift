#if PostgreSQL
import Dispatch
import FlowBusConfiguration
import FlowBusDaemon
import Foundation
import Logging
import PostgresNIO
import Synchronization

/// One PostgreSQL session shared by several instances of a daemon, one of them active, and its
/// lease: what ``PostgresJournal`` (flowd) and ``PostgresReactorStore`` (a reactor host) are built on.
///
/// The lease is a PostgreSQL advisory lock held by this session: a standby waits for it in
/// ``acquireLease(instance:waiting:following:)``. The holder runs a statement at least every
/// `lease.keepAliveMs`; when it dies or is cut off, a standby ends its session once it is idle
/// past `lease.timeoutMs` (or PostgreSQL does, seconds later), which frees the lock, and that
/// instance can commit nothing more — hence acknowledge nothing more — before the next one takes
/// the lease. A holder whose session stays silent for most of `lease.timeoutMs` gives the lease up
/// itself (``whenLeaseLost(_:)``); while a statement of its own is under way, it asks the server on
/// a second connection (the watch) whether the session still holds the lease, so that a holder
/// cut off in the middle of a commit stops before a standby may take over. Each taking is
/// recorded in `flowbus_lease` under the lease's name.
///
/// Calls other than ``connect(url:lease:leaseKey:leaseName:logger:)`` and the lease's block the
/// calling thread (a daemon loop's, or flowd's checkpoint writer), at most ``callTimeout`` each.
final class PostgresSession: Sendable {
    let location: String
    let connection: PostgresConnection
    /// The second connection, opened with the session: while the lease is held it asks the server
    /// about the session when a statement on it is under way.
    private let watch: PostgresConnection
    /// Cleared once a question on the watch failed: it is not asked again.
    private let watchWorks = Atomic<Bool>(true)
    /// When the last question on the watch that the server answered was sent: the link was there
    /// then, so the session's silence counts from no earlier.
    private let lastVouched = Atomic<Int64>(0)
    /// The server's process of the session (`pg_backend_pid()`), once the lease is held.
    private let backendPID = Atomic<Int32>(0)
    /// What the call under way waits on (one at a time: calls run under `session`): a lost lease
    /// wakes it rather than its timeout.
    private let inFlight = Mutex<DispatchSemaphore?>(nil)
    let logger: Logger
    /// Set once a call timed out or the connection failed: the lease can no longer be trusted.
    private let broken = Mutex<String?>(nil)
    /// One call (a whole transaction) at a time on the session: a loop's batches and flowd's
    /// checkpoint writer's stores must not interleave inside one transaction.
    private let session = NSLock()
    /// When the session last answered (``ContinuousClock`` nanoseconds since ``epoch``): the
    /// keep-alive and ``verifyLease()`` need no statement of their own while commits come.
    private let lastAnswer = Atomic<Int64>(0)
    private let epoch = ContinuousClock.now
    /// The advisory lock key of the lease, and its name in `flowbus_lease`.
    let leaseKey: Int64
    let leaseName: String
    /// How often the holder shows it is alive, and how long its session may stay idle before a
    /// standby ends it: an idle session means its machine or link is gone, long before the
    /// server's own TCP checks would tell.
    let lease: LeaseTimings
    private let keepAlive: Duration
    private let leaseTimeout: Duration
    /// Called once when the holder's session stopped answering (see ``whenLeaseLost(_:)``).
    private let leaseLost = Mutex<(@Sendable (String) -> Void)?>(nil)
    /// Set by ``close()``: the keep-alive thread ends.
    private let closing = Atomic<Bool>(false)
    /// A standby said once that it may not end the holder's session.
    private let toldNotAllowed = Atomic<Bool>(false)

    /// Longest wait for an answer before the connection is given up (and the daemon stops).
    static let callTimeout: Duration = .seconds(5)
    /// The transaction-level advisory lock under which tables are created, one instance at a time.
    static let creationKey: Int64 = 0x466C_6F77_4275_7330

    private init(
        location: String, connection: PostgresConnection, watch: PostgresConnection, lease: LeaseTimings,
        leaseKey: Int64, leaseName: String, logger: Logger
    ) {
        self.location = location
        self.connection = connection
        self.watch = watch
        self.lease = lease
        self.leaseKey = leaseKey
        self.leaseName = leaseName
        keepAlive = .milliseconds(lease.keepAliveMs)
        leaseTimeout = .milliseconds(lease.timeoutMs)
        self.logger = logger
    }

    /// Connects to the database `url` names and creates `tables` (statements) if they are missing,
    /// with the lease history's.
    /// - Parameters:
    ///   - what: Whose tables, for messages (`flowd's`).
    static func connect(
        url: String, lease: LeaseTimings, leaseKey: Int64, leaseName: String, tables: [String], what: String,
        logger: Logger
    ) async throws -> PostgresSession {
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
        let connection = try await open(configuration, id: 1, location: location, logger: logger)
        let watch: PostgresConnection
        do {
            watch = try await open(configuration, id: 2, location: location, logger: logger)
        } catch {
            try? await connection.close()
            throw error
        }
        let session = PostgresSession(
            location: location, connection: connection, watch: watch, lease: lease, leaseKey: leaseKey,
            leaseName: leaseName, logger: logger)
        do {
            try await session.createTables(tables)
        } catch {
            session.close()
            throw PostgresJournalError(
                .queryFailed, "cannot create \(what) tables in \(location): \(String(reflecting: error))")
        }
        return session
    }

    /// A connection whose server notices a vanished instance within seconds, not hours (and frees
    /// its lease, or the slot of its watch).
    private static func open(
        _ configuration: PostgresConnection.Configuration, id: Int, location: String, logger: Logger
    ) async throws -> PostgresConnection {
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: configuration, id: id, logger: logger)
        } catch {
            throw PostgresJournalError(.cannotConnect, "cannot connect to \(location): \(String(reflecting: error))")
        }
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
        return connection
    }

    /// `url` without its password.
    static func redacted(_ url: String) -> String {
        guard var components = URLComponents(string: url), components.password != nil else { return url }
        components.password = "…"
        return components.string ?? url
    }

    /// Creates the tables if they are missing, one instance at a time (a transaction-level
    /// advisory lock): a standby reads them before it holds the lease.
    private func createTables(_ tables: [String]) async throws {
        try await connection.query("BEGIN", logger: logger)
        try await connection.query("SELECT pg_advisory_xact_lock(\(Self.creationKey))", logger: logger)
        for statement in tables + [
            """
            CREATE TABLE IF NOT EXISTS flowbus_lease (
                id BIGSERIAL PRIMARY KEY, instance TEXT NOT NULL, host TEXT NOT NULL, pid BIGINT NOT NULL,
                acquired DOUBLE PRECISION NOT NULL)
            """,
            // Whose lease: flowd's, or a reactor host's (`reactors/<host>`).
            "ALTER TABLE flowbus_lease ADD COLUMN IF NOT EXISTS name TEXT NOT NULL DEFAULT 'flowd'",
        ] {
            try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
        try await connection.query("COMMIT", logger: logger)
    }

    // MARK: Lease

    func acquireLease(
        instance: String, waiting: @escaping @Sendable (String) -> Void, following: @Sendable () async throws -> Void
    ) async throws {
        var told = false
        while true {
            let rows = try await connection.query("SELECT pg_try_advisory_lock(\(leaseKey))", logger: logger)
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
            "INSERT INTO flowbus_lease (name, instance, host, pid, acquired) VALUES (\(leaseName), \(instance), \(host), \(pid), \(Date().timeIntervalSince1970))",
            logger: logger)
        for try await serverPID in try await connection.query("SELECT pg_backend_pid()", logger: logger).decode(
            Int32.self)
        {
            backendPID.store(serverPID, ordering: .relaxed)
        }
        // The lease's silence is counted from here: the statements above ran outside ``call``.
        lastAnswer.store(Self.nanoseconds(epoch.duration(to: .now)), ordering: .relaxed)
        startKeepAlive()
    }

    /// Ends the lease holder's session when it has been idle past `lease.timeoutMs` (its machine
    /// was cut off: the server would notice only seconds later). Ending it frees the lock, and
    /// the holder can commit, so acknowledge, nothing more.
    ///
    /// A statement under way is no silence, however long it takes, unless it waits for its client:
    /// a statement's messages (Bind, Execute, Sync) come together, so a server still waiting for
    /// the rest of them past the timeout lost its client between two TCP segments.
    /// - Returns: whether a session was ended.
    private func endSilentHolder() async throws -> Bool {
        let key = UInt64(bitPattern: leaseKey)
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    SELECT a.pid, a.state, EXTRACT(EPOCH FROM clock_timestamp() - a.state_change)::float8,
                      a.wait_event IS NOT DISTINCT FROM 'ClientRead'
                    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                      AND l.classid = \(key >> 32) AND l.objid = \(key & 0xFFFF_FFFF)
                      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    """), logger: logger)
        var silent: (pid: Int32, seconds: Double, midStatement: Bool)?
        for try await (pid, state, seconds, readingClient) in rows.decode((Int32, String?, Double?, Bool).self) {
            guard let state, state != "active" || readingClient, let seconds,
                seconds * 1000 > Double(lease.timeoutMs)
            else { continue }
            silent = (pid, seconds, state == "active")
        }
        guard let silent else { return false }
        logger.warning(
            "the lease holder's session (server pid \(silent.pid)) has been silent for \(Int(silent.seconds * 1000)) ms\(silent.midStatement ? ", in the middle of a statement" : ""): ending it to take over"
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
    /// session, so that standbys can tell it is alive (see ``endSilentHolder()``). While a
    /// statement of the daemon's is under way, a keep-alive would wait behind it: the watch
    /// connection asks the server whether the session still holds the lease instead.
    private func startKeepAlive() {
        let thread = Thread { [self] in
            while !closing.load(ordering: .relaxed), broken.withLock({ $0 }) == nil {
                Thread.sleep(forTimeInterval: Double(lease.keepAliveMs) / 1000 / 2)
                guard !closing.load(ordering: .relaxed) else { return }
                // Commits keep the session busy: a keep-alive would only delay the next one.
                guard !answered(within: keepAlive / 2) else { continue }
                let failure: String?
                if session.try() {
                    do {
                        _ = try run("SELECT 1", timeout: answerDeadline())
                        failure = nil
                    } catch {
                        failure = "keep-alive failed: \(error)"
                    }
                    session.unlock()
                } else {
                    // A statement under way for less than a keep-alive interval is no silence.
                    guard !answered(within: keepAlive) else { continue }
                    failure = watchBusySession()
                }
                guard let failure else { continue }
                guard !closing.load(ordering: .relaxed) else { return }
                loseLease(failure)
                return
            }
        }
        thread.name = "flowbus-lease-keepalive"
        thread.start()
    }

    /// Asks the server, on the watch connection, whether the session still holds the lease while a
    /// statement is under way: no answer means the link is cut.
    /// - Returns: why the lease is lost, or nil while the server answers and the session holds it.
    private func watchBusySession() -> String? {
        guard watchWorks.load(ordering: .relaxed) else { return nil }
        let pid = backendPID.load(ordering: .relaxed)
        let key = UInt64(bitPattern: leaseKey)
        let query = PostgresQuery(
            unsafeSQL: """
                SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = \(pid) AND l.locktype = 'advisory'
                  AND l.granted AND l.objsubid = 1 AND l.classid = \(key >> 32) AND l.objid = \(key & 0xFFFF_FFFF))
                """)
        let asked = Self.nanoseconds(epoch.duration(to: .now))
        let deadline = answerDeadline()
        let answer = Mutex<Result<Bool?, any Error>?>(nil)
        let answered = DispatchSemaphore(value: 0)
        // A future, not a task: the cooperative pool may be busy (blocked callers in tests).
        let future: EventLoopFuture<PostgresQueryResult> = watch.query(query, logger: logger)
        future.whenComplete { result in
            answer.withLock {
                $0 = result.flatMap { rows in Result { try rows.rows.first?.decode(Bool.self) } }
            }
            answered.signal()
        }
        guard answered.wait(timeout: .now() + .nanoseconds(Int(Self.nanoseconds(deadline)))) == .success else {
            return "keep-alive failed: no answer from \(location) within \(deadline) while a statement was under way"
        }
        switch answer.withLock({ $0! }) {
        case .failure(let error):
            // The watch itself failed (ended by the server, say), not the session: the statement
            // under way is left to its own timeout, as it was without a watch.
            watchWorks.store(false, ordering: .relaxed)
            logger.warning("the lease's watch connection failed, it is not opened again: \(String(reflecting: error))")
            return nil
        case .success(let row):
            guard row == true else { return "the session no longer holds the lease" }
            // The server answers: the link is there. A session it has not heard from lately (a
            // statement still on its way, or held up in this process) is the standby's to judge;
            // a commit in a session it ended fails.
            lastVouched.store(asked, ordering: .relaxed)
            return nil
        }
    }

    /// The lease cannot be relied on: this instance stops before a standby may serve, and the
    /// call under way gives up rather than wait for its timeout.
    private func loseLease(_ reason: String) {
        broken.withLock { $0 = $0 ?? reason }
        logger.error("the lease's session does not answer: \(reason)")
        _ = inFlight.withLock { $0?.signal() }
        leaseLost.withLock { $0 }?(reason)
    }

    /// How long the keep-alive may wait for its answer: until nine tenths of `lease.timeoutMs`
    /// after the session's last answer (or the server's last answer on the watch), when a standby
    /// may be about to end the session.
    private func answerDeadline() -> Duration {
        let last = max(lastAnswer.load(ordering: .relaxed), lastVouched.load(ordering: .relaxed))
        guard last > 0 else { return leaseTimeout * 0.9 }
        let silent = Duration.nanoseconds(Self.nanoseconds(epoch.duration(to: .now)) - last)
        return max(.milliseconds(10), leaseTimeout * 0.9 - silent)
    }

    /// Registers what to call, once and from another thread, when the holder's session stopped
    /// answering for most of `lease.timeoutMs`: the daemon stops at once rather than at its next check.
    func whenLeaseLost(_ handler: @escaping @Sendable (String) -> Void) {
        leaseLost.withLock { $0 = handler }
    }

    /// The newest holder of this lease on record, in words.
    private func holder() async -> String {
        guard
            let rows = try? await connection.query(
                "SELECT instance, host, pid FROM flowbus_lease WHERE name = \(leaseName) ORDER BY id DESC LIMIT 1",
                logger: logger)
        else { return "another instance" }
        do {
            for try await (instance, host, pid) in rows.decode((String, String, Int64).self) {
                return "\(instance) (pid \(pid) on \(host))"
            }
        } catch {}
        return "another instance"
    }

    func checkLease() throws {
        if let reason = broken.withLock({ $0 }) {
            throw PostgresJournalError(.connectionLost, "the connection to \(location) is gone: \(reason)")
        }
    }

    func verifyLease() throws {
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

    func leaseHistory(limit: Int) throws -> [LeaseRecord] {
        try exclusive {
            try run(
                "SELECT instance, host, pid, acquired FROM flowbus_lease WHERE name = \(leaseName) ORDER BY id DESC LIMIT \(Int64(limit))"
            )
            .rows.map { row in
                let (instance, host, pid, acquired) = try row.decode((String, String, Int64, Double).self)
                return LeaseRecord(
                    instance: instance, host: host, pid: Int(pid), acquired: Date(timeIntervalSince1970: acquired))
            }
        }
    }

    /// Closes the connection (ending the session frees the lease), waiting at most 2 s.
    func close() {
        self.closing.store(true, ordering: .relaxed)
        broken.withLock { $0 = $0 ?? "closed" }
        let closed = DispatchSemaphore(value: 0)
        for connection in [connection, watch] {
            let closing: EventLoopFuture<Void> = connection.close()
            closing.whenComplete { _ in closed.signal() }
        }
        let deadline = DispatchTime.now() + .seconds(2)
        for _ in 0..<2 { _ = closed.wait(timeout: deadline) }
    }

    // MARK: Calls

    /// Runs `body` alone on the session (a whole transaction, or one statement).
    func exclusive<T>(_ body: () throws -> T) rethrows -> T {
        session.lock()
        defer { session.unlock() }
        return try body()
    }

    /// Runs `query` and waits for its rows, at most `timeout`; after a timeout or a lost
    /// connection every later call fails at once.
    func run(_ query: PostgresQuery, timeout: Duration = PostgresSession.callTimeout) throws -> PostgresQueryResult {
        let connection = connection
        let logger = logger
        return try call(timeout: timeout) { done in
            let future: EventLoopFuture<PostgresQueryResult> = connection.query(query, logger: logger)
            future.whenComplete(done)
        }
    }

    /// Runs a prepared statement (preparing it first in this session) and waits for its first row.
    func runPrepared<Statement: PostgresPreparedStatement>(
        _ statement: Statement, timeout: Duration = PostgresSession.callTimeout
    ) throws -> Statement.Row? where Statement.Row: Sendable {
        let connection = connection
        let logger = logger
        return try call(timeout: timeout) { done in
            // postgres-nio runs prepared statements only from async code. The caller's thread (a
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
        let outcome = Mutex<Result<Answer, any Error>?>(nil)
        let answered = DispatchSemaphore(value: 0)
        // Set before the check below: a lease lost from now on wakes this call.
        inFlight.withLock { $0 = answered }
        defer { inFlight.withLock { $0 = nil } }
        if let reason = broken.withLock({ $0 }) {
            throw PostgresJournalError(.connectionLost, "the connection to \(location) is gone: \(reason)")
        }
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
        guard let answer = outcome.withLock({ $0 }) else {
            // Woken by a lost lease.
            let closing: EventLoopFuture<Void> = connection.close()
            _ = closing
            let reason = broken.withLock { $0 } ?? "lease lost"
            throw PostgresJournalError(.connectionLost, "the connection to \(location) is gone: \(reason)")
        }
        do {
            let result = try answer.get()
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
#endif
