import ArgumentParser
import Dispatch
import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusDaemon
import FlowBusTools
import FlowBusWire
import Foundation
import Logging
import Synchronization

#if PostgreSQL
import FlowBusPostgres
#endif

/// `flowctl journal check|salvage|entries`: look into flowd's journal, and rescue a damaged one.
struct JournalCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "journal",
        abstract: "Check flowd's journal, list what it holds, or copy what can be read of a damaged one to a new file.",
        subcommands: [JournalCheckCommand.self, JournalSalvageCommand.self, JournalEntriesCommand.self])
}

struct JournalEntriesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "entries",
        abstract: "Print the journal's entries, oldest first, one JSON object per line: what flowd applied, in order.",
        discussion: """
            Reads FILE (a SQLite journal), or else the journal the config's persistence names (its SQLite file \
            or its PostgreSQL database, which it reads without taking the lease). Entries a checkpoint covered \
            may have been compacted away: the first id printed says where the journal starts.
            """)

    @OptionGroup var options: ConfigOptions
    @Argument(help: "A SQLite journal; without it, the config's persistence.") var file: String?
    @Option(help: "Only the entries after this id.") var after: Int64 = 0
    @Option(help: "Only steps of this stepper id (or reports of this presentable id).") var target: String?

    func run() throws {
        if let file {
            try printEntries(of: try StepJournal.open(readingAt: file))
            return
        }
        let config = try options.load()
        guard let persistence = config.persistence else {
            throw ClientError(
                .failed,
                "\(FlowBusConfig.resolvePath(options.config)) has no persistence section: flowd journals nothing")
        }
        if let path = persistence.journal {
            try printEntries(of: try StepJournal.open(readingAt: path))
        } else if let url = persistence.postgres {
            #if PostgreSQL
            let journal = try Self.connect(url)
            defer { journal.close() }
            try printEntries(of: journal)
            #else
            throw ClientError(
                .failed,
                "this flowctl was built without the PostgreSQL trait, so it cannot read persistence.postgres: "
                    + "build it with `swift build --traits PostgreSQL --product flowctl` (docs/DEPLOYMENT.md)")
            #endif
        }
    }

    private func printEntries(of journal: some Journal) throws {
        var after = self.after
        while true {
            let page = try journal.entries(after: after, limit: 10_000)
            guard let last = page.last else { return }
            var lines = ""
            for entry in page where target.map({ $0 == entry.target }) ?? true {
                let params: WireValue = (try? entry.decodeParams()).map { .map($0) } ?? .string("unreadable")
                let kind =
                    switch entry.kind {
                    case .step: "step"
                    case .deepLink: "deeplink"
                    case .report: "report"
                    }
                let object: WireParams = [
                    "id": .int(entry.id), "kind": .string(kind), "target": .string(entry.target),
                    "name": .string(entry.name),
                    "params": params, "source": .string(entry.source),
                    "sequence": .int(Int64(clamping: entry.sequence)),
                ]
                lines += try WireJSON.string(.map(object)) + "\n"
            }
            FileHandle.standardOutput.write(Data(lines.utf8))
            after = last.id
        }
    }

    #if PostgreSQL
    /// Connects from this synchronous command: the connection is made on another thread.
    private static func connect(_ url: String) throws -> PostgresJournal {
        let outcome = Mutex<Result<PostgresJournal, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            let result: Result<PostgresJournal, any Error>
            do {
                result = .success(try await PostgresJournal.connect(url: url, logger: Logger(label: "flowctl")))
            } catch {
                result = .failure(error)
            }
            outcome.withLock { $0 = result }
            done.signal()
        }
        guard done.wait(timeout: .now() + .seconds(10)) == .success else {
            throw ClientError(.failed, "no answer from the PostgreSQL server of persistence.postgres within 10 s")
        }
        return try outcome.withLock { $0! }.get()
    }
    #endif
}

struct JournalCheckCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract:
            "Read the whole journal without changing it: SQLite's integrity check, entries and sources. Exit 1 if damaged."
    )

    @Argument(help: "The journal (persistence.journal of the topology).") var file: String

    func run() throws {
        let report = try JournalRepair.check(path: file)
        print("\(file): \(report.entries) entries, \(report.sources) sources")
        if let entry = report.checkpointEntry { print("checkpoint covering entries up to \(entry)") }
        if report.isIntact {
            print("intact")
            return
        }
        print("damaged: \(report.problems.prefix(10).joined(separator: "; "))")
        print("fix: flowctl journal salvage \(file) --to NEW, then point persistence.journal at NEW")
        throw ExitCode(1)
    }
}

struct JournalSalvageCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "salvage",
        abstract: "Copy every entry and source that can still be read into a new journal; report what was lost.")

    @Argument(help: "The damaged journal (read only).") var file: String
    @Option(help: "The new journal to write; it must not exist.") var to: String

    func run() throws {
        let result = try JournalRepair.salvage(path: file, to: to)
        print("\(to): \(result.entries) entries and \(result.sources) sources copied from \(file)")
        switch result.checkpoint {
        case true?: print("checkpoint copied")
        case false?: print("the checkpoint could not be read: the entries it covered are lost with it")
        case nil: break
        }
        if result.unreadable.isEmpty && result.checkpoint != false {
            print("nothing was lost")
        } else {
            let ranges = result.unreadable.map {
                $0.upperBound == .max
                    ? "\($0.lowerBound) and after"
                    : $0.lowerBound == $0.upperBound ? "\($0.lowerBound)" : "\($0.lowerBound)-\($0.upperBound)"
            }
            print("unreadable entry ids (lost): \(ranges.joined(separator: ", "))")
            if let numberedAfter = result.numberedAfter {
                print("new entries are numbered after \(numberedAfter), past every id the damaged file could hold")
            }
        }
    }
}
