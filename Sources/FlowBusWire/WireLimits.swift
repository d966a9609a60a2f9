/// Size limits a decoder enforces. The defaults are the protocol's maxima; a runtime may lower
/// them (never raise them above the protocol's own caps: 255 for topics, names and sources).
public struct WireLimits: Sendable, Hashable {
    /// Largest topic in bytes (protocol cap 255).
    public var maxTopicBytes: Int
    /// Largest step, action, deep link, flow or reason name in bytes (protocol cap 255).
    public var maxNameBytes: Int
    /// Largest source id in bytes (protocol cap 255).
    public var maxSourceBytes: Int
    /// Largest frame in bytes (default 1 MiB; set `ZMQ_MAXMSGSIZE` on sockets to match).
    public var maxFrameBytes: Int
    /// Largest number of frames in one message (default 8).
    public var maxFrames: Int
    /// Deepest nesting of lists and maps in a value (default 32).
    public var maxDepth: Int

    /// Creates limits; every parameter defaults to the protocol's maximum.
    public init(
        maxTopicBytes: Int = 255, maxNameBytes: Int = 255, maxSourceBytes: Int = 255,
        maxFrameBytes: Int = 1 << 20, maxFrames: Int = 8, maxDepth: Int = 32
    ) {
        self.maxTopicBytes = min(maxTopicBytes, 255)
        self.maxNameBytes = min(maxNameBytes, 255)
        self.maxSourceBytes = min(maxSourceBytes, 255)
        self.maxFrameBytes = maxFrameBytes
        self.maxFrames = maxFrames
        self.maxDepth = maxDepth
    }

    /// The protocol v1 defaults.
    public static let `default` = WireLimits()
}
