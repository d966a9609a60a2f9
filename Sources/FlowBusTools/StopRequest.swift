import FlowBusClient
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A request to stop a ``BusRecorder`` or a ``BusPlayer`` early, which their loops see at once.
///
/// The request is a byte on a pipe, so that a recorder's poll wakes as soon as it comes and
/// the recording is flushed and closed instead of cut mid-write. ``request()`` may be called
/// from any thread; flowctl makes SIGINT and SIGTERM call it. The first reason sticks.
public final class StopRequest: Sendable {
    /// Why a loop stopped.
    public enum Reason: Sendable, Hashable {
        /// ``request()`` was called.
        case requested
        /// The process received this signal (SIGINT, SIGTERM).
        case signal(Int32)

        /// `SIGINT`, `SIGTERM`, or `signal N`; `stop requested` for a plain request.
        public var name: String {
            switch self {
            case .requested: "stop requested"
            case .signal(SIGINT): "SIGINT"
            case .signal(SIGTERM): "SIGTERM"
            case .signal(let number): "signal \(number)"
            }
        }
    }

    /// The read end of the pipe: readable once a stop is requested, for a poller.
    package let fileDescriptor: Int32
    private let writeEnd: Int32
    /// Whether SIGINT and SIGTERM report here (``catchingStopSignals()``).
    private let catchesSignals: Bool
    private let received = Mutex<Reason?>(nil)

    /// A request nobody made yet.
    /// - Throws: ``BusToolError`` when the process has no file descriptor left for the pipe.
    public convenience init() throws(BusToolError) {
        try self.init(catchesSignals: false)
    }

    private init(catchesSignals: Bool) throws(BusToolError) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            let what = catchesSignals ? "SIGINT and SIGTERM" : "a stop request"
            throw BusToolError(.resources, "cannot create a pipe for \(what): errno \(errno)")
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        fileDescriptor = fds[0]
        writeEnd = fds[1]
        self.catchesSignals = catchesSignals
    }

    deinit {
        if catchesSignals {
            // Nothing reads the pipe any more: let the signals end the process again.
            _ = signal(SIGINT, SIG_DFL)
            _ = signal(SIGTERM, SIG_DFL)
            stopSignalPipe = -1
        }
        close(fileDescriptor)
        close(writeEnd)
    }

    /// A request that SIGINT and SIGTERM make, for a command-line tool that stops cleanly on
    /// Ctrl-C. A second such signal, once the first was seen, ends the process at once, should
    /// the clean stop hang. One per process: a later one takes the signals over.
    package static func catchingStopSignals() throws(BusToolError) -> StopRequest {
        let request = try StopRequest(catchesSignals: true)
        stopSignalPipe = request.writeEnd
        for number in [SIGINT, SIGTERM] {
            _ = signal(number) { number in
                // Only async-signal-safe calls here.
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(stopSignalPipe, &byte, 1)
            }
        }
        // A process started with them blocked (e.g. by a test runner's thread) could not be stopped.
        var stopSignals = sigset_t()
        sigemptyset(&stopSignals)
        sigaddset(&stopSignals, SIGINT)
        sigaddset(&stopSignals, SIGTERM)
        pthread_sigmask(SIG_UNBLOCK, &stopSignals, nil)
        return request
    }

    /// Asks the loops to stop; safe from any thread.
    public func request() {
        var byte: UInt8 = 0
        _ = write(writeEnd, &byte, 1)
    }

    /// Why a stop was requested, if it was; does not block.
    public var reason: Reason? {
        received.withLock { received in
            var byte: UInt8 = 0
            while read(fileDescriptor, &byte, 1) == 1 {
                guard received == nil else { continue }
                received = byte == 0 ? .requested : .signal(Int32(byte))
                if catchesSignals {
                    _ = signal(SIGINT, SIG_DFL)
                    _ = signal(SIGTERM, SIG_DFL)
                }
            }
            return received
        }
    }

    /// Whether a stop was requested; does not block.
    public var isRequested: Bool { reason != nil }
}

/// The write end of the pipe SIGINT and SIGTERM are reported through (set before the handlers).
nonisolated(unsafe) private var stopSignalPipe: Int32 = -1
