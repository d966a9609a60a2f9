import CZeroMQ

/// The kinds of socket FlowBus uses.
public enum SocketType: Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case pair, pub, sub, req, rep, dealer, router, pull, push, xpub, xsub
    /// Raw TCP: each message is [peer routing id, bytes]; an empty frame to a peer closes its
    /// connection, and an empty frame from one announces its connection or disconnection.
    case stream

    var rawValue: Int32 {
        switch self {
        case .pair: ZMQ_PAIR
        case .pub: ZMQ_PUB
        case .sub: ZMQ_SUB
        case .req: ZMQ_REQ
        case .rep: ZMQ_REP
        case .dealer: ZMQ_DEALER
        case .router: ZMQ_ROUTER
        case .pull: ZMQ_PULL
        case .push: ZMQ_PUSH
        case .xpub: ZMQ_XPUB
        case .xsub: ZMQ_XSUB
        case .stream: ZMQ_STREAM
        }
    }

    public var description: String {
        switch self {
        case .pair: "PAIR"
        case .pub: "PUB"
        case .sub: "SUB"
        case .req: "REQ"
        case .rep: "REP"
        case .dealer: "DEALER"
        case .router: "ROUTER"
        case .pull: "PULL"
        case .push: "PUSH"
        case .xpub: "XPUB"
        case .xsub: "XSUB"
        case .stream: "STREAM"
        }
    }
}

/// A socket option and its value. Times are in milliseconds.
public enum SocketOption: Sendable, Hashable {
    /// Messages queued per peer before sending blocks or drops (PUB and ROUTER drop).
    case sendHighWaterMark(Int32)
    /// Messages queued per peer on the receiving side.
    case receiveHighWaterMark(Int32)
    /// How long a closed socket keeps trying to deliver; 0 drops at once, -1 waits forever.
    case linger(Int32)
    /// The identity a ROUTER peer sees for this socket.
    case routingID([UInt8])
    /// A SUB prefix filter; the empty prefix receives everything.
    case subscribe([UInt8])
    /// Removes a SUB prefix filter.
    case unsubscribe([UInt8])
    /// Queue messages only to completed connections.
    case immediate(Bool)
    /// Largest message accepted from a peer, in bytes; a peer sending more is disconnected. -1: no limit.
    case maxMessageSize(Int64)
    /// Send a ZMTP PING this often.
    case heartbeatInterval(Int32)
    /// Close the connection when no traffic arrives this long after a PING.
    case heartbeatTimeout(Int32)
    /// Ask the peer to time out this connection after this long without traffic.
    case heartbeatTTL(Int32)
    /// XPUB passes every subscription, duplicates included, to the application.
    case xpubVerbose(Bool)
    /// XPUB returns EAGAIN at the high-water mark instead of dropping silently.
    case xpubNoDrop(Bool)
    /// XPUB sends this message to each new subscriber.
    case xpubWelcomeMessage([UInt8])
    /// ROUTER fails with EHOSTUNREACH for an unknown routing id instead of dropping.
    case routerMandatory(Bool)
    /// A new connection with a known routing id takes over the old one.
    case routerHandover(Bool)
    /// First wait before reconnecting.
    case reconnectInterval(Int32)
    /// Upper bound of the exponential reconnect back-off; 0 keeps the interval fixed.
    case reconnectIntervalMax(Int32)
    /// Blocking receive gives up with EAGAIN after this long; -1 waits forever.
    case receiveTimeout(Int32)
    /// A TCP connect is given up (and tried again) after this many milliseconds; 0: the kernel decides.
    case connectTimeout(Int32)
    /// Blocking send gives up with EAGAIN after this long; -1 waits forever.
    case sendTimeout(Int32)
    /// Act as CURVE server.
    case curveServer(Bool)
    /// This socket's CURVE public key, 40 characters of Z85.
    case curvePublicKey(String)
    /// This socket's CURVE secret key, 40 characters of Z85.
    case curveSecretKey(String)
    /// The server's CURVE public key, for a client, 40 characters of Z85.
    case curveServerKey(String)
    /// The ZAP domain of this socket; the handler sees it in each request.
    case zapDomain(String)
    /// Accept IPv6 on tcp endpoints.
    case ipv6(Bool)

