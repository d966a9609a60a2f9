import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Foundation
import GRDB
import Reactors
import ZeroMQ

/// The SQLite database (GRDB, WAL) of one reactor host: the last state and sequence of each
/// persisted reactor, the last sequence dealt with per source (the de-duplication table), and the
/// steps its reactors published as steppers until flowd acknowledges them.
///
/// Used from the host's I/O thread only, synchronously: one transaction per batch.
public final class ReactorStateDatabase: ReactorStateStore {
    public let path: String
    public var location: String { path }
    private let queue: DatabaseQueue

    /// Opens (or creates) the database and its tables.
    /// - Throws: `ConfigError` with the path and SQLite's reason when it cannot be opened.
    package init(spec: ReactorPersistenceSpec) throws(ConfigError) {
        guard let database = spec.database else {
            throw ConfigError(.invalid, "the reactor state database needs persistence.database")
        }
        path = database
        var configuration = Configuration()
        configuration.journalMode = .wal
        configuration.label = "reactor-host-state"
        let synchronous = spec.synchronous == .full ? "FULL" : "NORMAL"
        configuration.prepareDatabase { db in
            // As flowd's journal: Debian's SQLite would also zero and write every page a saved
            // state or an acknowledged step frees.
            try db.execute(sql: "PRAGMA secure_delete = FAST")
        }
        do {
            let directory = (path as NSString).deletingLastPathComponent
            if !directory.isEmpty {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            }
            queue = try DatabaseQueue(path: path, configuration: configuration)
            // Only now: GRDB sets `synchronous = NORMAL` as it turns WAL on, after prepareDatabase.
            try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = \(synchronous)") }
            var migrator = DatabaseMigrator()
            migrator.registerMigration("reactor-host-v1") { db in
                try db.execute(
                    sql: """
                        CREATE TABLE reactor_states (
                            reactor_id TEXT PRIMARY KEY NOT NULL,
                            sequence INTEGER NOT NULL,
                            state BLOB NOT NULL,
                            saved_at REAL NOT NULL
                        );
                        CREATE TABLE reactor_action_sources (
                            source TEXT PRIMARY KEY NOT NULL,
                            sequence INTEGER NOT NULL,
                            seen_at REAL NOT NULL
                        );
                        """)
            }
            // The steps of reactors that are steppers, kept until flowd acknowledges them.
            migrator.registerMigration("reactor-host-v2-steps") { db in
                try db.execute(
                    sql: """
                        CREATE TABLE reactor_steppers (
                            stepper_id TEXT PRIMARY KEY NOT NULL,
                            source TEXT NOT NULL,
                            sequence INTEGER NOT NULL
                        );
                        CREATE TABLE reactor_steps (
                            stepper_id TEXT NOT NULL,
                            source TEXT NOT NULL,
                            sequence INTEGER NOT NULL,
                            name TEXT NOT NULL,
                            params BLOB NOT NULL,
                            traceparent TEXT,
                            tracestate TEXT,
                            PRIMARY KEY (source, sequence)
                        );
                        """)
            }
            try migrator.migrate(queue)
        } catch {
            throw ConfigError(.unreadable, "cannot open the reactor state database \(path): \(error)")
        }
    }

    /// SQLite's `synchronous` on the database's connection: 2 is FULL (a sync per commit), 1 NORMAL.
    package func synchronousLevel() throws -> Int {
        try queue.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    /// The last sequence of `source` in the de-duplication table, nil if it has none.
    package func lastSequence(of source: String) throws -> UInt64? {
        try queue.read { db in
            try Int64.fetchOne(
                db, sql: "SELECT sequence FROM reactor_action_sources WHERE source = ?", arguments: [source]
            )
            .map { UInt64(clamping: $0) }
        }
    }

    public func lastSequences(of sources: [String]) throws -> [String: UInt64] {
        try queue.read { db in
            var found: [String: UInt64] = [:]
            // SQLite binds at most 32,766 parameters a statement.
            for start in stride(from: 0, to: sources.count, by: 500) {
                let chunk = Array(sources[start..<min(start + 500, sources.count)])
                let marks = Array(repeating: "?", count: chunk.count).joined(separator: ",")
                let rows = try Row.fetchCursor(
                    db, sql: "SELECT source, sequence FROM reactor_action_sources WHERE source IN (\(marks))",
                    arguments: StatementArguments(chunk))
                while let row = try rows.next() {
                    let sequence: Int64 = row[1]
                    found[row[0]] = UInt64(clamping: sequence)
                }
            }
            return found
        }
    }

    public func load() throws -> (states: [String: PersistedReactorState], sources: Int) {
        try queue.write { db in
            try db.execute(
                sql: "DELETE FROM reactor_action_sources WHERE seen_at < ?",
                arguments: [Date().timeIntervalSince1970 - Self.sourceRetention])
            var states: [String: PersistedReactorState] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT reactor_id, sequence, state FROM reactor_states") {
                let reactorID: String = row["reactor_id"]
                let sequence = UInt64(clamping: row["sequence"] as Int64)
                let bytes: Data = row["state"]
                states[reactorID] = PersistedReactorState(sequence: sequence, bytes: [UInt8](bytes))
            }
            let sources = try Int.fetchOne(db, sql: "SELECT count(*) FROM reactor_action_sources") ?? 0
            return (states, sources)
        }
    }

