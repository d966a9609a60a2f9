import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusDaemon
import FlowBusWire
import Foundation
import GRDB
import ZeroMQ

/// A recording of bus traffic: the file `flowctl record` writes and `flowctl play` and
/// `flowctl info` read (ROS 2's bag, for FlowBus).
///
/// One SQLite file (through GRDB) with two tables:
///
/// * `meta` (`key`, `value`, both text): `format` (`flowbus-recording`), `format_version`,
///   `protocol_version` (the wire protocol of the frames), `recorder`, `config` (the config
///   path), `endpoints` (a JSON list of `{"name", "address"}`: what was subscribed to), `topics`
///   (a JSON list of subscription prefixes, empty for all), `started_at_us` (wall clock, µs since
///   the Unix epoch), `reactor_hosts` (a JSON list of `{"endpoint", "source"}`: the source ids of
///   the reactor hosts heard on each endpoint, written as they are heard) and, once the recording
///   is finished, `ended_at_us` and `duration_ns`.
/// * `message`: one row per message in arrival order (`id` from 1; messages read from several
///   endpoints at once in ``interleave(_:)``'s order), with `time_ns` (monotonic nanoseconds
///   since the recording started, when it was read), `endpoint` (the name of the endpoint it came
///   from, e.g. `events` or `reactors.demo.states`), `topic`, `kind` (the envelope's kind, 0 for
///   a message that does not decode), `source` and `sequence` (from its envelope), and `frames`:
///   the message exactly as received, each frame as a 4-byte big-endian length and its bytes.
///
/// Nothing is decoded away: a malformed message is kept with kind 0, and ``Message/frames`` are
/// the bytes the publisher sent.
///
/// Actions are in a recording when its subscriptions on a reactor host's `states` endpoint
/// covered `action/`: the host then re-publishes each action it applied, as received. A step
/// that a reactor host published as a stepper (source `<stepperId>#<suffix>`, where the host's
/// own source is `<hostName>#<suffix>`) is then an effect of those actions: ``inputs()`` marks
/// it ``Input/isFromReactor`` when the recording holds actions from that host's endpoint.
///
/// A recording is written from one thread (``create(path:metadata:overwrite:)``,
/// ``append(_:)``, ``finish(duration:)``) and may be read meanwhile by other processes
/// (``open(path:)``): it is in WAL mode while recording and a plain single file once finished.
public final class BusRecording {
    /// The `format` value in `meta`.
    public static let format = "flowbus-recording"
    /// The format version this module writes and reads.
    public static let formatVersion = 1
    /// SQLite's `application_id` of a recording ("FBrc"), so file-type tools can tell.
    package static let applicationID: Int32 = 0x4642_7263

    /// An endpoint that was subscribed to.
    public struct Endpoint: Sendable, Hashable {
        /// How messages name it: `events` (flowd), `reactors.<host>.states`.
        public var name: String
        /// Its ZeroMQ address.
        public var address: String

        public init(name: String, address: String) {
            self.name = name
            self.address = address
        }
    }

    /// A reactor host heard during the recording.
    public struct ReactorHost: Sendable, Hashable {
        /// The endpoint it was heard on (``Endpoint/name``).
        public var endpoint: String
        /// Its source id, `<hostName>#<suffix>`.
        public var source: String

        public init(endpoint: String, source: String) {
            self.endpoint = endpoint
            self.source = source
        }
    }

    /// What the `meta` table says.
    public struct Metadata: Sendable, Hashable {
        public var formatVersion: Int
        /// The wire protocol version of the recorded frames.
        public var protocolVersion: Int
        /// What wrote the file, e.g. `flowctl record`.
        public var recorder: String
        /// The config the recorder used, if any.
        public var configPath: String?
        public var endpoints: [Endpoint]
        /// Subscription prefixes; empty: every topic.
        public var topics: [String]
        /// The reactor hosts heard, in the order they were first heard.
        public var reactorHosts: [ReactorHost] = []
        /// Wall clock at the start, µs since the Unix epoch.
        public var startedAt: Int64
        /// Wall clock at the end; nil while recording, or when the recorder was killed.
        public var endedAt: Int64?
        /// How long it recorded (monotonic); nil until finished.
        public var durationNanoseconds: Int64?

