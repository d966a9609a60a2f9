import FlowBusClient
import FlowBusWire
import Foundation

extension FlowBusConfig {
    /// The coordinator's durable state: `persistence: { journal: PATH, synchronous: full,
    /// checkpoint: { everyEntries: 100000, everySeconds: 300, keepEntries: 0 } }`.
    ///
    /// With a journal, flowd commits every batch it applies before acknowledging it, and rebuilds
    /// its navigation tree, bindings and de-duplication table from the journal when it starts:
    /// from its newest checkpoint and the entries after it.
    public struct Persistence: Codable, Sendable, Hashable {
        /// The journal's SQLite file: absolute, or relative to the config file's directory.
        /// Exactly one of `journal` and `postgres` is set.
        public var journal: String?
        /// A PostgreSQL journal several flowd instances share, one active at a time
        /// (`postgres://user:password@host:port/database`; docs/DEPLOYMENT.md).
        public var postgres: String?
        /// `full` (default): each commit is flushed to the disk, so an acknowledged step also
        /// survives a power loss; `normal`: it survives a crash of flowd, not of the machine.
        /// (SQLite only; PostgreSQL follows its own `synchronous_commit`.)
        public var synchronous: JournalSynchronous
        /// When checkpoints are written and how much history they leave.
        public var checkpoint: CheckpointPolicy

        public init(
            journal: String? = nil, postgres: String? = nil, synchronous: JournalSynchronous = .full,
            checkpoint: CheckpointPolicy = .init()
        ) {
            self.journal = journal
            self.postgres = postgres
            self.synchronous = synchronous
            self.checkpoint = checkpoint
        }

        package enum CodingKeys: String, CodingKey {
            case journal, postgres, synchronous, checkpoint
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            journal = try container.decodeIfPresent(String.self, forKey: .journal)
            postgres = try container.decodeIfPresent(String.self, forKey: .postgres)
            synchronous = try container.decodeIfPresent(JournalSynchronous.self, forKey: .synchronous) ?? .full
            checkpoint = try container.decodeIfPresent(CheckpointPolicy.self, forKey: .checkpoint) ?? .init()
            guard (journal == nil) != (postgres == nil) else {
                throw DecodingError.dataCorrupted(
                    .init(
                        codingPath: decoder.codingPath,
                        debugDescription:
                            "persistence takes one of 'journal: FILE' (SQLite, on this machine) and 'postgres: URL' (shared by several flowd)"
                    ))
            }
            if let postgres, !(postgres.hasPrefix("postgres://") || postgres.hasPrefix("postgresql://")) {
                throw DecodingError.dataCorruptedError(
                    forKey: .postgres, in: container,
                    debugDescription:
                        "persistence.postgres is a URL: postgres://user:password@host:5432/database")
            }
        }

        /// Makes a relative journal path relative to the directory of the config file at `source`.
        package mutating func resolveJournal(relativeToConfigAt source: String) {
            guard let journal, !journal.hasPrefix("/") else { return }
            let directory =
                source.contains("/")
                ? (source as NSString).deletingLastPathComponent : FileManager.default.currentDirectoryPath
            self.journal = (directory as NSString).appendingPathComponent(journal)
        }
    }

    /// `checkpoint: { everyEntries: N, everySeconds: T, keepEntries: K }`.
    ///
    /// flowd writes a checkpoint once `everyEntries` entries were journaled since the last one,
    /// or after `everySeconds` if any were, and then drops the entries the checkpoint covers,
    /// keeping the newest `keepEntries` of them for audits. It never spends more than about a
    /// twentieth of its time on checkpoints: after one that took d, the next waits at least 20·d.
    /// `everyEntries: 0` turns checkpoints off (the journal then grows with history).
    public struct CheckpointPolicy: Codable, Sendable, Hashable {
        public var everyEntries: Int
        public var everySeconds: Double
        public var keepEntries: Int

        public init(everyEntries: Int = 100_000, everySeconds: Double = 300, keepEntries: Int = 0) {
            self.everyEntries = everyEntries
            self.everySeconds = everySeconds
            self.keepEntries = keepEntries
        }

        package enum CodingKeys: String, CodingKey {
            case everyEntries, everySeconds, keepEntries
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let defaults = CheckpointPolicy()
            everyEntries = try container.decodeIfPresent(Int.self, forKey: .everyEntries) ?? defaults.everyEntries
            everySeconds = try container.decodeIfPresent(Double.self, forKey: .everySeconds) ?? defaults.everySeconds
            keepEntries = try container.decodeIfPresent(Int.self, forKey: .keepEntries) ?? defaults.keepEntries
            for (key, value) in [
                (CodingKeys.everyEntries, Double(everyEntries)), (.everySeconds, everySeconds),
                (.keepEntries, Double(keepEntries)),
            ]
            where value < 0 {
                throw DecodingError.dataCorruptedError(
                    forKey: key, in: container,
                    debugDescription: "persistence.checkpoint.\(key.stringValue) must be 0 or more")
            }
        }
    }
}

/// How hard a commit holds on to the disk.
public enum JournalSynchronous: String, Codable, Sendable, Hashable {
    /// fsync every commit: an acknowledged step survives a power loss (SQLite `FULL`).
    case full
    /// Survives a crash of flowd (SIGKILL) but maybe not of the machine (SQLite `NORMAL`).
    case normal
}
