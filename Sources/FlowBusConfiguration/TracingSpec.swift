/// `tracing:` — where a process sends its spans (OTLP/HTTP) and which it keeps. Off unless this
/// section or the standard `OTEL_*` environment variables say otherwise; the environment wins
/// over the file (docs/TRACING.md).
///
/// ```yaml
/// tracing:
///   endpoint: http://127.0.0.1:4318   # OTLP/HTTP collector; spans go to <endpoint>/v1/traces
///   sampler: parentbased_traceidratio # as OTEL_TRACES_SAMPLER
///   ratio: 0.01                       # as OTEL_TRACES_SAMPLER_ARG
/// ```
public struct TracingSpec: Codable, Sendable, Hashable {
    /// The OTLP/HTTP collector's base address (`http://host:4318`).
    public var endpoint: String?
    /// One of ``samplers``; default `parentbased_always_on`.
    public var sampler: String?
    /// The share of root traces kept by the `…traceidratio` samplers, 0…1.
    public var ratio: Double?
    /// The `service.name` of the spans; default: the process's own name (`flowd`, `reactor-host auth`, …).
    public var serviceName: String?
    /// Export as `protobuf` (default) or `json`.
    public var encoding: String?

    /// The sampler names OpenTelemetry's `OTEL_TRACES_SAMPLER` takes that FlowBus supports.
    public static let samplers = [
        "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
        "parentbased_traceidratio",
    ]

    public init(
        endpoint: String? = nil, sampler: String? = nil, ratio: Double? = nil, serviceName: String? = nil,
        encoding: String? = nil
    ) {
        self.endpoint = endpoint
        self.sampler = sampler
        self.ratio = ratio
        self.serviceName = serviceName
        self.encoding = encoding
    }

    /// Refuses a value FlowBus cannot use, naming the key and what it takes.
    func validate(source: String) throws(ConfigError) {
        if let endpoint, !(endpoint.hasPrefix("http://") || endpoint.hasPrefix("https://")) {
            throw ConfigError(
                .invalid,
                "\(source): tracing.endpoint \"\(endpoint)\" is not an http:// or https:// address (OTLP/HTTP, e.g. http://127.0.0.1:4318)"
            )
        }
        if let sampler, !Self.samplers.contains(sampler) {
            throw ConfigError(
                .invalid,
                "\(source): tracing.sampler \"\(sampler)\" is unknown: use one of \(Self.samplers.joined(separator: ", "))"
            )
        }
        if let ratio, !(0...1).contains(ratio) {
            throw ConfigError(.invalid, "\(source): tracing.ratio \(ratio) is outside 0…1")
        }
        if let encoding, !["protobuf", "json"].contains(encoding) {
            throw ConfigError(.invalid, "\(source): tracing.encoding \"\(encoding)\" is unknown: use protobuf or json")
        }
    }
}