        public init(
            recorder: String, configPath: String?, endpoints: [Endpoint], topics: [String],
            startedAt: Int64 = Envelope.now()
        ) {
            formatVersion = BusRecording.formatVersion
            protocolVersion = Int(Envelope.currentVersion)
            self.recorder = recorder
            self.configPath = configPath
            self.endpoints = endpoints
            self.topics = topics
            self.startedAt = startedAt
        }
    }

    /// One recorded message.
    public struct Message: Sendable, Hashable {
        /// Position in the recording, from 1 (0 until appended).
        public var id: Int64
        /// Nanoseconds since the recording started (monotonic clock), when it was received.
        public var time: Int64
        /// The name of the endpoint it came from (``Endpoint/name``).
        public var endpoint: String
        public var topic: String
        /// The envelope's kind; nil when the message does not decode.
        public var kind: MessageKind?
        /// The envelope's source id (empty when it does not decode).
        public var source: String
        public var sequence: UInt64
        /// The message as received.
        public var frames: FrameBuffer

        /// A message received at `time` on `endpoint`; topic, kind, source and sequence are read
        /// from its frames (a message that does not decode keeps its raw topic and no kind).
        public init(time: Int64, endpoint: String, frames: FrameBuffer) {
            id = 0
            self.time = time
            self.endpoint = endpoint
            self.frames = frames
            if let header = try? RoutedHeader.decode(from: frames) {
                topic = header.topic
                kind = header.kind
                source = header.envelope.source
                sequence = header.envelope.sequence
            } else {
                topic = frames.isEmpty ? "" : String(decoding: frames.frameBytes(0), as: UTF8.self)
                kind = nil
                source = ""
                sequence = 0
            }
        }

        package init(
            id: Int64, time: Int64, endpoint: String, topic: String, kind: MessageKind?, source: String,
            sequence: UInt64, frames: FrameBuffer
        ) {
            self.id = id
            self.time = time
            self.endpoint = endpoint
            self.topic = topic
            self.kind = kind
            self.source = source
            self.sequence = sequence
            self.frames = frames
        }

        /// The message fully decoded.
        public func decode() throws(WireError) -> WireMessage {
            try WireMessage.decode(from: frames)
        }

        /// The kind's name, `malformed` for a message that does not decode.
        public var kindName: String { kind.map { "\($0)" } ?? "malformed" }
    }

    /// What `flowctl info` prints.
    public struct Summary: Sendable, Hashable {
        public var path: String
        /// The file's size in bytes (with its write-ahead log while recording).
        public var fileBytes: Int64
        public var metadata: Metadata
        public var messageCount: Int
        /// Arrival time of the first and last message, ns since the start.
        public var firstTime: Int64?
        public var lastTime: Int64?
        /// Message counts by topic, by kind name (``Message/kindName``) and by endpoint name.
        public var topics: [String: Int]
        public var kinds: [String: Int]
        public var endpoints: [String: Int]

        /// Whether the recorder finished it (it was not killed, and is not still recording).
        public var isFinished: Bool { metadata.endedAt != nil }
        /// How long it recorded: to the end when finished, else to the last message.
        public var durationNanoseconds: Int64 { metadata.durationNanoseconds ?? lastTime ?? 0 }
        /// Steps that reactor hosts published, which the recorded actions cause again
        /// (``Input/isFromReactor``).
        public var reactorStepCount: Int
        /// Messages `flowctl play` sends (steps, actions and deep links, without the steps from
        /// reactors).
        public var inputCount: Int {
            BusRecording.inputKinds.reduce(0) { $0 + (kinds["\($1)"] ?? 0) } - reactorStepCount
        }
    }

    /// A recorded input of the topology, as `flowctl play` replays it.
    public struct Input: Sendable, Hashable {
        public var message: Message
        /// A step a reactor host published as a stepper while the recording holds actions from
        /// that host: replaying the actions makes the host publish it again, so it is not sent.
        public var isFromReactor: Bool
    }

    /// The kinds that are inputs of a topology, which `flowctl play` sends again (the others are
    /// what flowd and the reactor hosts produced from them).
    public static let inputKinds: [MessageKind] = [.step, .deepLink, .action]

    /// The file's path.
    public let path: String
    /// The metadata, as of opening (and of ``finish(duration:)`` for a writer).
    public private(set) var metadata: Metadata
    private let database: DatabaseQueue

