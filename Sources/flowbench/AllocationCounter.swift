import Foundation

/// Counts the heap allocations of the process in the middle of a path (the raw forwarder, flowd,
/// fixture-reactors): a small library preloaded into it (`LD_PRELOAD`) counts every `malloc`,
/// `calloc`, `realloc` and aligned allocation, and writes the count to a file when it gets
/// SIGUSR2. flowbench compiles it with the C compiler at hand when a run starts; without one the
/// column says `-`.
///
/// The count is the process's, libzmq's included: the raw forwarder, measured in the same run with
/// the same frames, shows what libzmq and a minimal Swift loop allocate per message.
enum AllocationCounter {
    /// Where the counter writes, as its environment names it.
    static let fileVariable = "FLOWBENCH_ALLOCATIONS"

    /// The counter's source: async-signal-safe reporting (`open`, `write`, `close`), a relaxed
    /// atomic per allocation.
    static let source = #"""
        #define _GNU_SOURCE
        #include <fcntl.h>
        #include <signal.h>
        #include <stdatomic.h>
        #include <stdlib.h>
        #include <string.h>
        #include <unistd.h>
        extern void *__libc_malloc(size_t);
        extern void *__libc_calloc(size_t, size_t);
        extern void *__libc_realloc(void *, size_t);
        extern void *__libc_memalign(size_t, size_t);
        static atomic_ulong count;
        static unsigned long generation;
        static char path[512];
        void *malloc(size_t n) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); return __libc_malloc(n); }
        void *calloc(size_t a, size_t b) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); return __libc_calloc(a, b); }
        void *realloc(void *p, size_t n) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); return __libc_realloc(p, n); }
        void *memalign(size_t a, size_t n) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); return __libc_memalign(a, n); }
        void *aligned_alloc(size_t a, size_t n) { atomic_fetch_add_explicit(&count, 1, memory_order_relaxed); return __libc_memalign(a, n); }
        int posix_memalign(void **out, size_t a, size_t n) {
            atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
            void *p = __libc_memalign(a, n);
            if (!p) return 12;
            *out = p;
            return 0;
        }
        static int decimal(unsigned long v, char *out) {
            char digits[24]; int n = 0;
            do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v);
            for (int i = 0; i < n; i++) out[i] = digits[n - 1 - i];
            return n;
        }
        static void report(int sig) {
            (void)sig;
            if (!path[0]) return;
            char line[64]; int n = decimal(++generation, line);
            line[n++] = ' ';
            n += decimal(atomic_load_explicit(&count, memory_order_relaxed), line + n);
            line[n++] = '\n';
            int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd < 0) return;
            ssize_t written = write(fd, line, (size_t)n);
            (void)written;
            close(fd);
        }
        __attribute__((constructor)) static void start(void) {
            const char *file = getenv("FLOWBENCH_ALLOCATIONS");
            if (file && strlen(file) < sizeof path) strcpy(path, file);
            signal(SIGUSR2, report);
        }
        """#

    /// The counter as a run has it.
    enum Built {
        case library(String)
        case unavailable(why: String)
    }

    /// Compiles the counter into `directory`.
    static func build(in directory: String) -> Built {
        let sourcePath = "\(directory)/allocation-counter.c"
        let library = "\(directory)/allocation-counter.so"
        do {
            try source.write(toFile: sourcePath, atomically: true, encoding: .utf8)
        } catch {
            return .unavailable(why: "cannot write \(sourcePath): \(error)")
        }
        let paths = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin").split(separator: ":")
        guard
            let compiler = ["cc", "gcc", "clang"].lazy.compactMap({ name in
                paths.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
            }).first
        else { return .unavailable(why: "no C compiler (cc, gcc or clang) in PATH") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: compiler)
        process.arguments = ["-O2", "-shared", "-fPIC", "-o", library, sourcePath]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            return .unavailable(why: "cannot run \(compiler): \(error)")
        }
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            return .unavailable(why: "\(compiler) could not build the counter")
        }
        return .library(library)
    }

    /// The environment a counted child gets: the library preloaded, and where it reports.
    static func environment(library: String, file: String) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["LD_PRELOAD"] = library
        environment[fileVariable] = file
        return environment
    }

    /// Reads a counted process's allocations: asks it (SIGUSR2) and waits for its report.
    struct Meter {
        let pid: Int32
        let file: String
        private var generation = 0

        init(pid: Int32, file: String) {
            self.pid = pid
            self.file = file
        }

        /// The allocations so far; nil when the process does not answer within a second (not counted).
        mutating func read() -> Int? {
            kill(pid, SIGUSR2)
            let deadline = Date().addingTimeInterval(1)
            while Date() < deadline {
                if let text = try? String(contentsOfFile: file, encoding: .utf8) {
                    let fields = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
                    if fields.count == 2, let reported = Int(fields[0]), reported > generation,
                        let count = Int(fields[1])
                    {
                        generation = reported
                        return count
                    }
                }
                usleep(1_000)
            }
            return nil
        }
    }
}
