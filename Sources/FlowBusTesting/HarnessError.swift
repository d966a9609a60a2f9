/// A harness failure, with what to do about it.
///
/// ``code`` says what went wrong, so that a caller can match it (`error.code == .unavailable`, to
/// skip a test on a machine without PostgreSQL); ``description`` says it for a person, with the
/// fix and the last output of the processes concerned. New codes do not break callers.
///
/// A process of the topology that dies is a ``ProcessDied``, a refused step or action a
/// ``Refused``, an assertion that does not hold an ``ExpectationFailure``.
public struct HarnessError: Error, CustomStringConvertible, Sendable, Hashable {
    /// What went wrong.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String {
            case unavailable
            case notBuilt = "not-built"
            case cannotStart = "cannot-start"
            case commandFailed = "command-failed"
            case exited
            case timedOut = "timed-out"
            case invalidConfig = "invalid-config"
            case notDeclared = "not-declared"
            case invalidArgument = "invalid-argument"
            case unexpected
            case failed
        }

        private let value: Value

        private init(_ value: Value) {
            self.value = value
        }

        /// This machine lacks something the test needs: a tool (PostgreSQL, `ip`), the privileges
        /// to build a test network, or room for a temporary directory or an output file.
        public static let unavailable = Code(.unavailable)
        /// An executable to start is neither built (`swift build`, or `FLOWBUS_BIN_DIR`) nor in `PATH`.
        public static let notBuilt = Code(.notBuilt)
        /// A process could not be started (the system refused to run the executable).
        public static let cannotStart = Code(.cannotStart)
        /// A command run to completion (PostgreSQL's tools, `flowctl`) exited with a failure.
        public static let commandFailed = Code(.commandFailed)
        /// A process exited before doing what the test waited for (a topology's own processes
        /// report that as ``ProcessDied``).
        public static let exited = Code(.exited)
        /// What the test waited for did not happen in time: readiness, an acknowledgement, a
        /// heartbeat, a snapshot, an exit, a line of output.
        public static let timedOut = Code(.timedOut)
        /// The topology's config cannot be read, parsed or written, or its `launch:` section
        /// cannot be started as written.
        public static let invalidConfig = Code(.invalidConfig)
        /// A name the test or the config gives (a reactor host, a reactor, a `launch:` entry) is
        /// not declared by the topology.
        public static let notDeclared = Code(.notDeclared)
        /// An argument the test passed cannot be used (a regular expression that does not compile).
        public static let invalidArgument = Code(.invalidArgument)
        /// Something arrived that is not what the test can read (a snapshot that does not decode
        /// as the state type, an answer of another form).
        public static let unexpected = Code(.unexpected)
        /// A test's own step failed, for a reason its description gives.
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