    public func save(states: [ReactorStateRecord], sources: [String: UInt64]) throws {
        try queue.write { db in try save(states: states, sources: sources, in: db) }
    }

    private func save(states: [ReactorStateRecord], sources: [String: UInt64], in db: Database) throws {
        let now = Date().timeIntervalSince1970
        if !states.isEmpty {
            let statement = try db.cachedStatement(
                sql: """
                    INSERT INTO reactor_states (reactor_id, sequence, state, saved_at) VALUES (?, ?, ?, ?)
                    ON CONFLICT(reactor_id) DO UPDATE SET sequence = excluded.sequence, state = excluded.state, saved_at = excluded.saved_at
                    """)
            for record in states {
                try statement.execute(arguments: [
                    record.reactorID, Int64(clamping: record.sequence), Data(record.bytes), now,
                ])
            }
        }
        if !sources.isEmpty {
            let statement = try db.cachedStatement(
                sql: """
                    INSERT INTO reactor_action_sources (source, sequence, seen_at) VALUES (?, ?, ?)
                    ON CONFLICT(source) DO UPDATE SET sequence = max(sequence, excluded.sequence), seen_at = excluded.seen_at
                    """)
            for (source, sequence) in sources {
                try statement.execute(arguments: [source, Int64(clamping: sequence), now])
            }
        }
    }

    public var keepsSteps: Bool { true }

    public func loadSteppers() throws -> [String: SavedStepper] {
        try queue.read { db in
            var steppers: [String: SavedStepper] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT stepper_id, source, sequence FROM reactor_steppers") {
                steppers[row[0]] = SavedStepper(
                    source: row[1], lastSequence: UInt64(clamping: row[2] as Int64), unacknowledged: [])
            }
            let rows = try Row.fetchCursor(
                db,
                sql: """
                    SELECT stepper_id, source, sequence, name, params, traceparent, tracestate
                    FROM reactor_steps ORDER BY source, sequence
                    """)
            while let row = try rows.next() {
                let step = SavedStep(
                    stepperID: row[0], source: row[1], sequence: UInt64(clamping: row[2] as Int64), name: row[3],
                    params: [UInt8](row[4] as Data), traceparent: row[5], tracestate: row[6])
                SavedStepper.add(step, to: &steppers)
            }
            return steppers
        }
    }

    public func save(
        states: [ReactorStateRecord], sources: [String: UInt64], steps: [SavedStep], acknowledged: [String: UInt64]
    ) throws {
        guard !steps.isEmpty || !acknowledged.isEmpty else { return try save(states: states, sources: sources) }
        try queue.write { db in
            try save(states: states, sources: sources, in: db)
            if !steps.isEmpty {
                let insert = try db.cachedStatement(
                    sql: """
                        INSERT OR REPLACE INTO reactor_steps (stepper_id, source, sequence, name, params, traceparent, tracestate)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        """)
                let stepper = try db.cachedStatement(
                    sql: """
                        INSERT INTO reactor_steppers (stepper_id, source, sequence) VALUES (?, ?, ?)
                        ON CONFLICT(stepper_id) DO UPDATE SET source = excluded.source,
                            sequence = CASE WHEN source = excluded.source THEN max(sequence, excluded.sequence) ELSE excluded.sequence END
                        """)
                for step in steps {
                    try insert.execute(arguments: [
                        step.stepperID, step.source, Int64(clamping: step.sequence), step.name, Data(step.params),
                        step.traceparent, step.tracestate,
                    ])
                    try stepper.execute(arguments: [step.stepperID, step.source, Int64(clamping: step.sequence)])
                }
            }
            if !acknowledged.isEmpty {
                let delete = try db.cachedStatement(
                    sql: "DELETE FROM reactor_steps WHERE source = ? AND sequence <= ?")
                for (source, sequence) in acknowledged {
                    try delete.execute(arguments: [source, Int64(clamping: sequence)])
                }
            }
        }
    }

    public func close() {}
}
