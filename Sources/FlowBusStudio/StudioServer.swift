#if Studio
import FlowBusClient
import FlowBusConfiguration
import FlowBusTools
import FlowBusWire
import Foundation
import Hummingbird
import HummingbirdWebSocket
import HTTPTypes
import Logging
import NIOCore

/// FlowBus Studio: serves the page and a WebSocket that streams the bus to it (and, with the
/// `foxglove.websocket.v1` subprotocol, to Foxglove-protocol clients).
///
/// Routes: `GET /` (the page), `GET /page/<file>` (its script and style), `GET /api/config` (the
/// declared flows and graph), `POST /api/recording` (a `flowctl record` file in the body; answers
/// ``RecordingTimeline/json(path:)``), and `/ws`. With a token, every route asks for `?token=`.
public struct StudioServer: Sendable {
    /// How the studio is started.
    public struct Options: Sendable {
        public var host = "127.0.0.1"
        public var port = 8089
        public var token: String?
        public var allowPublish = false
        /// How often each page's queue is sent.
        public var flushInterval: Duration = .milliseconds(100)
        public var limits = StudioHub.Limits()

        public init() {}

        /// Whether `host` only accepts connections from this machine.
        public var isLoopback: Bool { ["127.0.0.1", "localhost", "::1"].contains(host) || host.hasPrefix("127.") }
    }

    public let config: FlowBusConfig
    public let configPath: String?
    public let options: Options
    public let logger: Logger

    /// - Throws: ``StudioError`` (``StudioError/Code/tokenRequired``) when a non-loopback address is
    ///   asked for without a token.
    public init(
        config: FlowBusConfig, configPath: String?, options: Options, logger: Logger
    ) throws(StudioError) {
        if !options.isLoopback && (options.token ?? "").isEmpty {
            throw StudioError(
                .tokenRequired,
                "binding to \(options.host) lets other machines see the bus: give --token SECRET (pages then open with ?token=SECRET)"
            )
        }
        self.config = config
        self.configPath = configPath
        self.options = options
        self.logger = logger
    }

    /// Runs until cancelled; `onListening` gets the port (useful with port 0).
    public func run(onListening: @escaping @Sendable (Int) async -> Void = { _ in }) async throws {
        let hub = StudioHub(limits: options.limits)
        let feed = StudioFeed(config: config, hub: hub, logger: logger)
        let driver = options.allowPublish ? StudioDriver(config: config, logger: logger) : nil
        feed.start()
        defer {
            feed.stop()
            driver?.stop()
        }
        let pageConfig = StudioPage.configJSON(
            config: config, configPath: configPath, allowPublish: options.allowPublish)
        let token = options.token
        let options = self.options
        let logger = self.logger

        let router = Router(context: BasicWebSocketRequestContext.self)
        router.add(middleware: TokenMiddleware<BasicWebSocketRequestContext>(token: token))
        router.get("/") { _, _ in try StudioPage.resource("index.html") }
        router.get("/page/:file") { _, context in
            try StudioPage.resource(context.parameters.require("file"))
        }
        router.get("/api/config") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: pageConfig)))
        }
        router.post("/api/recording") { request, _ in
            let body = try await request.body.collect(upTo: 512 << 20)
            let path = FileManager.default.temporaryDirectory.appendingPathComponent(
                "studio-\(UUID().uuidString).fbrec"
            ).path
            try Data(body.readableBytesView).write(to: URL(fileURLWithPath: path))
            defer { try? FileManager.default.removeItem(atPath: path) }
            do {
                let json = try RecordingTimeline.json(path: path)
                return Response(
                    status: .ok, headers: [.contentType: "application/json"],
                    body: .init(byteBuffer: ByteBuffer(string: json)))
            } catch {
                return Response(
                    status: .badRequest, headers: [.contentType: "text/plain"],
                    body: .init(byteBuffer: ByteBuffer(string: "\(error)")))
            }
        }
        router.ws("/ws") { request, _ in
            guard tokenAllows(request, token: token) else { return .dontUpgrade }
            let offered = request.headers[values: .secWebSocketProtocol].flatMap { $0.split(separator: ",") }
                .map { $0.trimmingCharacters(in: .whitespaces) }
            if offered.contains(FoxgloveBridge.subprotocol) {
                return .upgrade([.secWebSocketProtocol: FoxgloveBridge.subprotocol])
            }
            return .upgrade([:])
        } onUpgrade: { inbound, outbound, context in
            let offered = context.request.headers[values: .secWebSocketProtocol].joined(separator: ",")
            let session = StudioSession(hub: hub, driver: driver, options: options, logger: logger)
            if offered.contains(FoxgloveBridge.subprotocol) {
                try await session.runFoxglove(inbound: inbound, outbound: outbound)
            } else {
                try await session.runPage(inbound: inbound, outbound: outbound)
            }
        }

        let app = Application(
            router: router,
            server: .http1WebSocketUpgrade(
                webSocketRouter: router, configuration: .init(ws: .init(maxFrameSize: 1 << 20))),
            configuration: .init(address: .hostname(options.host, port: options.port), serverName: "flowbus-studio"),
            onServerRunning: { channel in await onListening(channel.localAddress?.port ?? options.port) },
            logger: logger
        )
        try await app.runService()
    }
}

/// Why a studio cannot start, with what to do about it.
///
/// ``code`` says what is wrong, so that a caller can match it (`error.code == .tokenRequired`);
/// ``description`` says it for a person. New codes do not break callers.
public struct StudioError: Error, CustomStringConvertible, Sendable, Hashable {
    /// What is wrong.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Value: String {
            case tokenRequired = "token-required"
        }

        private let value: Value

        private init(_ value: Value) {
            self.value = value
        }

        /// The studio is to listen on an address other machines can reach, and no token guards it.
        public static let tokenRequired = Code(.tokenRequired)

        public var description: String { value.rawValue }
    }

    /// What is wrong, to match.
    public var code: Code
    /// What is wrong and what to do, in words.
    public var description: String

    public init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}

/// Refuses requests without the token, when there is one.
struct TokenMiddleware<Context: RequestContext>: RouterMiddleware {
    let token: String?

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard tokenAllows(request, token: token) else {
            return Response(
                status: .unauthorized, body: .init(byteBuffer: ByteBuffer(string: "open the studio with ?token=…\n")))
        }
        return try await next(request, context)
    }
}

/// Whether `request` carries the token (always, when there is none).
func tokenAllows(_ request: Request, token: String?) -> Bool {
    guard let token, !token.isEmpty else { return true }
    return request.uri.queryParameters.get("token") == token
}
#endif
