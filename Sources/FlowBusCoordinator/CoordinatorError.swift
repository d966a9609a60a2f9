/// Why a coordinator cannot run as asked, with what to do about it.
///
/// ``code`` says what went wrong, so that a caller can match it; ``description`` says it for a
/// person. New codes do not break callers.
public struct CoordinatorError: Error, CustomStringConvertible, Sendable, Hashable {
    /// What went wrong.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String {
            case notRestorable = "not-restorable"
            case alreadyRunning = "already-running"
            case backendMissing = "backend-missing"
        }

        private let value: Value

        private init(_ value: Value) {
            self.value = value
        }

        /// The journal has a checkpoint, and this coordinator's flows cannot be built by name to
        /// restore it (Swift flows without a flow factory).
        public static let notRestorable = Code(.notRestorable)
        /// Another coordinator already runs in this process (one per process: the engine has one thread).
        public static let alreadyRunning = Code(.alreadyRunning)
        /// The config names a journal backend this build does not have (PostgreSQL without its trait).
        public static let backendMissing = Code(.backendMissing)

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
