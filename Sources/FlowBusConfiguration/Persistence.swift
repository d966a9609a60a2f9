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
        /// How the instance holding a PostgreSQL journal's lease shows it is alive, and how soon
        /// a standby takes the lease of one gone silent (PostgreSQL only).
        public var lease: LeaseTimings

        public init(
            journal: String? = nil, postgres: String? = nil, synchronous: JournalSynchronous = .full,
            checkpoint: CheckpointPolicy = .init(), lease: LeaseTimings = .init()
        ) {
            self.journal = journal
            self.postgres = postgres
            self.synchronous = synchronous
            self.checkpoint = checkpoint
            self.lease = lease
        }

        package enum CodingKeys: String, CodingKey {
            case journal, postgres, synchronous, checkpoint, lease
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            journal = try container.decodeIfPresent(String.self, forKey: .journal)
            postgres = try container.decodeIfPresent(String.self, forKey: .postgres)
            synchronous = try container.decodeIfPresent(JournalSynchronous.self, forKey: .synchronous) ?? .full
            checkpoint = try container.decodeIfPresent(CheckpointPolicy.self, forKey: .checkpoint) ?? .init()
            let lease = try container.decodeIfPresent(LeaseTimings.self, forKey: .lease)
            self.lease = lease ?? .init()
            guard (journal == nil) != (postgres == nil) else {
                throw DecodingError.dataCorrupted(
                    .init(
                        codingPath: decoder.codingPath,
                        debugDescription:
                            "persistence takes one of 'journal: FILE' (SQLite, on this machine) and 'postgres: URL' (shared by several flowd)"
                    ))
            }
            if lease != nil, postgres == nil {
                throw DecodingError.dataCorruptedError(
                    forKey: .lease, in: container,
                    debugDescription:
                        "persistence.lease applies to a journal several flowd share (persistence.postgres): remove it, a SQLite journal has no lease"
                )
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

/// `lease: { keepAliveMs: 200, timeoutMs: 1000 }`: the lease of a journal several flowd share.
///
/// The holder runs a statement on its session at least every `keepAliveMs` (a commit counts); a
/// standby that finds the holder's session idle for more than `timeoutMs` ends it and takes the
/// lease. The holder gives the lease up itself, and stops, when its session has not answered
/// for most of `timeoutMs`, so that it never serves once a standby may have taken over. A
/// shorter timeout notices a lost machine sooner; a holder stalled for longer (a paused VM,
/// heavy swapping) loses the lease, safely but needlessly.
public struct LeaseTimings: Codable, Sendable, Hashable {
    public var keepAliveMs: Int
    public var timeoutMs: Int

    public init(keepAliveMs: Int = 200, timeoutMs: Int = 1000) {
        self.keepAliveMs = keepAliveMs
        self.timeoutMs = timeoutMs
    }

    package enum CodingKeys: String, CodingKey {
        case keepAliveMs, timeoutMs
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = LeaseTimings()
        keepAliveMs = try container.decodeIfPresent(Int.self, forKey: .keepAliveMs) ?? defaults.keepAliveMs
        timeoutMs = try container.decodeIfPresent(Int.self, forKey: .timeoutMs) ?? defaults.timeoutMs
        guard keepAliveMs >= 10 else {
            throw DecodingError.dataCorruptedError(
                forKey: .keepAliveMs, in: container,
                debugDescription: "persistence.lease.keepAliveMs is \(keepAliveMs): it must be 10 or more")
        }
        // A healthy holder's session can stay silent for about a keep-alive interval plus a round trip.
        guard timeoutMs >= 3 * keepAliveMs else {
            throw DecodingError.dataCorruptedError(
                forKey: .timeoutMs, in: container,
                debugDescription:
                    "persistence.lease.timeoutMs is \(timeoutMs): it must be at least 3 × keepAliveMs (\(3 * keepAliveMs)), or standbys would end a live holder's session"
            )
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
