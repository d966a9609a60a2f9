import FlowBusTesting
import FlowBusWire
import ZeroMQ

/// Receives one message within `timeout`, polling in short slices; fails early, with the child's
/// output, if `child` exits without having sent anything.
func receive(
    _ socket: Socket, within timeout: Duration, from child: ManagedProcess? = nil, what: String = "a message"
) throws -> [[UInt8]] {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while clock.now < deadline {
        if let frames = try socket.receiveMessage(mode: .timeout(milliseconds: 50)) { return frames }
        if let child, !child.isRunning {
            if let frames = try socket.receiveMessage(mode: .timeout(milliseconds: 200)) { return frames }
            throw HarnessError(.exited, "\(child.name) exited before \(what) arrived\n\(child.transcript)")
        }
    }
    throw HarnessError(
        .timedOut, "\(what) did not arrive within \(timeout)" + (child.map { "\n\($0.transcript)" } ?? ""))
}

/// Receives and fully decodes one message (no routing id: a DEALER's view).
func receiveDecoded(_ socket: Socket, within timeout: Duration, what: String) throws -> WireMessage {
    let frames = try receive(socket, within: timeout, what: what)
    return try WireMessage.decode(from: FrameBuffer(frames: frames))
}

extension WireMessageEncodable {
    /// The frames, for `Socket.send(message:)`.
    func frames() throws -> [[UInt8]] { try encoded().frames }
}
