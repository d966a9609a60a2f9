import FlowBusClient
import FlowBusConfiguration
import FlowBusProtocol
import FlowBusWire
import Foundation
import ZeroMQ

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Gets an `ipc://` endpoint ready for a bind: its directory is created (owner only), and a
/// socket file another process still serves is refused — a second flowd must not take over the
/// first one's endpoints (libzmq would replace the file silently, and remove it on stop).
/// - Throws: ``ConfigError`` naming the endpoint and what to do.
package func prepareToBind(_ endpoint: String, what: String) throws(ConfigError) {
    guard endpoint.hasPrefix("ipc://") else { return }
    let path = String(endpoint.dropFirst("ipc://".count))
    let directory = (path as NSString).deletingLastPathComponent
    if !directory.isEmpty, !FileManager.default.fileExists(atPath: directory) {
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw ConfigError(
                .unreadable,
                "\(what) \(endpoint): cannot create its directory \(directory): \(error.localizedDescription)")
        }
    }
    if isServed(unixSocketAt: path) {
        throw ConfigError(
            .endpointInUse,
            "\(what) \(endpoint) is already served by another process (a daemon started with this config?): "
                + "stop it first, or give this one other endpoints")
    }
}

/// Whether something accepts connections on the Unix socket file at `path`.
private func isServed(unixSocketAt path: String) -> Bool {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    guard bytes.count < MemoryLayout.size(ofValue: address.sun_path), FileManager.default.fileExists(atPath: path)
    else {
        return false
    }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: bytes)
        raw[bytes.count] = 0
    }
    let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { return false }
    defer { close(descriptor) }
    let size = socklen_t(MemoryLayout<sockaddr_un>.size)
    let result = withUnsafePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, size) }
    }
    return result == 0
}

/// Makes an `ipc://` endpoint's socket file readable and writable by its owner only.
package func restrictPermissions(ofIPCEndpoint endpoint: String) {
    guard endpoint.hasPrefix("ipc://") else { return }
    let path = String(endpoint.dropFirst("ipc://".count))
    _ = try? FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
}

/// The listening Unix sockets bound to `path`, each with the pids holding it, as /proc tells
/// them (`/proc/net/unix`, then each readable process's open files). More than one means a
/// second daemon bound the same endpoint; one whose file is gone serves nobody new.
public func unixSocketListeners(boundTo path: String) -> [(inode: String, pids: [Int32])] {
    guard let table = try? String(contentsOfFile: "/proc/net/unix", encoding: .utf8) else { return [] }
    var inodes: [String] = []
    for line in table.split(separator: "\n").dropFirst() {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        // Num RefCount Protocol Flags Type St Inode Path; flag 0x10000 marks a listening socket.
        guard fields.count >= 8, String(fields[7...].joined(separator: " ")) == path,
            let flags = UInt32(fields[3], radix: 16), flags & 0x10000 != 0
        else { continue }
        inodes.append(String(fields[6]))
    }
    guard !inodes.isEmpty else { return [] }
    var holders: [String: [Int32]] = [:]
    let wanted = Set(inodes.map { "socket:[\($0)]" })
    for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
        guard let pid = Int32(entry),
            let fds = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(entry)/fd")
        else { continue }
        for fd in fds {
            guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(entry)/fd/\(fd)"),
                wanted.contains(target)
            else {
                continue
            }
            let inode = String(target.dropFirst("socket:[".count).dropLast())
            if holders[inode]?.contains(pid) != true { holders[inode, default: []].append(pid) }
        }
    }
    return inodes.map { ($0, holders[$0] ?? []) }
}
