/// Topics: frame 0 of every message, `<prefix>/<id>`, so that ZeroMQ prefix subscriptions
/// select messages by kind and id.
///
/// A subscription is a byte prefix: subscribing to `state/counter` also matches
/// `state/counter2`. Compare ``parse(_:)``'s id exactly to select one id, or subscribe to
/// `state/` plus a family prefix ending in `/` (ids may contain `/`, e.g. `movie/42`).
public enum Topic {
    /// The topic prefixes of protocol v1 (without the separating `/`).
    public enum Prefix: String, Sendable, Hashable, CaseIterable {
        /// `step/<stepperId>`
        case step = "step"
        /// `deeplink/<stepName>`
        case deepLink = "deeplink"
        /// `action/<reactorId>`
        case action = "action"
        /// `state/<reactorId>`: states and snapshots.
        case state = "state"
        /// `snapshot/<reactorId>`: snapshot requests.
        case snapshot = "snapshot"
        /// `nav/will/<flowName>`
        case navWill = "nav/will"
        /// `nav/did/<flowName>`
        case navDid = "nav/did"
        /// `cmd/<flowName>`: navigation commands for renderers.
        case command = "cmd"
        /// `diag/<reasonCode>`
        case diagnostic = "diag"
        /// `ack/<sourceId>`
        case ack = "ack"
        /// `hb/<sourceId>`
        case heartbeat = "hb"
        /// `status`, with no id.
        case status = "status"
        /// `present/<presentableId>`
        case present = "present"
        /// `replay`, with no id: replay requests and replies.
        case replay = "replay"

        /// Whether topics with this prefix carry an id (all but `status` and `replay`).
        public var hasID: Bool { self != .status && self != .replay }

        /// The subscription string selecting every topic with this prefix, e.g. `"state/"`.
        public var subscription: String { hasID ? rawValue + "/" : rawValue }
    }

    /// `step/<stepperId>`
    public static func step(_ stepperID: String) -> String { "step/" + stepperID }
    /// `deeplink/<stepName>`
    public static func deepLink(_ stepName: String) -> String { "deeplink/" + stepName }
    /// `action/<reactorId>`
    public static func action(_ reactorID: String) -> String { "action/" + reactorID }
    /// `state/<reactorId>`, for states and snapshots.
    public static func state(_ reactorID: String) -> String { "state/" + reactorID }
    /// `snapshot/<reactorId>`, for snapshot requests.
    public static func snapshot(_ reactorID: String) -> String { "snapshot/" + reactorID }
    /// `nav/will/<flowName>`
    public static func willNavigate(_ flowName: String) -> String { "nav/will/" + flowName }
    /// `nav/did/<flowName>`
    public static func didNavigate(_ flowName: String) -> String { "nav/did/" + flowName }
    /// `cmd/<flowName>`
    public static func command(_ flowName: String) -> String { "cmd/" + flowName }
    /// `diag/<reasonCode>`
    public static func diagnostic(_ reason: DiagnosticReason) -> String { "diag/" + reason.rawValue }
    /// `ack/<sourceId>`
    public static func ack(_ sourceID: String) -> String { "ack/" + sourceID }
    /// `hb/<sourceId>`
    public static func heartbeat(_ sourceID: String) -> String { "hb/" + sourceID }
    /// `status`
    public static let status = "status"
    /// `replay`
    public static let replay = "replay"
    /// `present/<presentableId>`
    public static func present(_ presentableID: String) -> String { "present/" + presentableID }

    /// Builds `<prefix>/<id>` (or `status`, `replay`).
    public static func make(_ prefix: Prefix, id: String) -> String {
        prefix.hasID ? prefix.rawValue + "/" + id : prefix.rawValue
    }

    /// Splits a topic into its prefix and id, or returns `nil` if the prefix is unknown or the
    /// id is empty (`status` alone has an empty id).
    public static func parse(_ topic: String) -> (prefix: Prefix, id: Substring)? {
        guard let (prefix, idStart) = parsePrefix(topic.utf8) else { return nil }
        return (prefix, topic[idStart...])
    }

    /// The prefix of a topic and where its id starts, matched on UTF-8 bytes.
    static func parsePrefix(_ utf8: String.UTF8View) -> (Prefix, String.Index)? {
        let first = utf8.first
        // Order matters only for nav/will and nav/did, which share "nav/".
        for prefix in candidates(first) {
            var index = utf8.startIndex
            var matched = true
            for byte in prefix.rawValue.utf8 {
                guard index != utf8.endIndex, utf8[index] == byte else {
                    matched = false
                    break
                }
                index = utf8.index(after: index)
            }
            guard matched else { continue }
            if !prefix.hasID {
                if index == utf8.endIndex { return (prefix, index) }
                continue
            }
            guard index != utf8.endIndex, utf8[index] == UInt8(ascii: "/") else { continue }
            index = utf8.index(after: index)
            guard index != utf8.endIndex else { return nil }
            return (prefix, index)
        }
        return nil
    }

    private static let sPrefixes: [Prefix] = [.step, .state, .snapshot, .status]
    private static let dPrefixes: [Prefix] = [.deepLink, .diagnostic]
    private static let aPrefixes: [Prefix] = [.action, .ack]
    private static let nPrefixes: [Prefix] = [.navWill, .navDid]
    private static let cPrefixes: [Prefix] = [.command]
    private static let hPrefixes: [Prefix] = [.heartbeat]
    private static let pPrefixes: [Prefix] = [.present]
    private static let rPrefixes: [Prefix] = [.replay]
    private static let noPrefixes: [Prefix] = []

    @inline(__always)
    static func candidates(_ first: UInt8?) -> [Prefix] {
        switch first {
        case UInt8(ascii: "s"): return sPrefixes
        case UInt8(ascii: "d"): return dPrefixes
        case UInt8(ascii: "a"): return aPrefixes
        case UInt8(ascii: "n"): return nPrefixes
        case UInt8(ascii: "c"): return cPrefixes
        case UInt8(ascii: "h"): return hPrefixes
        case UInt8(ascii: "p"): return pPrefixes
        case UInt8(ascii: "r"): return rPrefixes
        default: return noPrefixes
        }
    }
}
