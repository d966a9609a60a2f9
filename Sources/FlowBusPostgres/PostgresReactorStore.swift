#if PostgreSQL
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusWire
import Foundation
import Logging
import PostgresNIO

/// A reactor host's states in a PostgreSQL database that the host's instances share, one of them
/// active: `reactors.<host>.persistence: { postgres: "postgres://…", reactors: [...] }`.
///
/// It keeps what the SQLite `ReactorStateDatabase` keeps, per host: the last state and sequence of
/// each persisted reactor (`flowbus_reactor_state`) and the last sequence dealt with per source
/// (`flowbus_reactor_source`), saved together in one statement. The host's lease is an advisory
/// lock of this store's session, keyed by the host's name: only the holder
/// saves, so only it publishes states and acknowledges actions; a standby waits for the lease and
/// then loads the last saved states.
public final class PostgresReactorStore: SharedReactorStateStore {
    private let session: PostgresSession
    /// The reactor host whose states these are.
    public let hostName: String
    public var location: String { session.location }

    private init(session: PostgresSession, hostName: String) {
        self.session = session
        self.hostName = hostName
    }

    /// What `ReactorHostService` calls to open `persistence.postgres`.
    public static let opener: ReactorStateStoreOpener = { persistence, hostName, logger in
        guard let url = persistence.postgres else {
            throw PostgresJournalError(.invalidURL, "reactors.\(hostName).persistence.postgres is not set")
        }
        return try await connect(url: url, hostName: hostName, lease: persistence.lease, logger: logger)
    }

    /// Connects to the database `url` names, creating the reactor hosts' tables if they are missing.
    public static func connect(
        url: String, hostName: String, lease: LeaseTimings = .init(), logger: Logger
    ) async throws -> PostgresReactorStore {
        PostgresReactorStore(
            session: try await PostgresSession.connect(
                url: url, lease: lease, leaseKey: leaseKey(of: hostName), leaseName: "reactors/\(hostName)",
                tables: tables, what: "the reactor hosts'", logger: logger),
            hostName: hostName)
    }