    /// A name for logs and errors; never the value (keys are secrets).
    public var name: String {
        switch self {
        case .sendHighWaterMark: "sendHighWaterMark"
        case .receiveHighWaterMark: "receiveHighWaterMark"
        case .linger: "linger"
        case .routingID: "routingID"
        case .subscribe: "subscribe"
        case .unsubscribe: "unsubscribe"
        case .immediate: "immediate"
        case .maxMessageSize: "maxMessageSize"
        case .heartbeatInterval: "heartbeatInterval"
        case .heartbeatTimeout: "heartbeatTimeout"
        case .heartbeatTTL: "heartbeatTTL"
        case .xpubVerbose: "xpubVerbose"
        case .xpubNoDrop: "xpubNoDrop"
        case .xpubWelcomeMessage: "xpubWelcomeMessage"
        case .routerMandatory: "routerMandatory"
        case .routerHandover: "routerHandover"
        case .reconnectInterval: "reconnectInterval"
        case .reconnectIntervalMax: "reconnectIntervalMax"
        case .receiveTimeout: "receiveTimeout"
        case .connectTimeout: "connectTimeout"
        case .sendTimeout: "sendTimeout"
        case .curveServer: "curveServer"
        case .curvePublicKey: "curvePublicKey"
        case .curveSecretKey: "curveSecretKey"
        case .curveServerKey: "curveServerKey"
        case .zapDomain: "zapDomain"
        case .ipv6: "ipv6"
        }
    }

    enum Value {
        case int32(Int32)
        case int64(Int64)
        case bytes([UInt8])
    }

    var code: Int32 {
        switch self {
        case .sendHighWaterMark: ZMQ_SNDHWM
        case .receiveHighWaterMark: ZMQ_RCVHWM
        case .linger: ZMQ_LINGER
        case .routingID: ZMQ_ROUTING_ID
        case .subscribe: ZMQ_SUBSCRIBE
        case .unsubscribe: ZMQ_UNSUBSCRIBE
        case .immediate: ZMQ_IMMEDIATE
        case .maxMessageSize: ZMQ_MAXMSGSIZE
        case .heartbeatInterval: ZMQ_HEARTBEAT_IVL
        case .heartbeatTimeout: ZMQ_HEARTBEAT_TIMEOUT
        case .heartbeatTTL: ZMQ_HEARTBEAT_TTL
        case .xpubVerbose: ZMQ_XPUB_VERBOSE
        case .xpubNoDrop: ZMQ_XPUB_NODROP
        case .xpubWelcomeMessage: ZMQ_XPUB_WELCOME_MSG
        case .routerMandatory: ZMQ_ROUTER_MANDATORY
        case .routerHandover: ZMQ_ROUTER_HANDOVER
        case .reconnectInterval: ZMQ_RECONNECT_IVL
        case .reconnectIntervalMax: ZMQ_RECONNECT_IVL_MAX
        case .receiveTimeout: ZMQ_RCVTIMEO
        case .connectTimeout: ZMQ_CONNECT_TIMEOUT
        case .sendTimeout: ZMQ_SNDTIMEO
        case .curveServer: ZMQ_CURVE_SERVER
        case .curvePublicKey: ZMQ_CURVE_PUBLICKEY
        case .curveSecretKey: ZMQ_CURVE_SECRETKEY
        case .curveServerKey: ZMQ_CURVE_SERVERKEY
        case .zapDomain: ZMQ_ZAP_DOMAIN
        case .ipv6: ZMQ_IPV6
        }
    }

    var value: Value {
        switch self {
        case .sendHighWaterMark(let v), .receiveHighWaterMark(let v), .linger(let v),
            .heartbeatInterval(let v), .heartbeatTimeout(let v), .heartbeatTTL(let v),
            .reconnectInterval(let v), .reconnectIntervalMax(let v),
            .receiveTimeout(let v), .sendTimeout(let v), .connectTimeout(let v):
            .int32(v)
        case .immediate(let flag), .xpubVerbose(let flag), .xpubNoDrop(let flag),
            .routerMandatory(let flag), .routerHandover(let flag), .curveServer(let flag), .ipv6(let flag):
            .int32(flag ? 1 : 0)
        case .maxMessageSize(let v):
            .int64(v)
        case .routingID(let bytes), .subscribe(let bytes), .unsubscribe(let bytes), .xpubWelcomeMessage(let bytes):
            .bytes(bytes)
        case .curvePublicKey(let text), .curveSecretKey(let text), .curveServerKey(let text), .zapDomain(let text):
            .bytes(Array(text.utf8))
        }
    }
}

extension SocketOption {
    /// A SUB prefix filter given as text.
    public static func subscribe(_ prefix: String) -> SocketOption { .subscribe(Array(prefix.utf8)) }
    /// Removes a SUB prefix filter given as text.
    public static func unsubscribe(_ prefix: String) -> SocketOption { .unsubscribe(Array(prefix.utf8)) }
    /// A routing id given as text.
    public static func routingID(_ id: String) -> SocketOption { .routingID(Array(id.utf8)) }
}
