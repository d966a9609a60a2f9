import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What a daemon plugs into ``FlowLoop`` to do its I/O on the engine's own thread.
///
/// The loop alternates between running ``FlowActor`` jobs and giving the driver a turn. A turn
/// runs on the loop thread while no job runs, so it may use `FlowActor.assumeIsolated` to call
/// the engine synchronously.
public protocol FlowLoopDriver: AnyObject, Sendable {
    /// Reads and handles what is ready. With `mayWait`, blocks until something is ready or
    /// ``wake()`` is called (or a deadline of the driver's own passes); without it, returns at once.
    func turn(mayWait: Bool)
    /// Interrupts a waiting ``turn(mayWait:)``; called from any thread when a job arrives.
    func wake()
}

/// The serial executor of ``FlowActor``: one dedicated thread runs every job, in order.
///
/// Without a driver the thread sleeps until a job arrives. With one (``install(_:)``) it runs
/// the jobs queued so far, then gives the driver a turn, and again: jobs and I/O share the
/// thread, and neither can starve the other.
public final class FlowLoop: SerialExecutor, @unchecked Sendable {
    /// The executor of ``FlowActor``.
    public static let shared = FlowLoop()

    private struct State {
        var jobs: [UnownedJob] = []
        var driver: (any FlowLoopDriver)?
        /// Whether the loop thread is (about to be) blocked in a driver's turn.
        var driverMayBeWaiting = false
        var started = false
    }

    private let state = Mutex(State())
    /// Guards nothing but the sleep of a driverless loop.
    private let sleepLock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let sleepCondition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private let loopThread = Atomic<UInt>(0)

    private init() {
        pthread_mutex_init(sleepLock, nil)
        pthread_cond_init(sleepCondition, nil)
    }

    /// Whether the caller runs on the loop thread.
    public var isOnLoopThread: Bool {
        let thread = loopThread.load(ordering: .acquiring)
        return thread != 0 && UInt(bitPattern: Int(bitPattern: pthread_self())) == thread
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let (startThread, driver, driverMayBeWaiting) = state.withLock { state in
            state.jobs.append(job)
            let start = !state.started
            state.started = true
            defer { state.driverMayBeWaiting = false }
            return (start, state.driver, state.driverMayBeWaiting)
        }
        if startThread { spawnThread() }
        if let driver {
            if driverMayBeWaiting { driver.wake() }
        } else {
            wakeSleeper()
        }
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    public func checkIsolated() {
        precondition(isOnLoopThread, "not on the FlowActor loop thread")
    }

    public func isIsolatingCurrentContext() -> Bool? {
        isOnLoopThread
    }

    /// Makes `driver` share the loop thread from its next turn on; one driver at a time.
    /// - Returns: false when another driver is installed.
    public func install(_ driver: any FlowLoopDriver) -> Bool {
        let (installed, start) = state.withLock { state -> (Bool, Bool) in
            guard state.driver == nil else { return (false, false) }
            state.driver = driver
            let start = !state.started
            state.started = true
            return (true, start)
        }
        if start { spawnThread() }
        wakeSleeper()
        return installed
    }

    /// Stops giving `driver` turns after its current one.
    public func uninstall(_ driver: any FlowLoopDriver) {
        state.withLock { state in
            if state.driver === driver {
                state.driver = nil
                state.driverMayBeWaiting = false
            }
        }
        driver.wake()
    }

    private func wakeSleeper() {
        pthread_mutex_lock(sleepLock)
        pthread_cond_signal(sleepCondition)
        pthread_mutex_unlock(sleepLock)
    }

    private func spawnThread() {
        let box = Unmanaged.passRetained(self)
        var thread = pthread_t()
        let result = pthread_create(
            &thread, nil,
            { argument in
                let loop = Unmanaged<FlowLoop>.fromOpaque(argument!).takeRetainedValue()
                loop.run()
                return nil
            }, box.toOpaque())
        precondition(result == 0, "cannot start the FlowActor loop thread: error \(result)")
    }

    private func run() {
        loopThread.store(UInt(bitPattern: Int(bitPattern: pthread_self())), ordering: .releasing)
        let executor = asUnownedSerialExecutor()
        var batch: [UnownedJob] = []
        while true {
            let driver = state.withLock { state -> (any FlowLoopDriver)? in
                swap(&batch, &state.jobs)
                return state.driver
            }
            for job in batch { job.runSynchronously(on: executor) }
            let ranJobs = !batch.isEmpty
            batch.removeAll(keepingCapacity: true)
            if let driver {
                let mayWait = state.withLock { state -> Bool in
                    state.driverMayBeWaiting = state.jobs.isEmpty && state.driver === driver
                    return state.driverMayBeWaiting
                }
                driver.turn(mayWait: mayWait)
                state.withLock { $0.driverMayBeWaiting = false }
            } else if !ranJobs {
                pthread_mutex_lock(sleepLock)
                if state.withLock({ $0.jobs.isEmpty && $0.driver == nil }) {
                    pthread_cond_wait(sleepCondition, sleepLock)
                }
                pthread_mutex_unlock(sleepLock)
            }
        }
    }
}
