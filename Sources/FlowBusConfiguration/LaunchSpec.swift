import FlowBusClient
import FlowBusWire
import Foundation

/// One process of a topology's `launch:` section, started by `flowctl launch FILE`.
///
/// ```yaml
/// launch:
///   - name: flowd
///     command: [flowd, --config, "${FLOWBUS_CONFIG:-config/demo.yaml}"]
///     ready: { control: true }
///     restart: { maxRetries: 3, backoffMs: 200 }
///   - name: reactors
///     command: [reactor-host, --config, "${FLOWBUS_CONFIG:-config/demo.yaml}", --host, demo]
///     ready: { heartbeat: demo }
///     after: [flowd]
/// ```
public struct LaunchSpec: Codable, Sendable, Hashable {
    /// The name its output lines are prefixed with, and `after` refers to.
    public var name: String
    /// The executable and its arguments. A bare name is looked up beside `flowctl`, then in `PATH`.
    public var command: [String]
    /// How to tell it is ready; nil: started is ready (a one-shot: finished with status 0 is ready).
    public var ready: Readiness?
    /// How to restart it when it exits; nil: it is not restarted (an exit stops everything).
    public var restart: RestartPolicy?
    /// Processes that must be ready before this one starts.
    public var after: [String]
    /// It exits with status 0 when done, and is not restarted.
    public var oneShot: Bool
    /// Environment variables added to the launcher's own for this process.
    public var env: [String: String]
    /// Started only when asked for by name (`flowctl launch --with NAME`): a demo journey, a load
    /// generator, a tool that is not part of the topology itself.
    public var optional: Bool

    public init(
        name: String, command: [String], ready: Readiness? = nil, restart: RestartPolicy? = nil, after: [String] = [],
        oneShot: Bool = false, env: [String: String] = [:], optional: Bool = false
    ) {
        self.name = name
        self.command = command
        self.ready = ready
        self.restart = restart
        self.after = after
        self.oneShot = oneShot
        self.env = env
        self.optional = optional
    }

    package enum CodingKeys: String, CodingKey {
        case name, command, ready, restart, after, oneShot, env, optional
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decode(String.self, forKey: .name)
        command = try container.decode([String].self, forKey: .command)
        ready = try container.decodeIfPresent(Readiness.self, forKey: .ready)
        restart = try container.decodeIfPresent(RestartPolicy.self, forKey: .restart)
        after = try container.decodeIfPresent([String].self, forKey: .after) ?? []
        oneShot = try container.decodeIfPresent(Bool.self, forKey: .oneShot) ?? false
        env = try container.decodeIfPresent([String: String].self, forKey: .env) ?? [:]
        optional = try container.decodeIfPresent(Bool.self, forKey: .optional) ?? false
    }

    /// How the launcher tells a process is ready: exactly one kind, and how long to wait for it.
    public struct Readiness: Codable, Sendable, Hashable {
        /// flowd answers a status request on the topology's control endpoint.
        public var control: Bool?
        /// The reactor host of this name (under `reactors:`) sends a heartbeat on its states endpoint.
        public var heartbeat: String?
        /// A line of the process's output matches this regular expression.
        public var logLine: String?
        /// This many milliseconds after it started.
        public var delayMs: Int?
        /// How long to wait before the process is taken as failed (killed, then restarted or given up on).
        public var timeoutMs: Int?

        public init(
            control: Bool? = nil, heartbeat: String? = nil, logLine: String? = nil, delayMs: Int? = nil,
            timeoutMs: Int? = nil
        ) {
            self.control = control
            self.heartbeat = heartbeat
            self.logLine = logLine
            self.delayMs = delayMs
            self.timeoutMs = timeoutMs
        }

        /// The kinds set, for validation and messages.
        package var kinds: [String] {
            [
                control == true ? "control" : nil, heartbeat.map { "heartbeat \($0)" },
                logLine.map { "log line /\($0)/" },
                delayMs.map { "\($0) ms delay" },
            ].compactMap { $0 }
        }
    }

    /// Restarts with exponential back-off: `backoffMs`, doubled each retry up to `maxBackoffMs`.
    public struct RestartPolicy: Codable, Sendable, Hashable {
        /// Restarts before giving up (and stopping everything). The count starts again once the
        /// process has stayed up for `resetAfterMs`.
        public var maxRetries: Int
        /// The first delay before a restart.
        public var backoffMs: Int
        /// The longest delay.
        public var maxBackoffMs: Int
        /// How long a process must stay up for its retries to be forgotten.
        public var resetAfterMs: Int

        public init(maxRetries: Int = 3, backoffMs: Int = 200, maxBackoffMs: Int = 10_000, resetAfterMs: Int = 10_000) {
            self.maxRetries = maxRetries
            self.backoffMs = backoffMs
            self.maxBackoffMs = maxBackoffMs
            self.resetAfterMs = resetAfterMs
        }

        package enum CodingKeys: String, CodingKey {
            case maxRetries, backoffMs, maxBackoffMs, resetAfterMs
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let defaults = RestartPolicy()
            maxRetries = try container.decodeIfPresent(Int.self, forKey: .maxRetries) ?? defaults.maxRetries
            backoffMs = try container.decodeIfPresent(Int.self, forKey: .backoffMs) ?? defaults.backoffMs
            maxBackoffMs = try container.decodeIfPresent(Int.self, forKey: .maxBackoffMs) ?? defaults.maxBackoffMs
            resetAfterMs = try container.decodeIfPresent(Int.self, forKey: .resetAfterMs) ?? defaults.resetAfterMs
        }

        /// The delay before retry `attempt` (1-based).
        public func delay(forAttempt attempt: Int) -> Duration {
            var milliseconds = max(0, backoffMs)
            for _ in 1..<max(1, attempt) where milliseconds < maxBackoffMs {
                milliseconds *= 2
            }
            return .milliseconds(min(milliseconds, max(maxBackoffMs, backoffMs)))
        }
    }
}
