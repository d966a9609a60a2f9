import Foundation

extension FlowBusConfig {
    /// The coordinator's durable state: `persistence: { journal: PATH, synchronous: full }`.
    ///
    /// With a journal, flowd commits every batch it applies before acknowledging it, and rebuilds
    /// its navigation tree, bindings and de-duplication table from the journal when it starts.
    public struct Persistence: Codable, Sendable, Hashable {
        /// The journal's SQLite file: absolute, or relative to the config file's directory.
        public var journal: String
        /// `full` (default): each commit is flushed to the disk, so an acknowledged step also
        /// survives a power loss; `normal`: it survives a crash of flowd, not of the machine.
        public var synchronous: StepJournal.Synchronous

        public init(journal: String, synchronous: StepJournal.Synchronous = .full) {
            self.journal = journal
            self.synchronous = synchronous
        }

        enum CodingKeys: String, CodingKey {
            case journal, synchronous
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            journal = try container.decode(String.self, forKey: .journal)
            synchronous = try container.decodeIfPresent(StepJournal.Synchronous.self, forKey: .synchronous) ?? .full
        }

        /// Makes a relative journal path relative to the directory of the config file at `source`.
        mutating func resolveJournal(relativeToConfigAt source: String) {
            guard !journal.hasPrefix("/") else { return }
            let directory = source.contains("/") ? (source as NSString).deletingLastPathComponent : FileManager.default.currentDirectoryPath
            journal = (directory as NSString).appendingPathComponent(journal)
        }
    }
}
