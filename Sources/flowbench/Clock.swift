#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
// Where the build also links Hummingbird (the Tracing trait), timespec's members are found
// through Dispatch's C module.
#if canImport(CDispatch)
import CDispatch
#endif

/// CLOCK_MONOTONIC in nanoseconds. Every process on one machine reads the same clock, so a time
/// taken in one process can be subtracted from a time taken in another (one-way latency).
@inline(__always)
func monotonicNanoseconds() -> Int64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return Int64(spec.tv_sec) * 1_000_000_000 + Int64(spec.tv_nsec)
}

/// p50 and p99 of a set of latency samples, plus how many there were.
struct LatencySummary: Codable, Sendable, Hashable {
    var samples: Int
    var p50Nanoseconds: Int64
    var p99Nanoseconds: Int64
    var maxNanoseconds: Int64

    /// Summarises `samples` (sorted in place). Percentiles are nearest-rank: p99 of 10 000
    /// samples is the 9 900th smallest.
    init?(sorting samples: inout [Int64]) {
        guard !samples.isEmpty else { return nil }
        samples.sort()
        self.samples = samples.count
        p50Nanoseconds = LatencySummary.nearestRank(0.50, in: samples)
        p99Nanoseconds = LatencySummary.nearestRank(0.99, in: samples)
        maxNanoseconds = samples[samples.count - 1]
    }

    private static func nearestRank(_ quantile: Double, in sorted: [Int64]) -> Int64 {
        let rank = Int((quantile * Double(sorted.count)).rounded(.up))
        return sorted[min(max(rank, 1), sorted.count) - 1]
    }

    var p50Microseconds: Double { Double(p50Nanoseconds) / 1000 }
    var p99Microseconds: Double { Double(p99Nanoseconds) / 1000 }
}

/// Keeps the optimiser from deleting work whose result is otherwise unused.
@inline(never)
func blackHole<T>(_ value: T) {}
