import FlowBusWire
import Flows
import Foundation
import ZeroMQ

/// Why a client call failed, said so that the reader knows what to do.
public struct ClientError: Error, CustomStringConvertible, Sendable {
    public var description: String

    public init(_ description: String) {
        self.description = description
    }
}

/// A process's connection to `flowd`'s ingress, publishing steps as one stepper.
///
/// Steps carry this publisher's source id and a sequence number from 1; `flowd` acknowledges
/// them cumulatively and applies each (source, sequence) once. The publisher owns a socket, so
/// it is used from one thread.
public final class StepPublisher {
    /// The stepper id steps are published as (the topic `step/<id>`).
    public let stepperID: String
    /// This process instance's source id in envelopes.
    public let sourceID: String
    /// How params are encoded.
    public var contentType: ContentType
    private let context: Context
    private let socket: Socket
    private var sequence: UInt64 = 0
    private var acknowledged: UInt64 = 0
    /// Refusals flowd sent back for this publisher's messages, oldest first.
    public private(set) var refusals: [DiagnosticMessage] = []
    private var buffer = FrameBuffer()
    private var received = FrameBuffer()

    /// Connects to `endpoint` (flowd's ingress). libzmq connects in the background and queues
    /// steps until flowd is there.
    public init(stepperID: String, endpoint: String, contentType: ContentType = .fbv, curve: CurveKeys = CurveKeys(), context: Context? = nil) throws {
        self.stepperID = stepperID
        self.sourceID = "\(stepperID)#\(UUID().uuidString.prefix(8).lowercased())"
        self.contentType = contentType
        self.context = try context ?? Context(defaultLinger: 2000)
        socket = try self.context.socket(.dealer)
        try socket.setOptions([.sendHighWaterMark(100_000), .reconnectInterval(100), .reconnectIntervalMax(2000)])
        try curve.secureClient(socket, endpoint: endpoint)
        try socket.connect(endpoint)
    }

    /// Connects to the ingress of `config`'s coordinator, with its security settings.
    public convenience init(stepperID: String, config: FlowBusConfig, contentType: ContentType = .fbv) throws {
        try self.init(stepperID: stepperID, endpoint: config.endpoints.ingress, contentType: contentType, curve: config.curve)
    }

    /// The last sequence published.
    public var lastSequence: UInt64 { sequence }
    /// The highest sequence flowd acknowledged.
    public var lastAcknowledged: UInt64 { acknowledged }

    /// Publishes a step given by name and params.
    @discardableResult
    public func publish(_ name: String, _ params: WireParams = [:]) throws -> UInt64 {
        sequence += 1
        let message = StepMessage(
            stepperID: stepperID, envelope: Envelope(kind: .step, contentType: contentType, sequence: sequence, source: sourceID),
            name: name, params: params)
        try message.encode(into: &buffer)
        try socket.send(message: buffer)
        collectAcks()
        return sequence
    }

    /// Publishes a canonical step.
    @discardableResult
    public func publish(_ step: CanonicalStep) throws -> UInt64 {
        try publish(step.name, step.params)
    }

    /// Publishes a Swift enum step through its Codable form (`case moviePicked(withId: Int)` →
    /// `moviePicked` with params `withId`).
    @discardableResult
    public func publish<S: Step & Encodable>(_ step: S) throws -> UInt64 {
        let form = try canonicalForm(step)
        return try publish(form.name, form.params)
    }

    /// Publishes a deep link, which flowd sends to every active flow.
    @discardableResult
    public func publishDeepLink(_ name: String, _ params: WireParams = [:]) throws -> UInt64 {
        sequence += 1
        let message = DeepLinkMessage(
            envelope: Envelope(kind: .deepLink, contentType: contentType, sequence: sequence, source: sourceID), name: name, params: params)
        try message.encode(into: &buffer)
        try socket.send(message: buffer)
        return sequence
    }

    /// Reports what a renderer did with a presentable.
    @discardableResult
    public func report(_ event: PresentableEvent, for presentableID: String) throws -> UInt64 {
        sequence += 1
        let message = PresentableReport(
            envelope: Envelope(kind: .presentableReport, sequence: sequence, source: sourceID), presentableID: presentableID, event: event)
        try message.encode(into: &buffer)
        try socket.send(message: buffer)
        return sequence
    }

    /// Waits until flowd acknowledged everything published, or `timeout` passes.
    /// - Returns: whether everything was acknowledged.
    public func waitForAcknowledgement(timeout: Duration = .seconds(5)) throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while acknowledged < sequence {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return false }
            if try socket.receive(into: &received, mode: .within(left)) {
                record(received)
            }
        }
        return true
    }

    private func collectAcks() {
        while (try? socket.receive(into: &received, mode: .nonBlocking)) == true {
            record(received)
        }
    }

    private func record(_ frames: FrameBuffer) {
        switch try? WireMessage.decode(from: frames) {
        case .ack(let ack) where ack.acknowledgedSource == sourceID:
            acknowledged = max(acknowledged, ack.acknowledgedSequence)
        case .diagnostic(let diagnostic):
            refusals.append(diagnostic)
        default:
            break
        }
    }
}

@available(*, unavailable, message: "a publisher owns a socket: use it from one thread")
extension StepPublisher: Sendable {}
