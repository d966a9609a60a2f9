import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusWire
import Foundation
import GRDB

/// A journal in a temporary file for the journal's tests, and the entries they append.
public enum JournalFixture {
    /// Step `tick(n:)` of stepper `load` from source `s#1`, with sequence `n`.
    public static func tick(_ n: Int64) throws -> StepJournal.Record {
        .init(
            kind: .step, target: "load", name: "tick", params: Data(try FBV.encode(.map(["n": .int(n)]))),
            source: "s#1", sequence: UInt64(n))
    }

    /// Runs `body` with a new journal and its path; removes its files afterwards.
    public static func withJournal(_ body: (String, StepJournal) throws -> Void) throws {
        let path = NSTemporaryDirectory() + "journal-\(UUID().uuidString).sqlite"
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
        let journal = try StepJournal.open(path: path, synchronous: .normal)
        defer { journal.close() }
        try body(path, journal)
    }

    /// Replaces the packed entries of the commit numbered from `first` (a damaged journal).
    public static func overwriteCommit(first: Int64, with bytes: Data, in path: String) throws {
        let database = try DatabaseQueue(path: path)
        defer { try? database.close() }
        try database.write { db in
            try db.execute(sql: "UPDATE batch SET entries = ? WHERE first = ?", arguments: [bytes, first])
        }
    }

    /// Where in the file a page holding packed entries lies, in the middle of those that do: a page
    /// of a commit's entries that run over pages of their own when there are such, as large
    /// commits do. A leaf holds the ids of its commits: damage there would hide where the table
    /// starts or ends, not one commit.
    public static func pageOfEntries(in path: String) throws -> (offset: UInt64, size: Int) {
        let database = try DatabaseQueue(path: path)
        defer { try? database.close() }
        let (pages, size) = try database.read { db in
            let overflow = try Int.fetchAll(
                db, sql: "SELECT pageno FROM dbstat WHERE name = 'batch' AND pagetype = 'overflow' ORDER BY pageno")
            return (
                overflow.isEmpty
                    ? try Int.fetchAll(
                        db, sql: "SELECT pageno FROM dbstat WHERE name = 'batch' AND pagetype = 'leaf' ORDER BY pageno")
                    : overflow,
                try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
            )
        }
        guard !pages.isEmpty else { throw CocoaError(.fileReadCorruptFile) }
        return (UInt64(pages[pages.count / 2] - 1) * UInt64(size), size)
    }

    /// Overwrites, in the journal at `path`, the page holding the first (`last`: false) or the last
    /// commits' ids: a damaged end of the table of commits, which hides where it starts or ends.
    public static func damageEndOfCommits(last: Bool, in path: String) throws {
        let database = try DatabaseQueue(path: path)
        let (page, size) = try database.read { db in
            // dbstat's paths list a table's pages in tree order.
            let page = try Int.fetchOne(
                db,
                sql:
                    "SELECT pageno FROM dbstat WHERE name = 'batch' AND pagetype = 'leaf' ORDER BY path \(last ? "DESC" : "ASC") LIMIT 1"
            )
            return (page, try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096)
        }
        try database.close()
        guard let page else { throw CocoaError(.fileReadCorruptFile) }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(page - 1) * UInt64(size))
        try handle.write(contentsOf: Data(repeating: 0xDE, count: size))
    }

    /// The page size of the SQLite file at `path`.
    public static func pageSize(of path: String) throws -> Int {
        let database = try DatabaseQueue(path: path)
        defer { try? database.close() }
        return try database.read { db in try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 0 }
    }

    /// Creates an empty SQLite file with 4 KB pages at `path`, as journals of earlier versions were.
    public static func createSmallPaged(at path: String) throws {
        let database = try DatabaseQueue(path: path)
        defer { try? database.close() }
        try database.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA page_size = 4096")
            try db.execute(sql: "CREATE TABLE earlier (id INTEGER PRIMARY KEY)")
        }
    }

    /// A journal as versions before packed commits wrote it: the schema of migrations v1 to
    /// v3-events and `ticks` entries, a row each, numbered from 1.
    public static func createEarlierJournal(at path: String, ticks: Int64) throws {
        let database = try DatabaseQueue(path: path)
        defer { try? database.close() }
        try database.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                    INSERT INTO grdb_migrations VALUES ('v1'), ('v2-checkpoint'), ('v3-events');
                    CREATE TABLE entry (
                        id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, target TEXT NOT NULL, name TEXT NOT NULL,
                        params BLOB NOT NULL, source TEXT NOT NULL, sequence INTEGER NOT NULL);
                    CREATE TABLE source (id TEXT PRIMARY KEY NOT NULL, lastSequence INTEGER NOT NULL) WITHOUT ROWID;
                    CREATE TABLE checkpoint (
                        id INTEGER PRIMARY KEY, entry INTEGER NOT NULL, created REAL NOT NULL, state BLOB NOT NULL);
                    CREATE TABLE event (
                        first INTEGER PRIMARY KEY, last INTEGER NOT NULL, created REAL NOT NULL, events BLOB NOT NULL);
                    CREATE INDEX event_last ON event (last);
                    """)
            for n in 1...ticks {
                let tick = try tick(n)
                try db.execute(
                    sql: "INSERT INTO entry (kind, target, name, params, source, sequence) VALUES (?, ?, ?, ?, ?, ?)",
                    arguments: [tick.kind.rawValue, tick.target, tick.name, tick.params, tick.source, n])
            }
        }
    }
}