    private init(path: String, database: DatabaseQueue, metadata: Metadata) {
        self.path = path
        self.database = database
        self.metadata = metadata
    }

    // MARK: Writing

    /// Creates a new recording at `path`.
    /// - Parameter overwrite: replace an existing file (else that is an error,
    ///   ``RecordingError/Code/exists``).
    /// - Throws: ``RecordingError`` saying what to do.
    public static func create(
        path: String, metadata: Metadata, overwrite: Bool = false
    ) throws(RecordingError) -> BusRecording {
        let manager = FileManager.default
        if manager.fileExists(atPath: path) {
            guard overwrite else {
                throw RecordingError(.exists, "\(path) exists: pass --force to replace it, or name another file")
            }
            for file in [path, path + "-wal", path + "-shm"] where manager.fileExists(atPath: file) {
                do {
                    try manager.removeItem(atPath: file)
                } catch {
                    throw RecordingError(.unwritable, "cannot replace \(file): \(error.localizedDescription)")
                }
            }
        }
        do {
            let directory = (path as NSString).deletingLastPathComponent
            if !directory.isEmpty {
                try manager.createDirectory(atPath: directory, withIntermediateDirectories: true)
            }
            var configuration = Configuration()
            configuration.label = "flowbus-recording"
            // A killed recorder loses at most its last batch; no fsync per batch.
            configuration.prepareDatabase { db in
                try db.execute(sql: "PRAGMA synchronous = NORMAL")
            }
            let database = try DatabaseQueue(path: path, configuration: configuration)
            // Steps and states may carry anything: private to the user, like the ipc endpoints.
            chmod(path, 0o600)
            try database.writeWithoutTransaction { db in
                // WAL while recording, so that readers (flowctl info) can look meanwhile.
                try db.execute(sql: "PRAGMA journal_mode = WAL")
                try db.execute(sql: "PRAGMA application_id = \(applicationID)")
            }
            try database.write { db in
                try db.execute(
                    sql: """
                        CREATE TABLE meta (
                            key TEXT PRIMARY KEY NOT NULL,
                            value TEXT NOT NULL
                        ) WITHOUT ROWID;
                        CREATE TABLE message (
                            id INTEGER PRIMARY KEY,
                            time_ns INTEGER NOT NULL,
                            endpoint TEXT NOT NULL,
                            topic TEXT NOT NULL,
                            kind INTEGER NOT NULL,
                            source TEXT NOT NULL,
                            sequence INTEGER NOT NULL,
                            frames BLOB NOT NULL
                        );
                        CREATE INDEX message_kind ON message (kind);
                        """)
                try writeMeta(metadata.rows, db)
            }
            return BusRecording(path: path, database: database, metadata: metadata)
        } catch let error as RecordingError {
            throw error
        } catch {
            throw RecordingError(.unwritable, "cannot create the recording \(path): \(error)")
        }
    }

    /// Appends messages in one transaction, in order; sets their ids.
    @discardableResult
    public func append(_ messages: [Message]) throws(RecordingError) -> [Message] {
        guard !messages.isEmpty else { return [] }
        do {
            return try database.write { db in
                let insert = try db.cachedStatement(
                    sql: """
                        INSERT INTO message (time_ns, endpoint, topic, kind, source, sequence, frames) VALUES (?, ?, ?, ?, ?, ?, ?)
                        """)
                var stored = messages
                for index in stored.indices {
                    let message = stored[index]
                    insert.setUncheckedArguments([
                        message.time, message.endpoint, message.topic, Int(message.kind?.rawValue ?? 0), message.source,
                        Int64(bitPattern: message.sequence), Self.encode(message.frames),
                    ])
                    try insert.execute()
                    stored[index].id = db.lastInsertedRowID
                }
                return stored
            }
        } catch {
            throw RecordingError(.unwritable, "cannot write to the recording \(path): \(error)")
        }
    }

    /// Notes a reactor host heard on one of the endpoints (once per endpoint and source), at once,
    /// so that a recorder killed later still leaves it in the file.
    public func noteReactorHost(_ host: ReactorHost) throws(RecordingError) {
        guard !metadata.reactorHosts.contains(host) else { return }
        metadata.reactorHosts.append(host)
        let row = metadata.reactorHostsRow
        do {
            try database.write { db in try Self.writeMeta([row], db) }
        } catch {
            throw RecordingError(.unwritable, "cannot write to the recording \(path): \(error)")
        }
    }

