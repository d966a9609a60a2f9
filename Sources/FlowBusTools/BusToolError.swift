/// Why a ``BusPlayer`` (or a ``StopRequest``) could not go on, with what to do about it.
///
/// ``code`` says what went wrong, so that a caller can match it; ``description`` says it for a
/// person, naming the endpoint and the command that fixes it. New codes do not break callers.
public struct BusToolError: Error, CustomStringConvertible, Sendable, Hashable {
    /// What went wrong.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String {
            case unservedReactor = "unserved-reactor"
            case flowdNotAnswering = "flowd-not-answering"
            case notAcknowledged = "not-acknowledged"
            case reactorStepMissing = "reactor-step-missing"
            case resources
        }

        private let value: Value

        private init(_ value: Value) {
            self.value = value
        }

        /// An action for a reactor that no reactor host of the config serves.
        public static let unservedReactor = Code(.unservedReactor)
        /// flowd does not answer on its control or events endpoint.
        public static let flowdNotAnswering = Code(.flowdNotAnswering)
        /// flowd or a reactor host did not acknowledge what was sent within the timeout.
        public static let notAcknowledged = Code(.notAcknowledged)
        /// flowd did not re-publish, from a live reactor host, a step a reactor published in the
        /// recording.
        public static let reactorStepMissing = Code(.reactorStepMissing)
        /// The process ran out of something the tool needs (e.g. file descriptors).
        public static let resources = Code(.resources)

        public var description: String { value.rawValue }
    }

    /// What went wrong, to match.
    public var code: Code
    /// What went wrong and what to do, in words.
    public var description: String

    package init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}
