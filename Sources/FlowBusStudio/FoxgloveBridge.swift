#if Studio
import FlowBusWire

/// The Foxglove WebSocket protocol (`foxglove.websocket.v1`) as the studio speaks it, without
/// I/O: the channels it advertises, the frames it sends, and the client messages it reads.
///
/// Channels are JSON-encoded, each message being a ``StudioEvent`` object: `/flowbus/steps`
/// (steps and deep links), `/flowbus/navigation` (will/didNavigate), `/flowbus/commands`,
/// `/flowbus/diagnostics`, `/flowbus/actions`, and `/flowbus/states/<reactorId>` for each reactor
/// heard. With publishing allowed, a client may advertise `/flowbus/step`
/// (`{"stepper", "step", "params"}`), `/flowbus/deeplink` (`{"step", "params"}`) and
/// `/flowbus/action` (`{"reactor", "action", "params"}`) and send messages on them.
public struct FoxgloveBridge: Sendable {
    /// The WebSocket subprotocol.
    public static let subprotocol = "foxglove.websocket.v1"
    /// Topics a client may publish on.
    public static let publishTopics = ["/flowbus/step", "/flowbus/deeplink", "/flowbus/action"]

    /// A server channel.
    public struct Channel: Sendable, Hashable {
        public var id: Int
        public var topic: String
    }

    public private(set) var channels: [Channel] = []
    /// Subscription id → channel id.
    public private(set) var subscriptions: [Int: Int] = [:]
    /// Client channel id → topic.
    public private(set) var clientChannels: [Int: String] = [:]
    private var reactorChannels: [String: Int] = [:]

    public init() {
        for topic in [
            "/flowbus/steps", "/flowbus/navigation", "/flowbus/commands", "/flowbus/diagnostics", "/flowbus/actions",
        ] {
            channels.append(Channel(id: channels.count + 1, topic: topic))
        }
    }

    /// The Server Info message.
    public static func serverInfo(allowPublish: Bool, sessionID: String) -> String {
        var map: WireParams = [
            "op": "serverInfo", "name": "flowbus-studio", "capabilities": .list(allowPublish ? ["clientPublish"] : []),
            "metadata": ["protocol": "flowbus/1"], "sessionId": .string(sessionID),
        ]
        if allowPublish { map["supportedEncodings"] = ["json"] }
        return json(map)
    }

    /// An Advertise message for `channels`.
    public static func advertise(_ channels: [Channel]) -> String {
        json([
            "op": "advertise",
            "channels": .list(
                channels.map { channel in
                    .map([
                        "id": .int(Int64(channel.id)), "topic": .string(channel.topic), "encoding": "json",
                        "schemaName": .string(
                            channel.topic.hasPrefix("/flowbus/states/") ? "flowbus.State" : "flowbus.Event"),
                        "schema": "{\"type\":\"object\"}", "schemaEncoding": "jsonschema",
                    ])
                }),
        ])
    }

    /// A Status message (0 info, 1 warning, 2 error).
    public static func status(level: Int, _ message: String) -> String {
        json(["op": "status", "level": .int(Int64(level)), "message": .string(message)])
    }

    /// The channel an event of `kind` goes to, creating the one of a reactor seen for the first
    /// time (returned in `new`, to advertise).
    public mutating func channel(kind: String, reactor: String?) -> (id: Int?, new: Channel?) {
        switch kind {
        case "step", "deepLink": return (1, nil)
        case "willNavigate", "didNavigate": return (2, nil)
        case "command": return (3, nil)
        case "diagnostic": return (4, nil)
        case "action": return (5, nil)
        case "state", "snapshot":
            guard let reactor else { return (nil, nil) }
            if let id = reactorChannels[reactor] { return (id, nil) }
            let channel = Channel(id: channels.count + 1, topic: "/flowbus/states/\(reactor)")
            channels.append(channel)
            reactorChannels[reactor] = channel.id
            return (channel.id, channel)
        default: return (nil, nil)
        }
    }

    /// The subscription ids of a client that want messages of channel `channelID`.
    public func subscribers(of channelID: Int) -> [Int] {
        subscriptions.filter { $0.value == channelID }.map(\.key).sorted()
    }

