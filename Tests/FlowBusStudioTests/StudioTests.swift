#if Studio
import FlowBusConfiguration
import FlowBusStudio
import FlowBusWire
import Logging
import Testing

private func command(
    _ verb: NavigationVerb, _ target: String, in container: String = "", _ kind: PresentableKind = .screen
) -> NavigationCommandMessage {
    NavigationCommandMessage(
        envelope: Envelope(kind: .navigationCommand, sequence: 1, source: "flowd#t"), flow: "F", verb: verb,
        target: target,
        container: container, presentableKind: kind)
}

private func node(_ value: WireValue?, _ path: [Int]) -> [String: WireValue]? {
    var current = value?.mapValue
    for index in path { current = current?["children"]?.listValue?[index].mapValue }
    return current
}

@Test func replayDrawsStacksTabsAndModalsWithVisibility() {
    var replay = NavigationReplay()
    replay.apply(command(.setRoot, "main", .stack))
    replay.apply(command(.setTabs, "dashboard", in: "wishlist,watched", .tabs))
    replay.apply(command(.push, "dashboard", in: "main", .tabs))
    replay.apply(command(.push, "wishlist/movies", in: "wishlist"))
    replay.apply(command(.push, "watched/movies", in: "watched"))
    var root = replay.flows.listValue?.first?.mapValue?["root"]
    #expect(node(root, [0, 0, 0])?["visible"] == .bool(true))  // the selected tab's list
    #expect(node(root, [0, 1, 0])?["visible"] == .bool(false))  // the other tab's list
    replay.apply(command(.selectTab, "watched", in: "dashboard", .stack))
    replay.apply(command(.present, "settings", in: "main", .stack))
    root = replay.flows.listValue?.first?.mapValue?["root"]
    #expect(node(root, [0])?["selected"] == .int(1))
    #expect(node(root, [0, 1, 0])?["visible"] == .bool(false))  // covered by the modal
    #expect(root?.mapValue?["presented"]?.mapValue?["visible"] == .bool(true))
    replay.apply(command(.dismiss, "settings", in: "main", .stack))
    root = replay.flows.listValue?.first?.mapValue?["root"]
    #expect(root?.mapValue?["presented"] == nil)
    #expect(node(root, [0, 1, 0])?["visible"] == .bool(true))
}

@Test func replayOfARecordingThatStartedLateDrawsWhatItSaw() {
    var replay = NavigationReplay()
    replay.apply(command(.push, "movie/1", in: "wishlist"))
    let roots = replay.flows.listValue ?? []
    #expect(roots.count == 1)
    #expect(roots.first?.mapValue?["id"] == .string("wishlist"))
}

@Test func hubKeepsMemoryBoundedAndCountsWhatAPageMissed() {
    var limits = StudioHub.Limits()
    limits.recentEvents = 10
    limits.pendingPerClient = 50
    limits.eventsPerDrain = 20
    let hub = StudioHub(limits: limits)
    let page = hub.connect().clientID
    for index in 0..<1000 { hub.record(["kind": "step", "step": .string("s\(index)")]) }
    let batch = hub.drain(page)
    #expect(batch.events.count == 20)
    #expect(batch.dropped == 980)
    #expect(batch.events.last?.id == 1000)  // the newest are the ones sent
    #expect(hub.connect().recent.count == 10)
    #expect(hub.drain(page).isEmpty)
}

@Test func hubSendsEachChangedStatusOnce() {
    let hub = StudioHub()
    let page = hub.connect().clientID
    hub.record(["kind": "didNavigate"])
    hub.recordStatus("{\"flows\":[]}")
    hub.recordStatus("{\"flows\":[]}")
    #expect(hub.drain(page).status?.afterEvent == 1)
    #expect(hub.connect().statuses.count == 1)
    // Read before the event that led to it arrived, the same tree is the tree after that event too.
    hub.record(["kind": "didNavigate"])
    hub.recordStatus("{\"flows\":[]}")
    #expect(hub.drain(page).status?.afterEvent == 2)
    #expect(hub.connect().statuses.map(\.afterEvent) == [1, 2])
}

@Test func foxgloveFramesAndClientPublish() {
    var bridge = FoxgloveBridge()
    #expect(
        bridge.handle(text: #"{"op":"subscribe","subscriptions":[{"id":7,"channelId":2}]}"#, allowPublish: false)
            == .handled)
    #expect(bridge.subscribers(of: 2) == [7])
    let state = bridge.channel(kind: "state", reactor: "counter")
    #expect(state.new?.topic == "/flowbus/states/counter")
    #expect(bridge.channel(kind: "snapshot", reactor: "counter").new == nil)
    let frame = FoxgloveBridge.messageData(subscription: 7, timestampNanoseconds: 258, payload: "{}")
    #expect(frame == [1, 7, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0] + Array("{}".utf8))

    let advertise =
        #"{"op":"advertise","channels":[{"id":3,"topic":"/flowbus/step","encoding":"json","schemaName":"s"}]}"#
    if case .problem = bridge.handle(text: advertise, allowPublish: false) {
    } else {
        Issue.record("publishing must be refused when off")
    }
    #expect(bridge.handle(text: advertise, allowPublish: true) == .handled)
    let payload = Array(#"{"stepper":"apikey","step":"apiKeyIsComplete","params":{"n":1}}"#.utf8)
    #expect(
        bridge.handle(binary: [1, 3, 0, 0, 0] + payload, allowPublish: true)
            == .publish(.step(stepper: "apikey", name: "apiKeyIsComplete", params: ["n": 1])))
    if case .problem = bridge.handle(binary: [1, 9, 0, 0, 0] + payload, allowPublish: true) {
    } else {
        Issue.record("unadvertised channel accepted")
    }
}

@Test func eventsDescribeRefusalsWithTheirStepper() {
    let diagnostic = DiagnosticMessage(
        envelope: Envelope(kind: .diagnostic, sequence: 3, source: "flowd#t"),
        reason: DiagnosticReason(rawValue: "not-visible"),
        message: "hidden", details: ["stepper": "watched/movies", "step": "moviePicked"])
    let event = StudioEvent.describe(.diagnostic(diagnostic), endpoint: "events")
    #expect(event?["kind"] == .string("diagnostic"))
    #expect(event?["reason"] == .string("not-visible"))
    #expect(event?["stepper"] == .string("watched/movies"))
    #expect(
        StudioEvent.describe(
            .heartbeat(Heartbeat(envelope: Envelope(kind: .heartbeat, sequence: 0, source: "x"))), endpoint: "events")
            == nil)
}

@Test func anAddressOtherMachinesReachNeedsAToken() throws {
    let config = try FlowBusConfig.parse(
        yaml: """
            endpoints:
              ingress: ipc:///tmp/fb-studio/in.sock
              events: ipc:///tmp/fb-studio/ev.sock
              control: ipc:///tmp/fb-studio/ctl.sock
            """, environment: [:])
    var options = StudioServer.Options()
    options.host = "0.0.0.0"
    let logger = Logger(label: "studio-test")
    #expect {
        try StudioServer(config: config, configPath: nil, options: options, logger: logger)
    } throws: { error in
        let error = error as? StudioError
        return error?.code == .tokenRequired && error?.description.contains("give --token SECRET") == true
    }
    options.token = "secret"
    #expect(throws: Never.self) {
        try StudioServer(config: config, configPath: nil, options: options, logger: logger)
    }
}
#endif
