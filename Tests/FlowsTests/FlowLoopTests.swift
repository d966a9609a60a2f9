import Dispatch
import Flows
import Synchronization
import Testing

/// A driver that counts its turns and checks each runs on the loop, isolated to FlowActor.
private final class CountingDriver: FlowLoopDriver {
    let turns = Atomic<Int>(0)
    let turnsOffTheLoop = Atomic<Int>(0)
    private let wakeUp = DispatchSemaphore(value: 0)

    func turn(mayWait: Bool) {
        if !FlowLoop.shared.isOnLoopThread { turnsOffTheLoop.add(1, ordering: .relaxed) }
        // Traps unless the turn really has the actor's isolation.
        FlowActor.assumeIsolated { _ = turns.add(1, ordering: .relaxed) }
        if mayWait { _ = wakeUp.wait(timeout: .now() + .milliseconds(50)) }
    }

    func wake() {
        wakeUp.signal()
    }
}

@FlowActor
private var jobsRun = 0

@Suite("FlowLoop: the FlowActor executor shared with a daemon's I/O", .serialized)
struct FlowLoopTests {
    @Test("A driver's turns run on the loop thread, isolated to FlowActor, and jobs keep running beside them")
    func driverSharesTheLoop() async {
        let driver = CountingDriver()
        #expect(FlowLoop.shared.install(driver))
        #expect(!FlowLoop.shared.install(CountingDriver()), "one driver at a time")
        for _ in 0..<200 {
            await Task { @FlowActor in jobsRun += 1 }.value
        }
        let onLoop = await Task { @FlowActor in FlowLoop.shared.isOnLoopThread }.value
        FlowLoop.shared.uninstall(driver)
        #expect(await jobsRun >= 200, "jobs woke the driver's wait and ran")
        #expect(onLoop, "FlowActor jobs run on the loop thread")
        #expect(driver.turns.load(ordering: .relaxed) > 0)
        #expect(driver.turnsOffTheLoop.load(ordering: .relaxed) == 0)
        #expect(!FlowLoop.shared.isOnLoopThread, "a test task is not on the loop")
    }

    @Test("Without a driver the loop sleeps and wakes for the next job", .timeLimit(.minutes(1)))
    func sleepsWithoutDriver() async throws {
        for _ in 0..<20 {
            try await Task.sleep(for: .milliseconds(2))
            #expect(await Task { @FlowActor in FlowLoop.shared.isOnLoopThread }.value)
        }
    }
}
