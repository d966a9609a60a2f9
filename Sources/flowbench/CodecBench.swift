import FlowBusWire

/// One in-process codec measurement: the operation and how many it ran per second.
struct CodecResult: Sendable {
    var key: String
    var what: String
    var opsPerSecond: Double
}

/// Rates of the FlowBusWire operations on the benchmark step, in this process.
///
/// Each operation runs in batches of 1 000 until `seconds` have passed, reusing its buffers as
/// the runtime does (encoders write into a reused buffer; decoders read a received buffer).
struct CodecBench {
    var seconds: Double

    func run() throws -> [CodecResult] {
        let step = try BenchMessage.step()
        let frames = try step.encoded()
        let fbvParams = WirePayload(contentType: .fbv, bytes: frames.frameBytes(3))
        let jsonBytes: [UInt8] = try {
            var bytes: [UInt8] = []
            try WireJSON.encode(params: BenchMessage.params, into: &bytes)
            return bytes
        }()
        let jsonParams = WirePayload(contentType: .json, bytes: jsonBytes[...])

        var results: [CodecResult] = []
        func measure(_ key: String, _ what: String, _ body: () throws -> Void) rethrows {
            results.append(CodecResult(key: key, what: what, opsPerSecond: try rate(body)))
        }

        var envelopeBytes: [UInt8] = []
        envelopeBytes.reserveCapacity(256)
        try measure("envelope_encode", "Envelope.encode(into:) reused [UInt8]") {
            envelopeBytes.removeAll(keepingCapacity: true)
            try step.envelope.encode(into: &envelopeBytes)
        }
        var buffer = FrameBuffer()
        var message = step
        try measure("step_encode", "StepMessage.encode(into:) reused FrameBuffer") {
            message.envelope.sequence &+= 1
            try message.encode(into: &buffer)
        }
        blackHole(buffer)
        var sink: UInt64 = 0
        try measure("routed_header_decode", "RoutedHeader.decode(from:)") {
            sink &+= try RoutedHeader.decode(from: frames).envelope.sequence
        }
        try measure("named_view_decode", "NamedMessageView.decode(from:), params left raw") {
            sink &+= UInt64(try NamedMessageView.decode(from: frames).name.utf8.count)
        }
        try measure("wire_message_decode", "WireMessage.decode(from:), params decoded") {
            sink &+= try WireMessage.decode(from: frames).envelope.sequence
        }
        try measure("fbv_params_decode", "WirePayload.decodeParams(), FBV \(fbvParams.bytes.count) B") {
            sink &+= UInt64(try fbvParams.decodeParams().count)
        }
        try measure("json_params_decode", "WirePayload.decodeParams(), JSON \(jsonBytes.count) B") {
            sink &+= UInt64(try jsonParams.decodeParams().count)
        }
        // What `wire.publish` costs flowd per step whose params it encodes again (a didNavigate).
        for (key, contentType) in [("did_navigate_encode_fbv", ContentType.fbv), ("did_navigate_encode_json", .json)] {
            var event = NavigationEventMessage(
                phase: .did,
                envelope: Envelope(kind: .didNavigate, contentType: contentType, sequence: 1, source: "flowd#bench"),
                flow: "BenchFlow", stepName: step.name, params: BenchMessage.params,
                presentableID: BenchMessage.stepperID)
            try measure(key, "NavigationEventMessage.encode(into:), params in \(contentType)") {
                event.envelope.sequence &+= 1
                try event.encode(into: &buffer)
            }
        }
        blackHole(buffer)
        blackHole(sink)
        return results
    }

    private func rate(_ body: () throws -> Void) rethrows -> Double {
        // Warm up caches and allocator, then measure.
        for _ in 0..<1_000 { try body() }
        let budget = Int64(seconds * 1e9)
        let start = monotonicNanoseconds()
        var operations = 0
        var elapsed: Int64 = 0
        repeat {
            for _ in 0..<1_000 { try body() }
            operations += 1_000
            elapsed = monotonicNanoseconds() - start
        } while elapsed < budget
        return Double(operations) / (Double(elapsed) / 1e9)
    }
}
