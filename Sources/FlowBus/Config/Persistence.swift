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
        public var journal: String
        /// `full` (default): each commit is flushed to the disk, so an acknowledged step also
        /// survives a power loss; `normal`: it survives a crash of flowd, not of the machine.
        public var synchronous: StepJournal.Synchronous
        /// When checkpoints are written and how much history they leave.
        public var checkpoint: CheckpointPolicy

        public init(journal: String, synchronous: StepJournal.Synchronous = .full, checkpoint: CheckpointPolicy = .init()) {
            self.journal = journal
            self.synchronous = synchronous
            self.checkpoint = checkpoint
        }

        enum CodingKeys: String, CodingKey {
            case journal, synchronous, checkpoint
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            journal = try container.decode(String.self, forKey: .journal)
            synchronous = try container.decodeIfPresent(StepJournal.Synchronous.self, forKey: .synchronous) ?? .full
            checkpoint = try container.decodeIfPresent(CheckpointPolicy.self, forKey: .checkpoint) ?? .init()
        }

        /// Makes a relative journal path relative to the directory of the config file at `source`.
        mutating func resolveJournal(relativeToConfigAt source: String) {
            guard !journal.hasPrefix("/") else { return }
            let directory = source.contains("/") ? (source as NSString).deletingLastPathComponent : FileManager.default.currentDirectoryPath
            journal = (directory as NSString).appendingPathComponent(journal)
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

        enum CodingKeys: String, CodingKey {
            case everyEntries, everySeconds, keepEntries
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let defaults = CheckpointPolicy()
            everyEntries = try container.decodeIfPresent(Int.self, forKey: .everyEntries) ?? defaults.everyEntries
            everySeconds = try container.decodeIfPresent(Double.self, forKey: .everySeconds) ?? defaults.everySeconds
            keepEntries = try container.decodeIfPresent(Int.self, forKey: .keepEntries) ?? defaults.keepEntries
            for (key, value) in [(CodingKeys.everyEntries, Double(everyEntries)), (.everySeconds, everySeconds), (.keepEntries, Double(keepEntries))]
            where value < 0 {
                throw DecodingError.dataCorruptedError(
                    forKey: key, in: container, debugDescription: "persistence.checkpoint.\(key.stringValue) must be 0 or more")
            }
        }
    }
}
