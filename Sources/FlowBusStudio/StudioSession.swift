#if Studio
import FlowBusWire
import Foundation
import HummingbirdWebSocket
import Logging
import NIOCore
import Synchronization

/// One WebSocket connection: a page speaking the studio's JSON messages, or a Foxglove-protocol
/// client. Each drains its queue of the ``StudioHub`` every ``StudioServer/Options/flushInterval``
/// while a second task reads what the other side sends.
///
/// Messages to a page: `hello` (recent events, statuses, latest states, options), `events`
/// (`events`, `dropped`: how many the studio held back for this page, `throttled_total`),
/// `status` (`after`: the last event read before it, `status`: flows and bindings), `reply` to a
/// request (`ref`, `ok`, `text`). From a page: `{"op": "step"|"deeplink"|"action", "ref", …}`.
struct StudioSession: Sendable {
    let hub: StudioHub
    let driver: StudioDriver?
    let options: StudioServer.Options
    let logger: Logger

    func runPage(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        let welcome = hub.connect()
        defer { hub.disconnect(welcome.clientID) }
        var hello = "{\"type\":\"hello\",\"allow_publish\":\(driver != nil),\"events\":["
        hello += welcome.recent.map(\.json).joined(separator: ",")
        hello += "],\"statuses\":[" + welcome.statuses.map { Self.statusJSON($0) }.joined(separator: ",")
        hello +=
            "],\"states\":[" + welcome.states.values.sorted { $0.id < $1.id }.map(\.json).joined(separator: ",") + "]}"
        try await outbound.write(.text(hello))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                while !Task.isCancelled {
                    try await Task.sleep(for: options.flushInterval)
                    let batch = hub.drain(welcome.clientID)
                    if !batch.events.isEmpty || batch.dropped > 0 {
                        let text =
                            "{\"type\":\"events\",\"dropped\":\(batch.dropped),\"throttled_total\":\(hub.throttledTotal),\"events\":["
                            + batch.events.map(\.json).joined(separator: ",") + "]}"
                        try await outbound.write(.text(text))
                    }
                    if let status = batch.status {
                        try await outbound.write(.text("{\"type\":\"status\"," + Self.statusJSON(status).dropFirst()))
                    }
                }
            }
            group.addTask {
                for try await message in inbound.messages(maxSize: 1 << 20) {
                    guard case .text(let text) = message else { continue }
                    let reply = await handlePage(text)
                    try await outbound.write(.text(reply))
                }
            }
            // The connection ends when the page goes: stop the writer too.
            try await group.next()
            group.cancelAll()
        }
    }

    static func statusJSON(_ status: StudioHub.Status) -> String {
        "{\"after\":\(status.afterEvent),\"status\":\(status.json)}"
    }

    private func handlePage(_ text: String) async -> String {
        guard let map = (try? WireJSON.decode(text))?.mapValue, let op = map["op"]?.stringValue else {
            return Self.reply(ref: .null, ok: false, "not a JSON object with an op")
        }
        let ref = map["ref"] ?? .null
        guard let driver else {
            return Self.reply(ref: ref, ok: false, "publishing is off: start the studio with --allow-publish")
        }
        let topic = ["step": "/flowbus/step", "deeplink": "/flowbus/deeplink", "action": "/flowbus/action"][op] ?? op
        switch FoxgloveBridge.request(topic: topic, map) {
        case .publish(let request):
            let outcome = await driver.perform(request)
            return Self.reply(ref: ref, ok: outcome.ok, outcome.text)
        case .problem(let problem):
            return Self.reply(ref: ref, ok: false, problem)
        case .handled:
            return Self.reply(ref: ref, ok: true, "")
        }
    }

    static func reply(ref: WireValue, ok: Bool, _ text: String) -> String {
        (try? WireJSON.string(.map(["type": "reply", "ref": ref, "ok": .bool(ok), "text": .string(text)]))) ?? "{}"
    }

    func runFoxglove(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        let welcome = hub.connect()
        defer { hub.disconnect(welcome.clientID) }
        let bridge = BridgeBox()
        try await outbound.write(
            .text(
                FoxgloveBridge.serverInfo(
                    allowPublish: driver != nil, sessionID: "\(welcome.clientID)-\(UUID().uuidString.prefix(8))")))
        var initial = bridge.withBridge { $0.channels }
        for event in welcome.states.values.sorted(by: { $0.id < $1.id }) {
            if let channel = bridge.withBridge({ $0.channel(kind: event.kind, reactor: event.reactor).new }) {
                initial.append(channel)
            }
        }
        try await outbound.write(.text(FoxgloveBridge.advertise(initial)))
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                while !Task.isCancelled {
                    try await Task.sleep(for: options.flushInterval)
                    let batch = hub.drain(welcome.clientID)
                    if batch.dropped > 0 {
                        try await outbound.write(
                            .text(FoxgloveBridge.status(level: 1, "throttled: \(batch.dropped) events not sent")))
                    }
                    for event in batch.events {
                        let (channelID, new) = bridge.withBridge {
                            $0.channel(kind: event.kind, reactor: event.reactor)
                        }
                        if let new { try await outbound.write(.text(FoxgloveBridge.advertise([new]))) }
                        guard let channelID else { continue }
                        let now = UInt64(Date().timeIntervalSince1970 * 1e9)
                        for subscription in bridge.withBridge({ $0.subscribers(of: channelID) }) {
                            let frame = FoxgloveBridge.messageData(
                                subscription: subscription, timestampNanoseconds: now, payload: event.json)
                            try await outbound.write(.binary(ByteBuffer(bytes: frame)))
                        }
                    }
                }
            }
            group.addTask {
                for try await message in inbound.messages(maxSize: 1 << 20) {
                    let request: FoxgloveBridge.ClientRequest
                    switch message {
                    case .text(let text):
                        request = bridge.withBridge { $0.handle(text: text, allowPublish: driver != nil) }
                    case .binary(let buffer):
                        request = bridge.withBridge {
                            $0.handle(binary: Array(buffer.readableBytesView), allowPublish: driver != nil)
                        }
                    }
                    switch request {
                    case .handled: break
                    case .problem(let problem):
                        try await outbound.write(.text(FoxgloveBridge.status(level: 2, problem)))
                    case .publish(let request):
                        guard let driver else { break }
                        let outcome = await driver.perform(request)
                        if !outcome.ok {
                            try await outbound.write(.text(FoxgloveBridge.status(level: 2, outcome.text)))
                        }
                    }
                }
            }
            try await group.next()
            group.cancelAll()
        }
    }
}

/// The bridge state shared by a connection's reader and writer.
final class BridgeBox: Sendable {
    private let bridge = Mutex(FoxgloveBridge())
    func withBridge<T: Sendable>(_ body: (inout FoxgloveBridge) -> T) -> T { bridge.withLock { body(&$0) } }
}
#endif
