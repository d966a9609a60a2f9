import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The movie demo's config with its metrics endpoints on free loopback ports (`*`): flowd's
/// under `endpoints:`, the reactor host's under `reactors.demo:`; `appending` adds top-level YAML.
private func demoWithMetrics(appending: String = "") throws -> TestTopology {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    var yaml = try String(contentsOf: root.appendingPathComponent("config/demo.yaml"), encoding: .utf8)
    for (anchor, line) in [
        ("endpoints:\n", "  metrics: tcp://127.0.0.1:*\n"),
        ("    serves: [counter, login, movie/]\n", "    metrics: tcp://127.0.0.1:*\n"),
    ] {
        guard let range = yaml.range(of: anchor) else {
            throw HarnessError(.invalidConfig, "config/demo.yaml has no '\(anchor)' line to add metrics after")
        }
        yaml.insert(contentsOf: line, at: range.upperBound)
    }
    return try TestTopology(configYAML: yaml + appending, heartbeat: .milliseconds(50))
}

/// The value of one series (`name{labels}` exactly as exposed) in Prometheus text, if present.
private func sample(_ text: String, _ series: String) -> Double? {
    for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
        return Double(line.dropFirst(series.count + 1).split(separator: " ").first ?? "")
    }
    return nil
}

/// `GET /metrics` from `endpoint` (`tcp://127.0.0.1:PORT`) over a plain TCP socket: the body of a 200 response.
private func scrape(_ endpoint: String) throws -> String {
    guard let port = endpoint.split(separator: ":").last.flatMap({ UInt16($0) }) else {
        throw HarnessError(.invalidArgument, "no port in \(endpoint)")
    }
    #if canImport(Glibc)
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
    let fd = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    guard fd >= 0 else { throw HarnessError(.unavailable, "socket() failed: errno \(errno)") }
    defer { close(fd) }
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard connected == 0 else { throw HarnessError(.failed, "cannot connect to \(endpoint): errno \(errno)") }
    let request = Array("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
    guard send(fd, request, request.count, 0) == request.count else {
        throw HarnessError(.failed, "send to \(endpoint) failed: errno \(errno)")
    }
    // The endpoint closes the connection after its response (Connection: close).
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 8192)
    while true {
        let count = recv(fd, &buffer, buffer.count, 0)
        if count == 0 { break }
        guard count > 0 else {
            throw HarnessError(.timedOut, "\(endpoint) did not finish its response within 5 s (errno \(errno))")
        }
        received += buffer[..<count]
    }
    let text = String(decoding: received, as: UTF8.self)
    guard text.hasPrefix("HTTP/1.1 200 OK\r\n"), let end = text.range(of: "\r\n\r\n") else {
        throw HarnessError(.unexpected, "\(endpoint) answered:\n\(text)")
    }
    return String(text[end.upperBound...])
}

/// Scrapes until `condition` holds, for counts that follow asynchronous work (a reactor's
/// delayed states); fails with the last text after `timeout`.
private func scrape(
    _ endpoint: String, until condition: (String) -> Bool, timeout: Duration = .seconds(20)
) throws -> String {
    let deadline = ContinuousClock.now + timeout
    while true {
        let text = try scrape(endpoint)
        if condition(text) { return text }
        guard ContinuousClock.now < deadline else {
            throw HarnessError(.timedOut, "metrics of \(endpoint) never met the condition; last:\n\(text)")
        }
        Thread.sleep(forTimeInterval: 0.05)
    }
}

