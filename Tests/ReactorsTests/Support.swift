import Reactors
import Synchronization

/// A gate a task can wait at until the test opens it. Opening before waiting lets the waiter
/// through at once; a cancelled waiter throws `CancellationError`. No clocks, no sleeps.
final class Gate: Sendable {
    private struct Storage {
        var isOpen = false
        var nextID = 0
        var waiters: [Int: CheckedContinuation<Void, any Error>] = [:]
        var cancelledIDs: Set<Int> = []
    }

    private let storage = Mutex(Storage())

    func open() {
        let waiters = storage.withLock { storage in
            storage.isOpen = true
            defer { storage.waiters.removeAll() }
            return Array(storage.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    var isOpen: Bool { storage.withLock(\.isOpen) }

    func wait() async throws {
        let id = storage.withLock { storage in
            defer { storage.nextID += 1 }
            return storage.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (waiter: CheckedContinuation<Void, any Error>) in
                enum Outcome { case wait, pass, cancelled }
                let outcome = storage.withLock { storage -> Outcome in
                    if storage.isOpen { return .pass }
                    if storage.cancelledIDs.remove(id) != nil { return .cancelled }
                    storage.waiters[id] = waiter
                    return .wait
                }
                switch outcome {
                case .wait: break
                case .pass: waiter.resume()
                case .cancelled: waiter.resume(throwing: CancellationError())
                }
            }
        } onCancel: {
            let waiter = storage.withLock { storage -> CheckedContinuation<Void, any Error>? in
                if let waiter = storage.waiters.removeValue(forKey: id) { return waiter }
                storage.cancelledIDs.insert(id)
                return nil
            }
            waiter?.resume(throwing: CancellationError())
        }
    }

    /// Waits, ignoring cancellation (for streams that keep sending after being cancelled).
    func waitIgnoringCancellation() async {
        await Task {
            try? await self.wait()
        }.value
    }
}

/// A thread-safe list the tests append to from observers and tasks.
final class Log<Element: Sendable>: Sendable {
    private let storage = Mutex<[Element]>([])

    func append(_ element: Element) { storage.withLock { $0.append(element) } }

    var all: [Element] { storage.withLock { $0 } }
}

/// Takes the next `count` elements of an iterator (suspends until they arrive).
func take<I: AsyncIteratorProtocol>(
    _ count: Int, from iterator: inout I
) async throws
    -> [I.Element]
{
    var elements: [I.Element] = []
    while elements.count < count, let element = try await iterator.next() {
        elements.append(element)
    }
    return elements
}

/// A reactor whose actions are the mutations to run: handy to script streams in tests.
/// The state is the list of every mutation reduced so far.
struct ScriptReactor: Reactor {
    typealias Action = Mutations<String>
    typealias Mutation = String
    typealias State = [String]

    var initialState: [String] { [] }

    func mutate(action: Mutations<String>) -> Mutations<String> { action }

    func reduce(state: [String], mutation: String) -> [String] { state + [mutation] }
}

struct Boom: Error, Equatable {}
