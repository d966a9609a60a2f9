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

    /// Overwrites, in the journal at `path`, the leaves of its table of commits at `positions` in
    /// key order (negative: from the end, -1 the last): a damaged leaf at an end hides where the
    /// table starts or ends.
    /// - Returns: for each, the first ids of the commits it held.
    @discardableResult
    public static func damageCommitLeaves(_ positions: [Int], in path: String) throws -> [ClosedRange<Int64>] {
        try damageLeaves(of: "batch", key: "first", positions, in: path)
    }

    /// ``damageCommitLeaves(_:in:)`` for the table of the entries' rows (of salvaged journals).
    /// - Returns: for each, the ids of the rows it held.
    @discardableResult
    public static func damageEntryRowLeaves(_ positions: [Int], in path: String) throws -> [ClosedRange<Int64>] {
        try damageLeaves(of: "entry", key: "id", positions, in: path)
    }

    /// Makes the journal at `path` one of a version that noted reserved ids only as rows of `entry`.
    public static func removeReservations(in path: String) throws {
        let database = try DatabaseQueue(path: path)
        defer { try? database.close() }
        try database.write { db in
            try db.execute(sql: "DROP TABLE reservation")
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = 'v5-reservations'")
        }
    }

    /// ``damageCommitLeaves(_:in:)`` for the table of the ids salvages numbered past.
    /// - Returns: for each, those it held.
    @discardableResult
    public static func damageReservationLeaves(_ positions: [Int], in path: String) throws -> [ClosedRange<Int64>] {
        try damageLeaves(of: "reservation", key: "through", positions, in: path)
    }

    /// The leaves of `table` in key order (page number, cells), its keys in order, and the page size.
    private static func leaves(
        of table: String, key: String, in path: String
    ) throws -> (leaves: [(page: Int, cells: Int)], keys: [Int64], pageSize: Int) {
        let database = try DatabaseQueue(path: path)
        defer { try? database.close() }
        return try database.read { db in
            // dbstat's paths list a table's pages in tree order; only leaves hold rows.
            let leaves = try Row.fetchAll(
                db,
                sql: "SELECT pageno, ncell FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY path",
                arguments: [table]
            ).map { (page: $0[0] as Int, cells: $0[1] as Int) }
            return (
                leaves, try Int64.fetchAll(db, sql: "SELECT \(key) FROM \(table) ORDER BY \(key)"),
                try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
            )
        }
    }

    private static func damageLeaves(
        of table: String, key: String, _ positions: [Int], in path: String
    ) throws -> [ClosedRange<Int64>] {
        let (leaves, keys, size) = try leaves(of: table, key: key, in: path)
        var starts: [Int] = []
        var cells = 0
        for leaf in leaves {
            starts.append(cells)
            cells += leaf.cells
        }
        guard cells == keys.count else { throw CocoaError(.fileReadCorruptFile) }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        return try positions.map { position in
            let index = position < 0 ? leaves.count + position : position
            guard leaves.indices.contains(index), leaves[index].cells > 0 else {
                throw CocoaError(.fileReadCorruptFile)
            }
            try handle.seek(toOffset: UInt64(leaves[index].page - 1) * UInt64(size))
            try handle.write(contentsOf: Data(repeating: 0xDE, count: size))
            return keys[starts[index]]...keys[starts[index] + leaves[index].cells - 1]
        }
    }

    /// Overwrites, in the journal at `path`, the header of the record of the commit numbered from
    /// `first` (its key still reads; its columns do not).
    public static func damageCommitRecord(first: Int64, in path: String) throws {
        let (leaves, firsts, size) = try leaves(of: "batch", key: "first", in: path)
        guard var cell = firsts.firstIndex(of: first) else { throw CocoaError(.fileReadCorruptFile) }
        var leaf = 0
        while cell >= leaves[leaf].cells {
            cell -= leaves[leaf].cells
            leaf += 1
        }
        let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        let pageStart = UInt64(leaves[leaf].page - 1) * UInt64(size)
        try handle.seek(toOffset: pageStart)
        let page = [UInt8](try handle.read(upToCount: size) ?? Data())
        // A table leaf (0x0D): its cell pointers follow the 8-byte header; a cell is the payload's
        // size and the rowid (varints), then the record, whose header starts with its own size.
        guard page.first == 0x0D else { throw CocoaError(.fileReadCorruptFile) }
        var offset = Int(page[8 + 2 * cell]) << 8 | Int(page[9 + 2 * cell])
        for _ in 0..<2 {
            while page[offset] & 0x80 != 0 { offset += 1 }
            offset += 1
        }
        try handle.seek(toOffset: pageStart + UInt64(offset))
        try handle.write(contentsOf: Data([0x7F]))
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