@Suite("Metrics of flowd and the reactor host, scraped as Prometheus does", .serialized)
struct MetricsTests {
    @Test(
        "flowd counts steps routed and refused by reason, deep links and navigations, on its endpoint and in flowctl status"
    )
    func flowdMetrics() throws {
        try withTopology(try demoWithMetrics()) { topology in
            try topology.startFlowd()
            let metrics = try #require(
                try topology.status()["metrics"]?.mapValue, "the status reply has a metrics field")
            let endpoint = try #require(metrics["endpoint"]?.stringValue, "flowd reports where it serves its metrics")
            #expect(endpoint.hasPrefix("tcp://127.0.0.1:") && !endpoint.hasSuffix("*"))

            try topology.step("apiKeyIsComplete", as: "apikey")
            try topology.step("moviePicked", ["withMovieId": 1], as: "wishlist/movies")
            try topology.step("moviePicked", ["withMovieId": 2], as: "watched/movies")  // the hidden tab
            try topology.step("settings", as: "nobody")  // no flow binds it
            try topology.deepLink("moviePicked", ["withMovieId": 3])

            // Each was acknowledged, and flowd acknowledges a batch once its counts are in the metrics.
            let text = try scrape(endpoint)
            #expect(sample(text, "flowbus_steps_received_total") == 4)
            #expect(sample(text, "flowbus_steps_routed_total") == 2)
            #expect(sample(text, #"flowbus_steps_refused_total{reason="not-visible"}"#) == 1)
            #expect(sample(text, #"flowbus_steps_refused_total{reason="unbound-stepper"}"#) == 1)
            #expect(sample(text, "flowbus_deep_links_total") == 1)
            #expect(sample(text, "flowbus_deep_links_routed_total") == 1)
            // WishlistFlow: its first screen, the picked movie, the deep link's movie.
            #expect(sample(text, #"flowbus_navigations_total{flow="WishlistFlow"}"#) == 3)
            // One observation per batch that carried a step or deep link: each was acknowledged before the next.
            #expect(sample(text, "flowbus_step_latency_seconds_count") == 5)
            #expect(sample(text, "flowbus_batch_size_count").map { $0 >= 5 } == true)
            #expect(sample(text, "flowbus_events_dropped_total") == 0)
            // The loop's own counts reach the metrics with the next batch or heartbeat.
            _ = try scrape(endpoint) { sample($0, "flowbus_ingress_messages_total").map { $0 >= 5 } == true }
            #expect(sample(text, "flowbus_journal_commit_seconds_count") == nil, "no journal, no commit histogram")

            let prometheus = try topology.run("flowctl", ["status", "--metrics", "--config", topology.configPath])
            #expect(prometheus.status == 0)
            #expect(sample(prometheus.output, "flowbus_steps_routed_total") == 2)
            #expect(sample(prometheus.output, #"flowbus_steps_refused_total{reason="unbound-stepper"}"#) == 1)

            let human = try topology.run("flowctl", ["status", "--config", topology.configPath])
            #expect(human.status == 0)
            #expect(
                human.output.contains(
                    "metrics: steps received 4, routed 2, refused {not-visible 1, unbound-stepper 1}; deep links 1 (routed 1)"
                ), "\(human.output)")
            #expect(human.output.contains("step latency: mean "))
        }
    }

    @Test("With a journal, flowd times each commit")
    func journalCommits() throws {
        try withTopology(try demoWithMetrics(appending: "\npersistence: { journal: journal.sqlite }\n")) { topology in
            try topology.startFlowd()
            let endpoint = try #require(try topology.status()["metrics"]?.mapValue?["endpoint"]?.stringValue)
            try topology.step("apiKeyIsComplete", as: "apikey")
            let text = try scrape(endpoint)
            // At least the step's batch; status queries are batches committed too.
            #expect(sample(text, "flowbus_journal_commit_seconds_count").map { $0 >= 1 } == true, "\(text)")
            #expect(sample(text, "flowbus_steps_routed_total") == 1)
            let human = try topology.run("flowctl", ["status", "--config", topology.configPath])
            #expect(human.output.contains("journal commit: mean "), "\(human.output)")
        }
    }

    @Test("The reactor host counts actions, refusals by reason and states on its endpoint")
    func reactorHostMetrics() throws {
        try withTopology(try demoWithMetrics()) { topology in
            try topology.startFlowd()
            let host = try topology.startReactorHost("demo", arguments: ["--counter-delay-ms", "0"])
            let pattern = #"metrics served at http://(127\.0\.0\.1:[0-9]+)/metrics"#
            #expect(try host.waitForOutput(matching: pattern))
            let log = host.output + host.errorOutput
            let match = try #require(try Regex(pattern).firstMatch(in: log), "the host logs its metrics address")
            let endpoint = "tcp://" + String(try #require(match.output[1].substring))

            // The counter's and the login reactor's first states, produced when the host started: no
            // view subscribed, so they were not even encoded.
            func states(_ text: String) -> Double? {
                guard let published = sample(text, #"flowbus_reactor_states_published_total{host="demo"}"#),
                    let unsubscribed = sample(text, #"flowbus_reactor_states_unsubscribed_total{host="demo"}"#)
                else { return nil }
                return published + unsubscribed
            }
            let before = try scrape(endpoint) { states($0).map { $0 >= 2 } == true }
            let statesBefore = try #require(states(before), "\(before)")
            try topology.send("increase", to: "counter")
            try topology.send("increase", to: "counter")
            #expect(throws: Refused.self) { try topology.send("load", to: "movie/not-a-number") }

            // An acknowledged action is counted before its ack leaves the host.
            let text = try scrape(endpoint)
            #expect(sample(text, #"flowbus_reactor_actions_total{host="demo"}"#) == 2)
            #expect(sample(text, #"flowbus_reactor_refused_total{host="demo",reason="unknown-reactor"}"#) == 1)
            #expect(sample(text, #"flowbus_reactor_messages_total{host="demo"}"#).map { $0 >= 3 } == true)
            #expect(sample(text, #"flowbus_reactor_instances{host="demo"}"#).map { $0 >= 2 } == true)
            // Each increase publishes three states (loading, value, loaded) once its mutation ran.
            let settled = try scrape(endpoint) { text in states(text).map { $0 >= statesBefore + 6 } == true }
            #expect(states(settled) == statesBefore + 6)
            #expect(sample(settled, #"flowbus_reactor_states_dropped_total{host="demo"}"#) == 0)
        }
    }
}
