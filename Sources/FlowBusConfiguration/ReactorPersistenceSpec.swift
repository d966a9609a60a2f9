import Foundation

/// Which reactors of a host keep their state across restarts, and where (the `persistence:` key
/// of a `reactors:` entry of the config).
///
/// ```yaml
/// reactors:
///   demo:
///     actions: ipc://…
///     states: ipc://…
///     serves: [counter, login, movie/]
///     persistence:
///       database: reactors-demo.sqlite     # relative to the config file, or absolute
///       reactors: [counter, movie/]        # ids, or families with a trailing slash
///       synchronous: full                  # full (default: survives power loss) or normal (a killed process)
/// ```
///
/// A persisted reactor's last state and its sequence are saved in the SQLite database (WAL) before
/// the state is published, and the host's de-duplication table (the last sequence dealt with per
/// source) before an action is acknowledged. A host that restarts resumes those reactors from
/// their saved state and sequence.
///
/// `postgres: URL` instead of `database:` keeps them in PostgreSQL, where several instances of the
/// host (`instances:`) share them: one holds the host's lease and serves, the others stand by and
/// take over, from the last saved states, when it is lost (`lease:` as flowd's). See
/// `docs/RELIABILITY.md`.
public struct ReactorPersistenceSpec: Codable, Sendable, Hashable {
    /// How hard SQLite works to make a commit durable.
    public enum Synchronous: String, Codable, Sendable, Hashable {
        /// `PRAGMA synchronous = NORMAL` in WAL mode: a commit survives the process being killed
        /// (SIGKILL, a crash); the last commits may be lost if the machine loses power.
        case normal
        /// `PRAGMA synchronous = FULL`: every commit is synced to disk (survives power loss), at
        /// the cost of an fsync per batch.
        case full
    }

    /// The SQLite database file (created if absent), or nil with ``postgres``. Relative paths are
    /// resolved against the config file's directory when the config is loaded.
    public var database: String?
    /// The PostgreSQL database the host's instances share (`postgres://user:password@host:5432/db`),
    /// or nil with ``database``.
    public var postgres: String?
    /// The reactors whose state is persisted: exact ids (`counter`) or families (`movie/`).
    public var reactors: [String]
    /// Durability of a SQLite commit; `full` by default (as flowd's journal).
    public var synchronous: Synchronous
    /// How the active instance keeps the PostgreSQL lease.
    public var lease: LeaseTimings

    public init(database: String, reactors: [String], synchronous: Synchronous = .full) {
        self.database = database
        self.postgres = nil
        self.reactors = reactors
        self.synchronous = synchronous
        lease = LeaseTimings()
    }

    public init(postgres: String, reactors: [String], lease: LeaseTimings = LeaseTimings()) {
        database = nil
        self.postgres = postgres
        self.reactors = reactors
        synchronous = .full
        self.lease = lease
    }

    private enum CodingKeys: String, CodingKey {
        case database, postgres, reactors, synchronous, lease
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        database = try container.decodeIfPresent(String.self, forKey: .database)
        postgres = try container.decodeIfPresent(String.self, forKey: .postgres)
        reactors = try container.decodeIfPresent([String].self, forKey: .reactors) ?? []
        synchronous = try container.decodeIfPresent(Synchronous.self, forKey: .synchronous) ?? .full
        let lease = try container.decodeIfPresent(LeaseTimings.self, forKey: .lease)
        self.lease = lease ?? LeaseTimings()
        guard (database == nil) != (postgres == nil) else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription:
                        "persistence takes one of 'database: FILE' (SQLite, on this machine) and 'postgres: URL' (shared by the host's instances)"
                ))
        }
        if lease != nil, postgres == nil {
            throw DecodingError.dataCorruptedError(
                forKey: .lease, in: container,
                debugDescription:
                    "persistence.lease applies to states the host's instances share (persistence.postgres): remove it, a SQLite database has no lease"
            )
        }
        if let postgres, !(postgres.hasPrefix("postgres://") || postgres.hasPrefix("postgresql://")) {
            throw DecodingError.dataCorruptedError(
                forKey: .postgres, in: container,
                debugDescription: "persistence.postgres is a URL: postgres://user:password@host:5432/database")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(database, forKey: .database)
        try container.encodeIfPresent(postgres, forKey: .postgres)
        try container.encode(reactors, forKey: .reactors)
        if database != nil {
            try container.encode(synchronous, forKey: .synchronous)
        } else {
            try container.encode(lease, forKey: .lease)
        }
    }

    /// Whether the state of `reactorID` is persisted.
    public func persists(_ reactorID: String) -> Bool {
        reactors.contains {
            $0.hasSuffix("/") ? reactorID.hasPrefix($0) && reactorID.count > $0.count : reactorID == $0
        }
    }

    /// Makes a relative ``database`` path absolute against `directory` (the config file's).
    package mutating func resolveDatabase(relativeTo directory: String) {
        guard let path = database, !path.hasPrefix("/") else { return }
        database = URL(fileURLWithPath: directory).appendingPathComponent(path).standardizedFileURL.path
    }
}
