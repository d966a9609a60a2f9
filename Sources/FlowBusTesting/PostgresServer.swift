import Foundation

/// A PostgreSQL server of its own for a test: a new cluster in a temporary directory, listening
/// on a free port of `host`, with trust authentication; stopped (and its files removed) by
/// ``stop()``. It runs Debian's binaries (`postgresql-15`, installed by `scripts/bootstrap`) as
/// the `postgres` user when the test runs as root, since PostgreSQL refuses to run as root.
public final class PostgresServer: @unchecked Sendable {
    /// `postgres://postgres@HOST:PORT/postgres`.
    public let url: String
    public let port: Int
    public let directory: URL
    private let host: String
    private let binaries: URL
    private let runAs: String?

    /// Why no server can be started here, nil when one can.
    public static var unavailableReason: String? {
        findBinaries() == nil
            ? "PostgreSQL's binaries are not installed (scripts/bootstrap installs postgresql-15)" : nil
    }

    /// Creates the cluster and starts the server; returns once it accepts connections.
    /// - Parameters:
    ///   - host: the address to listen on (a namespace's address in a several-hosts test).
    ///   - wrap: a command prefix to start it with (e.g. `ip netns exec NAME`).
    ///   - durable: flush each commit to the disk, as a production server does (a benchmark);
    ///     otherwise `fsync=off`, which tests do not need.
    public init(host: String = "127.0.0.1", port: Int? = nil, wrap: [String] = [], durable: Bool = false) throws {
        guard let binaries = Self.findBinaries() else {
            throw HarnessError(.unavailable, Self.unavailableReason ?? "no PostgreSQL")
        }
        self.binaries = binaries
        runAs = getuid() == 0 ? "postgres" : nil
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "flowbus-pg-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        self.directory = directory
        self.port = port ?? Self.freePort()
        self.host = host
        url = "postgres://postgres@\(host):\(self.port)/postgres"
        if let runAs { try Self.run(["/bin/chown", "-R", runAs, directory.path]) }
        let data = directory.appendingPathComponent("data").path
        try runBinary(["initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
        if !["127.0.0.1", "localhost", "::1"].contains(host) {
            // Clients on the other hosts of the test network: initdb admits only local ones.
            let hba = URL(fileURLWithPath: data).appendingPathComponent("pg_hba.conf")
            let rules = try String(contentsOf: hba, encoding: .utf8) + "host all all samenet trust\n"
            try rules.write(to: hba, atomically: false, encoding: .utf8)
        }
        try runBinary(
            wrap,
            [
                "pg_ctl", "-D", data, "-l", directory.appendingPathComponent("server.log").path, "-w", "-t", "30",
                "-o",
                "-c listen_addresses=\(host) -p \(self.port) -k \(directory.path)\(durable ? "" : " -c fsync=off") -c max_connections=50",
                "start",
            ])
    }

    /// Creates a database; returns its URL.
    public func createDatabase(_ name: String) throws -> String {
        try runBinary(["createdb", "-h", directory.path, "-p", "\(port)", "-U", "postgres", name])
        return "postgres://postgres@\(host):\(port)/\(name)"
    }

    /// Runs `sql` (statements separated by `;`, stopping at the first error) in `database`, as
    /// a tool other than FlowBus would.
    public func execute(_ sql: String, in database: String = "postgres") throws {
        try runBinary([
            "psql", "-h", directory.path, "-p", "\(port)", "-U", "postgres", "-d", database, "-v", "ON_ERROR_STOP=1",
            "-q", "-c", sql,
        ])
    }

    /// Stops the server at once and removes its files.
    public func stop() {
        _ = try? runBinary([
            "pg_ctl", "-D", directory.appendingPathComponent("data").path, "-m", "immediate", "-w", "stop",
        ])
        try? FileManager.default.removeItem(at: directory)
    }

    /// The server's log, for a failure message.
    public var log: String {
        (try? String(contentsOf: directory.appendingPathComponent("server.log"), encoding: .utf8)) ?? ""
    }

    private func runBinary(_ arguments: [String]) throws {
        try runBinary([], arguments)
    }

    private func runBinary(_ wrap: [String], _ arguments: [String]) throws {
        var command = wrap
        if let runAs { command += ["/usr/sbin/runuser", "-u", runAs, "--"] }
        command += [binaries.appendingPathComponent(arguments[0]).path] + arguments.dropFirst()
        try Self.run(command)
    }

    /// Runs `command` to its end. posix_spawn and waitpid rather than Foundation's Process,
    /// which can miss the end of a command whose child (the server) lives on.
    private static func run(_ command: [String]) throws {
        // A file, not a pipe: the server pg_ctl starts would hold a pipe open for good.
        let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent(
            "flowbus-pg-\(UUID().uuidString).out"
        ).path
        defer { unlink(outputPath) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        var pid: pid_t = 0
        let arguments = command.map { strdup($0) } + [nil]
        defer { arguments.forEach { free($0) } }
        let spawned = posix_spawn(&pid, command[0], &actions, nil, arguments, environ)
        guard spawned == 0 else {
            throw HarnessError(.cannotStart, "cannot start \(command[0]): \(String(cString: strerror(spawned)))")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        // Exited normally with status 0.
        guard status & 0x7f == 0, (status >> 8) & 0xff == 0 else {
            throw HarnessError(
                .commandFailed, "\(command.joined(separator: " ")) failed (wait status \(status)): \(text)")
        }
    }

    private static func findBinaries() -> URL? {
        let root = URL(fileURLWithPath: "/usr/lib/postgresql")
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []
        for version in versions.sorted(by: >) {
            let bin = root.appendingPathComponent(version).appendingPathComponent("bin")
            if FileManager.default.isExecutableFile(atPath: bin.appendingPathComponent("pg_ctl").path) { return bin }
        }
        return nil
    }

    /// A port nothing listens on now (the kernel's pick for a socket bound to port 0).
    private static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        _ = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
