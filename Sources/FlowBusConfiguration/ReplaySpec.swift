extension FlowBusConfig {
    /// `replay: { retain: 100000, retainSeconds: 0 }`: the events flowd keeps so that a subscriber
    /// resumes from the last one it has (PROTOCOL.md §4.6).
    ///
    /// flowd keeps the newest `retain` events (and, with `retainSeconds` above 0, none older than
    /// that) in memory and, with a journal, in the journal too, committed with the steps that
    /// caused them, so that a restarted or another instance replays them. `retain: 0` keeps none:
    /// events are then not numbered and a replay request is answered `gone`.
    public struct Replay: Codable, Sendable, Hashable {
        public var retain: Int
        public var retainSeconds: Double

        public init(retain: Int = 100_000, retainSeconds: Double = 0) {
            self.retain = retain
            self.retainSeconds = retainSeconds
        }

        package enum CodingKeys: String, CodingKey {
            case retain, retainSeconds
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let defaults = Replay()
            retain = try container.decodeIfPresent(Int.self, forKey: .retain) ?? defaults.retain
            retainSeconds = try container.decodeIfPresent(Double.self, forKey: .retainSeconds) ?? defaults.retainSeconds
            if retain < 0 {
                throw DecodingError.dataCorruptedError(
                    forKey: .retain, in: container,
                    debugDescription: "replay.retain is a number of events, 0 or more (0: none kept, no replay)")
            }
            if retainSeconds < 0 || !retainSeconds.isFinite {
                throw DecodingError.dataCorruptedError(
                    forKey: .retainSeconds, in: container,
                    debugDescription: "replay.retainSeconds is 0 (no age limit) or a number of seconds")
            }
        }

        /// Whether events are kept at all.
        public var isOn: Bool { retain > 0 }
    }
}
