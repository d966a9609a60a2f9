import ArgumentParser
import FlowBus
import Foundation

/// `flowctl journal check|salvage`: look into flowd's journal, and rescue a damaged one.
struct JournalCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "journal",
        abstract: "Check flowd's journal, or copy what can be read of a damaged one to a new file.",
        subcommands: [JournalCheckCommand.self, JournalSalvageCommand.self])
}

struct JournalCheckCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Read the whole journal without changing it: SQLite's integrity check, entries and sources. Exit 1 if damaged.")

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
            let ranges = result.unreadable.map { $0.count == 1 ? "\($0.lowerBound)" : "\($0.lowerBound)-\($0.upperBound)" }
            print("unreadable entry ids (lost): \(ranges.joined(separator: ", "))")
        }
    }
}
