/// Why a client call failed, with what to do about it.
///
/// ``code`` says what went wrong, so that a caller can match it (`error.code == .noAnswer`);
/// ``description`` says it for a person, naming the endpoint and the fix. New codes do not break
/// callers.
public struct ClientError: Error, CustomStringConvertible, Sendable, Hashable {
    /// What went wrong.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String {
            case noAnswer = "no-answer"
            case refused
            case unexpectedReply = "unexpected-reply"
            case notBound = "not-bound"
            case unknownReactor = "unknown-reactor"
            case notSent = "not-sent"
            case notRepublished = "not-republished"
            case failed
        }

        private let value: Value

        private init(_ value: Value) {
            self.value = value
        }

        /// The daemon did not answer in time (no heartbeat, no reply): it is down or unreachable.
        public static let noAnswer = Code(.noAnswer)
        /// The daemon refused the request (its diagnostic is in the description).
        public static let refused = Code(.refused)
        /// Something other than the daemon expected answered on the endpoint.
        public static let unexpectedReply = Code(.unexpectedReply)
        /// No flow bound the stepper in time.
        public static let notBound = Code(.notBound)
        /// No reactor host of the topology serves the reactor.
        public static let unknownReactor = Code(.unknownReactor)
        /// What waits for the daemon could not be handed to the socket.
        public static let notSent = Code(.notSent)
        /// flowd acknowledged a message but did not re-publish it in time.
        public static let notRepublished = Code(.notRepublished)
        /// A tool built on the clients could not do what it was asked (its description says why).
        public static let failed = Code(.failed)

        public var description: String { value.rawValue }
    }

    /// What went wrong, to match.
    public var code: Code
    /// What went wrong and what to do, in words.
    public var description: String

    public init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}
