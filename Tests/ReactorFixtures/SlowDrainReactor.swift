import Dispatch
import Foundation
import Reactors

/// A reactor whose `slow` action's mutation comes from a stream and is reduced slowly, on that
/// stream's thread: while it is, another thread's action is queued behind it.
public final class SlowDrainReactor: Reactor {
    public enum Action: String, Sendable, Codable { case slow, bump }
    public enum Mutation: Sendable { case slow, bump }
    public struct State: Sendable, Codable, Equatable {
        public var slow = 0
        public var bumps = 0

        public init(slow: Int = 0, bumps: Int = 0) {
            self.slow = slow
            self.bumps = bumps
        }
    }

    public let initialState = State()
    /// Signalled as the slow mutation's reduction starts.
    public let reducingSlow = DispatchSemaphore(value: 0)

    public init() {}

    public func mutate(action: Action) -> Mutations<Mutation> {
        switch action {
        case .slow: .run { send in send(.slow) }
        case .bump: .just(.bump)
        }
    }

    public func reduce(state: State, mutation: Mutation) -> State {
        var state = state
        switch mutation {
        case .slow:
            reducingSlow.signal()
            Thread.sleep(forTimeInterval: 0.2)
            state.slow += 1
        case .bump:
            state.bumps += 1
        }
        return state
    }
}
