import FlowBusConfiguration
import FlowBusDaemon
import Foundation
import Logging
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

@Suite("Metrics endpoint: HTTP over a ZeroMQ STREAM socket")
struct MetricsEndpointTests {
    static let text = "# TYPE flowbus_test_total counter\nflowbus_test_total 3\n"

    /// An endpoint on a free loopback port serving `text`, stopped after `body`.
    func withEndpoint(_ body: (_ port: UInt16) throws -> Void) throws {
        let endpoint = MetricsEndpoint(
            endpoint: "tcp://127.0.0.1:*", exposition: MetricsExposition { Array(Self.text.utf8) },
            logger: Logger(label: "test"))
        try endpoint.start()
        defer { endpoint.stop() }
        let bound = try #require(endpoint.boundEndpoint)
        let port = try #require(bound.split(separator: ":").last.flatMap { UInt16($0) }, "bound endpoint \(bound)")
        try body(port)
    }

    @Test("GET /metrics answers 200 with the Prometheus content type and the exposition")
    func servesMetrics() throws {
        try withEndpoint { port in
            let response = try PlainHTTPClient.request(
                "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n", port: port)
            #expect(response.statusLine == "HTTP/1.1 200 OK")
            #expect(response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8")
            #expect(response.headers["content-length"] == "\(Self.text.utf8.count)")
            #expect(response.body.contains("\nflowbus_test_total 3\n"))
        }
    }

    @Test("A request arriving in pieces, with a query string, is answered once complete")
    func requestInPieces() throws {
        try withEndpoint { port in
            let response = try PlainHTTPClient.request(
                pieces: ["GET /metrics?name[]=x HT", "TP/1.0\r\nHost: local", "host\r\n\r\n"], port: port)
            #expect(response.statusLine == "HTTP/1.1 200 OK")
            #expect(response.body == Self.text)
        }
    }

    @Test("Other paths answer 404, other methods 405, and each connection is closed after its response")
    func otherRequests() throws {
        try withEndpoint { port in
            let notFound = try PlainHTTPClient.request(
                "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", port: port, untilClosed: true)
            #expect(notFound.statusLine == "HTTP/1.1 404 Not Found")
            #expect(notFound.closedByServer)
            let post = try PlainHTTPClient.request("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", port: port)
            #expect(post.statusLine == "HTTP/1.1 405 Method Not Allowed")
            #expect(post.headers["allow"] == "GET, HEAD")
            let head = try PlainHTTPClient.request("HEAD /metrics HTTP/1.1\r\n\r\n", port: port, untilClosed: true)
            #expect(head.statusLine == "HTTP/1.1 200 OK")
            #expect(head.body.isEmpty)
            let garbage = try PlainHTTPClient.request("hello\n\n", port: port)
            #expect(garbage.statusLine == "HTTP/1.1 400 Bad Request")
        }
    }

    @Test("An address that cannot be bound fails start")
    func bindFailure() throws {
        let first = MetricsEndpoint(
            endpoint: "tcp://127.0.0.1:*", exposition: MetricsExposition { [] }, logger: Logger(label: "test"))
        try first.start()
        defer { first.stop() }
        let taken = try #require(first.boundEndpoint)
        let second = MetricsEndpoint(
            endpoint: taken, exposition: MetricsExposition { [] }, logger: Logger(label: "test"))
        #expect(throws: (any Error).self) { try second.start() }
        second.stop()
    }
}

/// A plain TCP client (POSIX sockets): what a scraper sends, with no HTTP library in between.
enum PlainHTTPClient {
    struct Response {
        var statusLine: String
        /// Header names in lower case.
        var headers: [String: String]
        var body: String
        /// Whether the server closed the connection (read with `untilClosed`).
        var closedByServer = false
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func request(_ text: String, port: UInt16, untilClosed: Bool = false) throws -> Response {
        try request(pieces: [text], port: port, untilClosed: untilClosed)
    }

    /// Sends `pieces` as separate writes, then reads the response: its head and `Content-Length`
    /// bytes of body, or (`untilClosed`) everything until the server closes. Every wait is bounded.
    static func request(pieces: [String], port: UInt16, untilClosed: Bool = false) throws -> Response {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw Failure(description: "socket() failed: errno \(errno)") }
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
        guard connected == 0 else { throw Failure(description: "connect to 127.0.0.1:\(port) failed: errno \(errno)") }
        for (index, piece) in pieces.enumerated() {
            let bytes = Array(piece.utf8)
            guard send(fd, bytes, bytes.count, 0) == bytes.count else {
                throw Failure(description: "send failed: errno \(errno)")
            }
            // Let each piece leave as its own segment.
            if index < pieces.count - 1 { usleep(20_000) }
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        var closed = false
        while true {
            if !untilClosed, let response = parse(received),
                response.body.utf8.count >= Int(response.headers["content-length"] ?? "0") ?? 0
            {
                return response
            }
            let count = recv(fd, &buffer, buffer.count, 0)
            if count == 0 {
                closed = true
                break
            }
            guard count > 0 else {
                throw Failure(
                    description:
                        "no complete response within 5 s (errno \(errno)); got: \(String(decoding: received, as: UTF8.self))"
                )
            }
            received += buffer[..<count]
        }
        guard var response = parse(received) else {
            throw Failure(
                description: "connection closed before a response head: \(String(decoding: received, as: UTF8.self))")
        }
        response.closedByServer = closed
        return response
    }

    static func parse(_ bytes: [UInt8]) -> Response? {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let end = text.range(of: "\r\n\r\n") else { return nil }
        let lines = text[..<end.lowerBound].components(separatedBy: "\r\n")
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(
                in: .whitespaces)
        }
        return Response(statusLine: lines[0], headers: headers, body: String(text[end.upperBound...]))
    }
}

@Suite("Config: the metrics endpoints")
struct MetricsConfigTests {
    static func yaml(flowd: String, host: String) -> String {
        """
        endpoints:
          ingress: ipc:///tmp/fb/in.sock
          events: ipc:///tmp/fb/ev.sock
          control: ipc:///tmp/fb/ctl.sock
          metrics: \(flowd)
        reactors:
          demo:
            actions: ipc:///tmp/fb/a.sock
            states: ipc:///tmp/fb/s.sock
            serves: [counter]
            metrics: \(host)
        """
    }

    @Test("endpoints.metrics and reactors.<host>.metrics are read; empty from ${VAR:-} means none")
    func parsed() throws {
        let config = try FlowBusConfig.parse(
            yaml: Self.yaml(flowd: "tcp://127.0.0.1:9464", host: "${HOST_METRICS:-}"), environment: [:])
        #expect(config.endpoints.metrics == "tcp://127.0.0.1:9464")
        #expect(config.reactors["demo"]?.metrics == nil)
        let withHost = try FlowBusConfig.parse(
            yaml: Self.yaml(flowd: "", host: "${HOST_METRICS:-}"), environment: ["HOST_METRICS": "tcp://127.0.0.1:*"])
        #expect(withHost.endpoints.metrics == nil)
        #expect(withHost.reactors["demo"]?.metrics == "tcp://127.0.0.1:*")
    }

    @Test("A metrics address that is not tcp:// is refused, naming the key")
    func notTCP() {
        #expect {
            try FlowBusConfig.parse(
                yaml: Self.yaml(flowd: "tcp://127.0.0.1:9464", host: "ipc:///tmp/fb/m.sock"), environment: [:])
        } throws: { error in
            "\(error)".contains("reactors.demo.metrics") && "\(error)".contains("not a tcp:// address")
        }
    }
}