    /// Records the end (now, and `duration` since the start) and folds the write-ahead log into
    /// the file, which is then one self-contained file.
    public func finish(duration: Duration) throws(RecordingError) {
        metadata.endedAt = Envelope.now()
        let (seconds, attoseconds) = duration.components
        metadata.durationNanoseconds = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        do {
            try database.write { db in try Self.writeMeta(metadata.rows, db) }
            try database.writeWithoutTransaction { db in
                try db.checkpoint(.truncate)
                try db.execute(sql: "PRAGMA journal_mode = DELETE")
            }
        } catch {
            throw RecordingError(.unwritable, "cannot finish the recording \(path): \(error)")
        }
    }

    // MARK: Reading

    /// Opens an existing recording read-only.
    /// - Throws: ``RecordingError`` when the file is missing (``RecordingError/Code/missing``), is
    ///   not a recording (``RecordingError/Code/notARecording``), has a format version this module
    ///   does not read (``RecordingError/Code/unsupportedVersion``) or is damaged, saying what to do.
    public static func open(path: String) throws(RecordingError) -> BusRecording {
        guard FileManager.default.fileExists(atPath: path) else {
            throw RecordingError(.missing, "recording \(path) does not exist: record one with `flowctl record \(path)`")
        }
        let notARecording = "\(path) is not a FlowBus recording"
        let fix = "pass a file written by `flowctl record`"
        let database: DatabaseQueue
        let rows: [String: String]
        let hasMeta: Bool
        do {
            var configuration = Configuration()
            configuration.readonly = true
            configuration.label = "flowbus-recording"
            database = try DatabaseQueue(path: path, configuration: configuration)
            (hasMeta, rows) = try database.read { db in
                guard try db.tableExists("meta"), try db.tableExists("message") else { return (false, [:]) }
                var rows: [String: String] = [:]
                for row in try Row.fetchAll(db, sql: "SELECT key, value FROM meta") {
                    rows[row[0]] = row[1]
                }
                return (true, rows)
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_NOTADB {
            throw RecordingError(.notARecording, "\(notARecording) (it is not an SQLite database): \(fix)")
        } catch {
            throw RecordingError(.unreadable, "cannot read \(path): \(error)")
        }
        guard hasMeta, rows["format"] == format else {
            throw RecordingError(
                .notARecording,
                "\(notARecording) (an SQLite database without a \(format) meta table, e.g. a journal): \(fix)")
        }
        guard let version = rows["format_version"].flatMap(Int.init) else {
            throw RecordingError(
                .damaged,
                "\(path) has no readable format_version: the file is damaged; record it again with `flowctl record`")
        }
        guard version == formatVersion else {
            let advice =
                version > formatVersion
                ? "it is newer than this flowctl reads (\(formatVersion)): use the flowctl that recorded it, or a newer one"
                : "this flowctl reads format \(formatVersion) only: record it again with `flowctl record`"
            throw RecordingError(.unsupportedVersion, "\(path) is a recording in format version \(version); \(advice)")
        }
        guard let metadata = Metadata(rows: rows) else {
            throw RecordingError(
                .damaged, "\(path) has damaged metadata (meta table): record it again with `flowctl record`")
        }
        return BusRecording(path: path, database: database, metadata: metadata)
    }

    /// Up to `limit` messages after the one with id `after`, in arrival order; only those of
    /// `kinds` if given.
    public func messages(
        after: Int64 = 0, kinds: [MessageKind]? = nil, limit: Int = 4096
    ) throws(RecordingError) -> [Message] {
        var sql = "SELECT id, time_ns, endpoint, topic, kind, source, sequence, frames FROM message WHERE id > ?"
        if let kinds {
            sql += " AND kind IN (\(kinds.isEmpty ? "NULL" : kinds.map { String($0.rawValue) }.joined(separator: ",")))"
        }
        sql += " ORDER BY id LIMIT ?"
        let path = self.path
        do {
            return try database.read { db in
                var messages: [Message] = []
                let rows = try Row.fetchCursor(db, sql: sql, arguments: [after, limit])
                while let row = try rows.next() {
                    let id: Int64 = row[0]
                    let blob: Data = row[7]
                    guard let frames = Self.decode(blob) else {
                        throw RecordingError(.damaged, "message \(id) of \(path) has damaged frames")
                    }
                    let rawKind: Int = row[4]
                    messages.append(
                        Message(
                            id: id, time: row[1], endpoint: row[2], topic: row[3],
                            kind: MessageKind(rawValue: UInt8(clamping: rawKind)),
                            source: row[5], sequence: UInt64(bitPattern: row[6]), frames: frames))
                }
                return messages
            }
        } catch let error as RecordingError {
            throw error
        } catch {
            throw RecordingError(.unreadable, "cannot read messages from \(path): \(error)")
        }
    }

    /// The steps, deep links and actions, in recorded order, each marked whether it is a step
    /// from a reactor (``Input/isFromReactor``).
    public func inputs() throws(RecordingError) -> [Input] {
        let suffixes = try reactorStepSuffixes()
        var inputs: [Input] = []
        var after: Int64 = 0
        while true {
            let page = try messages(after: after, kinds: Self.inputKinds)
            guard let last = page.last else { break }
            for message in page {
                inputs.append(
                    Input(
                        message: message,
                        isFromReactor: Self.isReactorStep(
                            kind: message.kind, source: message.source, suffixes: suffixes)))
            }
            after = last.id
        }
        return inputs
    }

    /// The part of a source id after its last `#`, which a reactor host shares with the steppers
    /// it publishes as; nil without one.
    public static func sourceSuffix(_ source: String) -> Substring? {
        guard let hash = source.lastIndex(of: "#") else { return nil }
        let suffix = source[source.index(after: hash)...]
        return suffix.isEmpty ? nil : suffix
    }

    private static func isReactorStep(kind: MessageKind?, source: String, suffixes: Set<Substring>) -> Bool {
        guard kind == .step, let suffix = sourceSuffix(source) else { return false }
        return suffixes.contains(suffix)
    }

    /// The source suffixes of the reactor hosts heard on endpoints the recording holds actions
    /// from. Hosts are known from the `reactor_hosts` meta entry and from what they published
    /// themselves (states, snapshots, diagnostics, heartbeats); a recording without actions from
    /// an endpoint (made with `--topics` leaving `action/` out, or before hosts re-published
    /// actions) marks none of that endpoint's hosts, and its steps are replayed as steps.
    private func reactorStepSuffixes() throws(RecordingError) -> Set<Substring> {
        let hostKinds = [MessageKind.state, .snapshot, .diagnostic, .heartbeat].map { String($0.rawValue) }.joined(
            separator: ",")
        let known = metadata.reactorHosts
        do {
            return try database.read { db in
                let withActions = Set(
                    try String.fetchAll(
                        db, sql: "SELECT DISTINCT endpoint FROM message WHERE kind = ?",
                        arguments: [Int(MessageKind.action.rawValue)]))
                guard !withActions.isEmpty else { return [] }
                var hosts = known
                for row in try Row.fetchAll(
                    db,
                    sql:
                        "SELECT DISTINCT endpoint, source FROM message WHERE kind IN (\(hostKinds)) AND endpoint != 'events'"
                ) {
                    hosts.append(ReactorHost(endpoint: row[0], source: row[1]))
                }
                return Set(
                    hosts.filter { withActions.contains($0.endpoint) }.compactMap { Self.sourceSuffix($0.source) })
            }
        } catch {
            throw RecordingError(.unreadable, "cannot read \(path): \(error)")
        }
    }

    /// Counts and times for `flowctl info`.
    public func summary() throws(RecordingError) -> Summary {
        let manager = FileManager.default
        let fileBytes = [path, path + "-wal"].reduce(Int64(0)) { total, file in
            let size = (try? manager.attributesOfItem(atPath: file))?[.size] as? NSNumber
            return total + (size?.int64Value ?? 0)
        }
        let suffixes = try reactorStepSuffixes()
        do {
            return try database.read { db in
                func counts(_ column: String) throws -> [String: Int] {
                    var result: [String: Int] = [:]
                    for row in try Row.fetchAll(db, sql: "SELECT \(column), count(*) FROM message GROUP BY \(column)") {
                        result[row[0]] = row[1]
                    }
                    return result
                }
                let totals = try Row.fetchOne(db, sql: "SELECT count(*), min(time_ns), max(time_ns) FROM message")
                var kinds: [String: Int] = [:]
                for row in try Row.fetchAll(db, sql: "SELECT kind, count(*) FROM message GROUP BY kind") {
                    let raw: Int = row[0]
                    kinds[MessageKind(rawValue: UInt8(clamping: raw)).map { "\($0)" } ?? "malformed", default: 0] +=
                        row[1]
                }
                let count: Int = totals?[0] ?? 0
                // min and max are NULL without messages.
                let first: Int64? = totals.flatMap { $0[1] }
                let last: Int64? = totals.flatMap { $0[2] }
                var reactorSteps = 0
                if !suffixes.isEmpty {
                    let rows = try Row.fetchAll(
                        db, sql: "SELECT source, count(*) FROM message WHERE kind = ? GROUP BY source",
                        arguments: [Int(MessageKind.step.rawValue)])
                    for row in rows where Self.isReactorStep(kind: .step, source: row[0], suffixes: suffixes) {
                        reactorSteps += row[1] as Int
                    }
                }
                return Summary(
                    path: path, fileBytes: fileBytes, metadata: metadata, messageCount: count, firstTime: first,
                    lastTime: last,
                    topics: try counts("topic"), kinds: kinds, endpoints: try counts("endpoint"),
                    reactorStepCount: reactorSteps)
            }
        } catch {
            throw RecordingError(.unreadable, "cannot read \(path): \(error)")
        }
    }

    /// Closes the file.
    public func close() {
        try? database.close()
    }

    /// Messages read from several endpoints in one go, put in one order: each endpoint's own
    /// order is kept, and between endpoints the earlier envelope timestamp goes first. Two
    /// sockets read together say nothing about which message came first; the senders' clocks
    /// do, so that an action comes before the step it made a reactor publish. A message without
    /// a readable envelope goes as soon as it is at the head of its endpoint's messages.
    public static func interleave(_ batches: [[Message]]) -> [Message] {
        let nonEmpty = batches.filter { !$0.isEmpty }
        guard nonEmpty.count > 1 else { return nonEmpty.first ?? [] }
        let stamps = nonEmpty.map { batch in
            batch.map { (try? RoutedHeader.decode(from: $0.frames))?.envelope.timestamp ?? .min }
        }
        var heads = [Int](repeating: 0, count: nonEmpty.count)
        var merged: [Message] = []
        merged.reserveCapacity(nonEmpty.reduce(0) { $0 + $1.count })
        while true {
            var pick: Int?
            for index in nonEmpty.indices where heads[index] < nonEmpty[index].count {
                if let chosen = pick, stamps[chosen][heads[chosen]] <= stamps[index][heads[index]] { continue }
                pick = index
            }
            guard let index = pick else { return merged }
            merged.append(nonEmpty[index][heads[index]])
            heads[index] += 1
        }
    }

    // MARK: Encoding

    private static func writeMeta(_ rows: [(String, String)], _ db: Database) throws {
        let upsert = try db.cachedStatement(sql: "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)")
        for (key, value) in rows {
            upsert.setUncheckedArguments([key, value])
            try upsert.execute()
        }
    }

    /// Each frame as a 4-byte big-endian length, then its bytes.
    package static func encode(_ frames: FrameBuffer) -> Data {
        var data = Data(capacity: frames.byteCount + 4 * frames.count)
        for index in 0..<frames.count {
            let size = UInt32(frames.frameSize(index))
            withUnsafeBytes(of: size.bigEndian) { data.append(contentsOf: $0) }
            data.append(contentsOf: frames.frameBytes(index))
        }
        return data
    }

    /// The frames of ``encode(_:)``, or nil when the lengths do not add up.
    package static func decode(_ data: Data) -> FrameBuffer? {
        let bytes = [UInt8](data)
        var frames = FrameBuffer(byteCapacity: bytes.count)
        var offset = 0
        while offset < bytes.count {
            guard bytes.count - offset >= 4 else { return nil }
            let size = bytes[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
            offset += 4
            guard bytes.count - offset >= size else { return nil }
            frames.append(frame: bytes[offset..<offset + size])
            offset += size
        }
        return frames
    }
}

@available(*, unavailable, message: "a recording is written and read from one thread")
extension BusRecording: Sendable {}

extension BusRecording.Metadata {
    fileprivate var rows: [(String, String)] {
        let endpointList = WireValue.list(
            endpoints.map { .map(["name": .string($0.name), "address": .string($0.address)]) })
        var rows: [(String, String)] = [
            ("format", BusRecording.format), ("format_version", String(formatVersion)),
            ("protocol_version", String(protocolVersion)),
            ("recorder", recorder), ("endpoints", (try? WireJSON.string(endpointList)) ?? "[]"),
            ("topics", (try? WireJSON.string(.list(topics.map(WireValue.string)))) ?? "[]"),
            ("started_at_us", String(startedAt)),
            reactorHostsRow,
        ]
        if let configPath { rows.append(("config", configPath)) }
        if let endedAt { rows.append(("ended_at_us", String(endedAt))) }
        if let durationNanoseconds { rows.append(("duration_ns", String(durationNanoseconds))) }
        return rows
    }

    fileprivate var reactorHostsRow: (String, String) {
        let list = WireValue.list(
            reactorHosts.map { .map(["endpoint": .string($0.endpoint), "source": .string($0.source)]) })
        return ("reactor_hosts", (try? WireJSON.string(list)) ?? "[]")
    }

    fileprivate init?(rows: [String: String]) {
        guard let version = rows["format_version"].flatMap(Int.init),
            let started = rows["started_at_us"].flatMap(Int64.init),
            let endpointsText = rows["endpoints"], let endpointValues = (try? WireJSON.decode(endpointsText))?.listValue
        else { return nil }
        var endpoints: [BusRecording.Endpoint] = []
        for value in endpointValues {
            guard let name = value.mapValue?["name"]?.stringValue, let address = value.mapValue?["address"]?.stringValue
            else { return nil }
            endpoints.append(BusRecording.Endpoint(name: name, address: address))
        }
        let topics = rows["topics"].flatMap { try? WireJSON.decode($0) }?.listValue?.compactMap(\.stringValue) ?? []
        self.init(
            recorder: rows["recorder"] ?? "?", configPath: rows["config"], endpoints: endpoints, topics: topics,
            startedAt: started)
        formatVersion = version
        protocolVersion = rows["protocol_version"].flatMap(Int.init) ?? Int(Envelope.currentVersion)
        endedAt = rows["ended_at_us"].flatMap(Int64.init)
        durationNanoseconds = rows["duration_ns"].flatMap(Int64.init)
        // Absent in recordings made before hosts were noted.
        let hostValues = rows["reactor_hosts"].flatMap { try? WireJSON.decode($0) }?.listValue ?? []
        reactorHosts = hostValues.compactMap { value in
            guard let endpoint = value.mapValue?["endpoint"]?.stringValue,
                let source = value.mapValue?["source"]?.stringValue
            else { return nil }
            return BusRecording.ReactorHost(endpoint: endpoint, source: source)
        }
    }
}

/// Why a recording could not be written or read, with what to do about it.
///
/// ``code`` says what went wrong, so that a caller can match it (`error.code == .missing`);
/// ``description`` says it for a person, naming the file and the fix. New codes do not break
/// callers.
public struct RecordingError: Error, CustomStringConvertible, Sendable, Hashable {
    /// What went wrong.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String {
            case exists
            case missing
            case notARecording = "not-a-recording"
            case unsupportedVersion = "unsupported-version"
            case damaged
            case unreadable
            case unwritable
        }

        private let value: Value

        private init(_ value: Value) {
            self.value = value
        }

        /// The file to record into exists, and replacing it was not asked for (`--force`).
        public static let exists = Code(.exists)
        /// The recording to open does not exist.
        public static let missing = Code(.missing)
        /// The file is not a FlowBus recording: not an SQLite database, or one without a
        /// recording's tables (e.g. a journal).
        public static let notARecording = Code(.notARecording)
        /// The file is a recording in a format version this module does not read (newer or older
        /// than ``BusRecording/formatVersion``).
        public static let unsupportedVersion = Code(.unsupportedVersion)
        /// The file is a recording, but its metadata or a message's frames do not read back.
        public static let damaged = Code(.damaged)
        /// The file cannot be opened or read (permissions, I/O, a lock).
        public static let unreadable = Code(.unreadable)
        /// The recording cannot be created, replaced, written to or finished.
        public static let unwritable = Code(.unwritable)

        public var description: String { value.rawValue }
    }

    /// What went wrong, to match.
    public var code: Code
    /// What went wrong and what to do, in words.
    public var description: String

    public init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}
