import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Whether this machine lets the test build its own network: iproute2's `ip` is there and may
/// create a namespace, a bridge and a veth pair, and run a program inside (root, or
/// CAP_SYS_ADMIN with CAP_NET_ADMIN).
public enum NetworkNamespaces {
    public static let skipComment = """
        needs iproute2's `ip` and permission to create network namespaces, veth pairs and a bridge \
        (root, or CAP_SYS_ADMIN and CAP_NET_ADMIN); the reason is on standard error
        """

    /// The `ip` executable: the first in PATH, else in /usr/sbin or /sbin (not always in a user's PATH).
    public static let ip: URL? = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/sbin", "/sbin"]
        return directories.map { URL(fileURLWithPath: $0).appendingPathComponent("ip") }
            .first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }()

    /// Why namespaces cannot be used here; nil when they can.
    public static let problem: String? = {
        guard let ip else { return "`ip` (iproute2) is not installed: apt-get install iproute2" }
        let probe = "\(Network.prefix)-\(getpid())-probe"
        defer { _ = try? IP.run(ip, ["netns", "delete", probe]) }
        for command in [
            ["netns", "add", probe], ["-n", probe, "link", "add", "br0", "type", "bridge"],
            ["-n", probe, "link", "add", "v0", "type", "veth", "peer", "name", "v1"], ["netns", "exec", probe, "true"],
        ] {
            do {
                try IP.run(ip, command)
            } catch {
                return "\(error)"
            }
        }
        return nil
    }()

    /// Says why on standard error, once, when not.
    public static let usable: Bool = {
        guard let problem else { return true }
        FileHandle.standardError.write(Data("tests in network namespaces skipped: \(problem)\n".utf8))
        return false
    }()
}

/// Runs `ip` and waits for it (setup commands, not the topology's processes).
/// What fails throws a ``HarnessError``: `cannot-start` when `ip` cannot run, `command-failed` when it fails.
public enum IP {
    @discardableResult
    public static func run(_ ip: URL, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = ip
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            throw HarnessError(.cannotStart, "cannot run \(ip.path): \(error.localizedDescription)")
        }
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationReason == .exit, process.terminationStatus == 0 else {
            let said = text.trimmingCharacters(in: .whitespacesAndNewlines)
            throw HarnessError(
                .commandFailed,
                "`ip \(arguments.joined(separator: " "))` failed (status \(process.terminationStatus)): \(said)")
        }
        return text
    }
}

/// Network namespaces made for one test: a switch namespace holding a bridge, and one namespace
/// per host with its `eth0` (a veth pair to the bridge) on a private /24. Nothing is added to
/// the machine's own namespace; deleting the namespaces deletes the links.
public final class Network {
    /// Names start with it, then the pid of the test process that made them.
    public static let prefix = "fbmh"

    public let ip: URL
    public let id: String
    public let subnet: String
    public let hosts: [String]
    private var created: [String] = []

    /// Namespace `<prefix>-<pid>-<random>-<host>` for each host, addresses `<subnet>.1`, `.2`, ….
    public init(hosts: [String]) throws {
        guard let ip = NetworkNamespaces.ip else { throw HarnessError(.unavailable, "`ip` is not installed") }
        self.ip = ip
        self.hosts = hosts
        id = "\(Self.prefix)-\(getpid())-\(String(UInt16.random(in: 0 ... .max), radix: 16))"
        subnet = "10.213.\(Int.random(in: 1...254))"
        Self.removeLeftovers(ip: ip)
        do {
            let lan = try add("lan")
            try IP.run(ip, ["-n", lan, "link", "set", "lo", "up"])
            try IP.run(ip, ["-n", lan, "link", "add", "br0", "type", "bridge"])
            try IP.run(ip, ["-n", lan, "link", "set", "br0", "up"])
            for (index, host) in hosts.enumerated() {
                let namespace = try add(host)
                let port = "p\(index)"
                try IP.run(
                    ip, ["-n", lan, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", namespace])
                try IP.run(ip, ["-n", lan, "link", "set", port, "master", "br0", "up"])
                try IP.run(ip, ["-n", namespace, "link", "set", "lo", "up"])
                try IP.run(ip, ["-n", namespace, "address", "add", "\(address(of: host))/24", "dev", "eth0"])
                try IP.run(ip, ["-n", namespace, "link", "set", "eth0", "up"])
            }
        } catch {
            tearDown()
            throw HarnessError(.unavailable, "cannot build the test network: \(error)")
        }
    }

    deinit { tearDown() }

    public func namespace(of host: String) -> String { "\(id)-\(host)" }

    public func address(of host: String) -> String {
        guard let index = hosts.firstIndex(of: host) else { preconditionFailure("no host \(host)") }
        return "\(subnet).\(index + 1)"
    }

    /// Kills what still runs inside the namespaces and deletes them.
    public func tearDown() {
        for namespace in created.reversed() { Self.delete(namespace, ip: ip) }
        created.removeAll()
    }

    private func add(_ host: String) throws -> String {
        let name = namespace(of: host)
        try IP.run(ip, ["netns", "add", name])
        created.append(name)
        return name
    }

    private static func delete(_ namespace: String, ip: URL) {
        let pids = (try? IP.run(ip, ["netns", "pids", namespace])) ?? ""
        for pid in pids.split(whereSeparator: \.isWhitespace).compactMap({ pid_t($0) }) { kill(pid, SIGKILL) }
        _ = try? IP.run(ip, ["netns", "delete", namespace])
    }

    /// Namespaces of this prefix whose test process is gone (it crashed or was killed).
    private static func removeLeftovers(ip: URL) {
        let listed = (try? IP.run(ip, ["netns", "list"])) ?? ""
        for line in listed.split(separator: "\n") {
            guard let name = line.split(separator: " ").first.map(String.init), name.hasPrefix("\(prefix)-") else {
                continue
            }
            let parts = name.split(separator: "-")
            guard parts.count >= 3, let pid = pid_t(parts[1]), pid != getpid() else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH { delete(name, ip: ip) }
        }
    }
}