    /// A Message Data frame: opcode 1, subscription id (u32 LE), receive time in ns (u64 LE), payload.
    public static func messageData(subscription: Int, timestampNanoseconds: UInt64, payload: String) -> [UInt8] {
        var bytes: [UInt8] = [0x01]
        withUnsafeBytes(of: UInt32(truncatingIfNeeded: subscription).littleEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: timestampNanoseconds.littleEndian) { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: payload.utf8)
        return bytes
    }

    /// What a client asked for.
    public enum ClientRequest: Sendable, Hashable {
        /// Nothing to answer (subscribe, unsubscribe, advertise handled in place).
        case handled
        /// A message to publish on the bus.
        case publish(StudioDriver.Request)
        /// A problem to report with a Status message.
        case problem(String)
    }

    /// Reads a text (JSON) message from a client.
    public mutating func handle(text: String, allowPublish: Bool) -> ClientRequest {
        guard let value = try? WireJSON.decode(text), let map = value.mapValue, let op = map["op"]?.stringValue else {
            return .problem("not a JSON object with an op")
        }
        switch op {
        case "subscribe":
            for item in map["subscriptions"]?.listValue ?? [] {
                guard let id = item.mapValue?["id"]?.intValue, let channel = item.mapValue?["channelId"]?.intValue
                else { continue }
                guard channels.contains(where: { $0.id == Int(channel) }) else {
                    return .problem("unknown channel \(channel)")
                }
                subscriptions[Int(id)] = Int(channel)
            }
            return .handled
        case "unsubscribe":
            for id in map["subscriptionIds"]?.listValue ?? [] {
                if let id = id.intValue { subscriptions[Int(id)] = nil }
            }
            return .handled
        case "advertise":
            guard allowPublish else { return .problem("publishing is off: start the studio with --allow-publish") }
            for item in map["channels"]?.listValue ?? [] {
                guard let channel = item.mapValue, let id = channel["id"]?.intValue,
                    let topic = channel["topic"]?.stringValue
                else { continue }
                guard Self.publishTopics.contains(topic) else {
                    return .problem("cannot publish on \(topic): use one of \(Self.publishTopics)")
                }
                guard channel["encoding"]?.stringValue == "json" else {
                    return .problem("encoding of \(topic) must be json")
                }
                clientChannels[Int(id)] = topic
            }
            return .handled
        case "unadvertise":
            for id in map["channelIds"]?.listValue ?? [] {
                if let id = id.intValue { clientChannels[Int(id)] = nil }
            }
            return .handled
        default:
            return .problem("op \(op) is not supported")
        }
    }

    /// Reads a binary message from a client: Client Message Data (opcode 1, channel id u32 LE, payload).
    public func handle(binary bytes: [UInt8], allowPublish: Bool) -> ClientRequest {
        guard bytes.count >= 5, bytes[0] == 0x01 else { return .problem("unsupported binary opcode") }
        guard allowPublish else { return .problem("publishing is off: start the studio with --allow-publish") }
        let channelID = Int(UInt32(bytes[1]) | UInt32(bytes[2]) << 8 | UInt32(bytes[3]) << 16 | UInt32(bytes[4]) << 24)
        guard let topic = clientChannels[channelID] else { return .problem("channel \(channelID) was not advertised") }
        guard let payload = try? WireJSON.decode(Array(bytes[5...])).mapValue else {
            return .problem("payload on \(topic) is not a JSON object")
        }
        return Self.request(topic: topic, payload)
    }

    /// The bus request a published payload stands for.
    public static func request(topic: String, _ payload: WireParams) -> ClientRequest {
        let params = payload["params"]?.mapValue ?? [:]
        switch topic {
        case "/flowbus/step":
            guard let stepper = payload["stepper"]?.stringValue, let step = payload["step"]?.stringValue else {
                return .problem("a step needs stepper and step")
            }
            return .publish(.step(stepper: stepper, name: step, params: params))
        case "/flowbus/deeplink":
            guard let step = payload["step"]?.stringValue else { return .problem("a deep link needs step") }
            return .publish(.deepLink(name: step, params: params))
        case "/flowbus/action":
            guard let reactor = payload["reactor"]?.stringValue, let action = payload["action"]?.stringValue else {
                return .problem("an action needs reactor and action")
            }
            return .publish(.action(reactor: reactor, name: action, params: params))
        default:
            return .problem("cannot publish on \(topic)")
        }
    }

    static func json(_ map: WireParams) -> String {
        (try? WireJSON.string(.map(map))) ?? "{}"
    }
}
#endif