    /// The advisory lock key of host `hostName`'s lease: FNV-1a of its name, apart from flowd's.
    static func leaseKey(of hostName: String) -> Int64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in "flowbus-reactors/\(hostName)".utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x0100_0000_01b3
        }
        let key = Int64(bitPattern: hash)
        return key == PostgresJournal.leaseKey || key == PostgresSession.creationKey ? key &+ 2 : key
    }

    private static let tables = [
        // Ids as bytes: they may hold any UTF-8, NUL included, which TEXT refuses.
        """
        CREATE TABLE IF NOT EXISTS flowbus_reactor_state (
            host TEXT NOT NULL, reactor_id BYTEA NOT NULL, sequence BIGINT NOT NULL, state BYTEA NOT NULL,
            saved_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (host, reactor_id))
        """,
        """
        CREATE TABLE IF NOT EXISTS flowbus_reactor_source (
            host TEXT NOT NULL, source BYTEA NOT NULL, sequence BIGINT NOT NULL, seen_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (host, source))
        """,
        // The steps of reactors that are steppers, kept until flowd acknowledges them (no trace: '').
        """
        CREATE TABLE IF NOT EXISTS flowbus_reactor_stepper (
            host TEXT NOT NULL, stepper_id BYTEA NOT NULL, source BYTEA NOT NULL, sequence BIGINT NOT NULL,
            PRIMARY KEY (host, stepper_id))
        """,
        """
        CREATE TABLE IF NOT EXISTS flowbus_reactor_step (
            host TEXT NOT NULL, stepper_id BYTEA NOT NULL, source BYTEA NOT NULL, sequence BIGINT NOT NULL,
            name BYTEA NOT NULL, params BYTEA NOT NULL, traceparent TEXT NOT NULL, tracestate TEXT NOT NULL,
            PRIMARY KEY (host, source, sequence))
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

    // MARK: States

    public func lastSequences(of sources: [String]) throws -> [String: UInt64] {
        guard !sources.isEmpty else { return [:] }
        let ids = sources.map { ByteBuffer(string: $0) }
        let rows = try session.exclusive {
            try session.run(
                "SELECT source, sequence FROM flowbus_reactor_source WHERE host = \(hostName) AND source = ANY(\(ids))"
            ).rows
        }
        var found: [String: UInt64] = [:]
        for row in rows {
            let (source, sequence) = try row.decode((ByteBuffer, Int64).self)
            found[String(buffer: source)] = UInt64(bitPattern: sequence)
        }
        return found
    }

    public func load() throws -> (states: [String: PersistedReactorState], sources: Int) {
        let forgetBefore = Date().timeIntervalSince1970 - Self.sourceRetention
        return try session.exclusive {
            _ = try session.run(
                "DELETE FROM flowbus_reactor_source WHERE host = \(hostName) AND seen_at < \(forgetBefore)")
            var states: [String: PersistedReactorState] = [:]
            for row in try session.run(
                "SELECT reactor_id, sequence, state FROM flowbus_reactor_state WHERE host = \(hostName)",
                timeout: .seconds(60)
            ).rows {
                let (reactorID, sequence, state) = try row.decode((ByteBuffer, Int64, ByteBuffer).self)
                states[String(buffer: reactorID)] = PersistedReactorState(
                    sequence: UInt64(bitPattern: sequence), bytes: Array(buffer: state))
            }
            let sources = try session.run(
                "SELECT count(*) FROM flowbus_reactor_source WHERE host = \(hostName)"
            ).rows.first?.decode(Int64.self)
            return (states, Int(sources ?? 0))
        }
    }

    public func save(states: [ReactorStateRecord], sources: [String: UInt64]) throws {
        try save(states: states, sources: sources, steps: [], acknowledged: [:])
    }

    public var keepsSteps: Bool { true }

    public func loadSteppers() throws -> [String: SavedStepper] {
        try session.exclusive {
            var steppers: [String: SavedStepper] = [:]
            for row in try session.run(
                "SELECT stepper_id, source, sequence FROM flowbus_reactor_stepper WHERE host = \(hostName)"
            ).rows {
                let (stepperID, source, sequence) = try row.decode((ByteBuffer, ByteBuffer, Int64).self)
                steppers[String(buffer: stepperID)] = SavedStepper(
                    source: String(buffer: source), lastSequence: UInt64(bitPattern: sequence), unacknowledged: [])
            }
            for row in try session.run(
                """
                SELECT stepper_id, source, sequence, name, params, traceparent, tracestate FROM flowbus_reactor_step
                WHERE host = \(hostName) ORDER BY source, sequence
                """,
                timeout: .seconds(60)
            ).rows {
                let (stepperID, source, sequence, name, params, traceparent, tracestate) = try row.decode(
                    (ByteBuffer, ByteBuffer, Int64, ByteBuffer, ByteBuffer, String, String).self)
                let step = SavedStep(
                    stepperID: String(buffer: stepperID), source: String(buffer: source),
                    sequence: UInt64(bitPattern: sequence), name: String(buffer: name), params: Array(buffer: params),
                    traceparent: traceparent.isEmpty ? nil : traceparent,
                    tracestate: tracestate.isEmpty ? nil : tracestate
                )
                SavedStepper.add(step, to: &steppers)
            }
            return steppers
        }
    }

    public func save(
        states: [ReactorStateRecord], sources: [String: UInt64], steps: [SavedStep], acknowledged: [String: UInt64]
    ) throws {
        guard !states.isEmpty || !sources.isEmpty || !steps.isEmpty || !acknowledged.isEmpty else { return }
        let statement = SaveStatement(
            host: hostName, reactorIDs: states.map { ByteBuffer(string: $0.reactorID) },
            sequences: states.map { Int64(bitPattern: $0.sequence) },
            states: states.map { ByteBuffer(bytes: $0.bytes) },
            sources: sources.keys.map { ByteBuffer(string: $0) },
            sourceSequences: sources.values.map { Int64(bitPattern: $0) }, now: Date().timeIntervalSince1970,
            stepperIDs: steps.map { ByteBuffer(string: $0.stepperID) },
            stepSources: steps.map { ByteBuffer(string: $0.source) },
            stepSequences: steps.map { Int64(bitPattern: $0.sequence) },
            names: steps.map { ByteBuffer(string: $0.name) }, params: steps.map { ByteBuffer(bytes: $0.params) },
            traceparents: steps.map { $0.traceparent ?? "" }, tracestates: steps.map { $0.tracestate ?? "" },
            acknowledgedSources: acknowledged.keys.map { ByteBuffer(string: $0) },
            acknowledgedSequences: acknowledged.values.map { Int64(bitPattern: $0) })
        _ = try session.exclusive { try session.runPrepared(statement) }
    }

    /// States, de-duplication entries, the steps the states caused and the steps flowd
    /// acknowledged (forgotten) as arrays, one statement (so one transaction and one round trip);
    /// prepared once per session.
    private struct SaveStatement: PostgresPreparedStatement {
        static let name = "flowbus_reactor_save"
        static let sql = """
            WITH saved AS (
                INSERT INTO flowbus_reactor_state (host, reactor_id, sequence, state, saved_at)
                SELECT $1::text, r, q, s, $7::float8 FROM unnest($2::bytea[], $3::int8[], $4::bytea[]) AS u(r, q, s)
                ON CONFLICT (host, reactor_id) DO UPDATE
                    SET sequence = excluded.sequence, state = excluded.state, saved_at = excluded.saved_at
                RETURNING 1),
            dealt AS (
                INSERT INTO flowbus_reactor_source (host, source, sequence, seen_at)
                SELECT $1::text, s, q, $7::float8 FROM unnest($5::bytea[], $6::int8[]) AS u(s, q)
                ON CONFLICT (host, source) DO UPDATE
                    SET sequence = GREATEST(flowbus_reactor_source.sequence, excluded.sequence), seen_at = excluded.seen_at
                RETURNING 1),
            kept AS (
                INSERT INTO flowbus_reactor_step (host, stepper_id, source, sequence, name, params, traceparent, tracestate)
                SELECT $1::text, i, s, q, n, p, t, ts
                FROM unnest($8::bytea[], $9::bytea[], $10::int8[], $11::bytea[], $12::bytea[], $13::text[], $14::text[])
                    AS u(i, s, q, n, p, t, ts)
                ON CONFLICT (host, source, sequence) DO NOTHING
                RETURNING 1),
            numbered AS (
                INSERT INTO flowbus_reactor_stepper (host, stepper_id, source, sequence)
                SELECT $1::text, i, s, max(q) FROM unnest($8::bytea[], $9::bytea[], $10::int8[]) AS u(i, s, q)
                GROUP BY i, s
                ON CONFLICT (host, stepper_id) DO UPDATE SET source = excluded.source,
                    sequence = CASE WHEN flowbus_reactor_stepper.source = excluded.source
                        THEN GREATEST(flowbus_reactor_stepper.sequence, excluded.sequence) ELSE excluded.sequence END
                RETURNING 1),
            forgotten AS (
                DELETE FROM flowbus_reactor_step AS k USING unnest($15::bytea[], $16::int8[]) AS u(s, q)
                WHERE k.host = $1::text AND k.source = u.s AND k.sequence <= u.q
                RETURNING 1)
            SELECT (SELECT count(*) FROM saved), (SELECT count(*) FROM dealt), (SELECT count(*) FROM kept),
                (SELECT count(*) FROM numbered), (SELECT count(*) FROM forgotten)
            """
        typealias Row = (Int64, Int64, Int64, Int64, Int64)

        var host: String
        var reactorIDs: [ByteBuffer]
        var sequences: [Int64]
        var states: [ByteBuffer]
        var sources: [ByteBuffer]
        var sourceSequences: [Int64]
        var now: Double
        var stepperIDs: [ByteBuffer]
        var stepSources: [ByteBuffer]
        var stepSequences: [Int64]
        var names: [ByteBuffer]
        var params: [ByteBuffer]
        var traceparents: [String]
        var tracestates: [String]
        var acknowledgedSources: [ByteBuffer]
        var acknowledgedSequences: [Int64]

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 16)
            bindings.append(host)
            bindings.append(reactorIDs)
            bindings.append(sequences)
            bindings.append(states)
            bindings.append(sources)
            bindings.append(sourceSequences)
            bindings.append(now)
            bindings.append(stepperIDs)
            bindings.append(stepSources)
            bindings.append(stepSequences)
            bindings.append(names)
            bindings.append(params)
            bindings.append(traceparents)
            bindings.append(tracestates)
            bindings.append(acknowledgedSources)
            bindings.append(acknowledgedSequences)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            try row.decode(Row.self)
        }
    }

    /// Closes the connection (ending the session frees the lease), waiting at most 2 s.
    public func close() {
        session.close()
    }
}
#endif
