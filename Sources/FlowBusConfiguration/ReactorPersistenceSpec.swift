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
/// their saved state and sequence. See `docs/RELIABILITY.md`.
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

    /// The SQLite database file (created if absent). Relative paths are resolved against the
    /// config file's directory when the config is loaded.
    public var database: String
    /// The reactors whose state is persisted: exact ids (`counter`) or families (`movie/`).
    public var reactors: [String]
    /// Durability of a commit; `full` by default (as flowd's journal).
    public var synchronous: Synchronous

    public init(database: String, reactors: [String], synchronous: Synchronous = .full) {
        self.database = database
        self.reactors = reactors
        self.synchronous = synchronous
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        database = try container.decode(String.self, forKey: .database)
        reactors = try container.decodeIfPresent([String].self, forKey: .reactors) ?? []
        synchronous = try container.decodeIfPresent(Synchronous.self, forKey: .synchronous) ?? .full
    }

    /// Whether the state of `reactorID` is persisted.
    public func persists(_ reactorID: String) -> Bool {
        reactors.contains {
            $0.hasSuffix("/") ? reactorID.hasPrefix($0) && reactorID.count > $0.count : reactorID == $0
        }
    }

    /// Makes a relative ``database`` path absolute against `directory` (the config file's).
    package mutating func resolveDatabase(relativeTo directory: String) {
        guard !database.hasPrefix("/") else { return }
        database = URL(fileURLWithPath: directory).appendingPathComponent(database).standardizedFileURL.path
    }
}
