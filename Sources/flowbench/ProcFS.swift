import Foundation

/// What Linux's /proc says about a child process (CPU time, peak memory) and about a directory's
/// file system: the figures a scenario reports beside its messages per second.
enum ProcFS {
    /// Clock ticks per second, the unit of the times in /proc/PID/stat.
    static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// User + system CPU time `pid` has used so far, in seconds; `nil` if it is gone.
    static func cpuSeconds(of pid: Int32) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let nameEnd = stat.lastIndex(of: ")")
        else { return nil }
        // The command name (field 2) may hold spaces; after it come field 3 (state) onwards, so
        // utime and stime, fields 14 and 15, are the 12th and 13th.
        let fields = stat[stat.index(after: nameEnd)...].split(separator: " ")
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        return Double(user + system) / ticksPerSecond
    }

    /// The peak resident set size (VmHWM) of `pid`, in bytes; `nil` if it is gone.
    static func peakResidentBytes(of pid: Int32) -> Int? {
        statusBytes("VmHWM", of: pid)
    }

    /// The resident set size (VmRSS) of `pid` now, in bytes; `nil` if it is gone.
    static func residentBytes(of pid: Int32) -> Int? {
        statusBytes("VmRSS", of: pid)
    }

    /// A `kB` field of /proc/PID/status, in bytes.
    private static func statusBytes(_ field: String, of pid: Int32) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }),
            let value = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first,
            let kilobytes = Int(value)
        else { return nil }
        return kilobytes * 1024
    }

    /// The type of the file system holding `path` (e.g. `ext4`, `tmpfs`), from the longest
    /// mount point in /proc/self/mounts that contains it: a journal's fsync costs depend on it.
    static func fileSystemType(of path: String) -> String? {
        guard let mounts = try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8) else { return nil }
        let resolved = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        var best: (mountPoint: String, type: String)?
        for line in mounts.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count >= 3 else { continue }
            // Mount points escape spaces as \040.
            let mountPoint = fields[1].replacingOccurrences(of: "\\040", with: " ")
            let contains = mountPoint == "/" || resolved == mountPoint || resolved.hasPrefix(mountPoint + "/")
            if contains && mountPoint.count >= (best?.mountPoint.count ?? 0) {
                best = (mountPoint, String(fields[2]))
            }
        }
        return best?.type
    }
}

/// The CPU time and peak memory of the process in the middle of a path (the raw forwarder or a
/// daemon) over one throughput run.
struct ProcessUsage: Codable, Sendable {
    /// User + system CPU time from just before `go` to the receiver's report.
    var cpuSeconds: Double
    /// VmHWM at the end of the run (the whole life of the process so far).
    var peakResidentBytes: Int?
    /// Heap allocations over the run, when the process was counted (``AllocationCounter``).
    var allocations: Int?

    /// Starts measuring `pid`; ``finish()`` reads the figures.
    struct Meter {
        let pid: Int32
        private let startSeconds: Double?

        init(pid: Int32) {
            self.pid = pid
            startSeconds = ProcFS.cpuSeconds(of: pid)
        }

        /// The usage since ``init(pid:)``, or `nil` if /proc could not be read.
        func finish() -> ProcessUsage? {
            guard let startSeconds, let end = ProcFS.cpuSeconds(of: pid) else { return nil }
            return ProcessUsage(cpuSeconds: end - startSeconds, peakResidentBytes: ProcFS.peakResidentBytes(of: pid))
        }
    }
}
