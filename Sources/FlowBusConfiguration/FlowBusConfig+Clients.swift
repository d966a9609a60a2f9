import FlowBusClient
import FlowBusWire
import Logging
import ZeroMQ

// The clients take endpoints; these build them from a topology file's sections.

extension StepPublisher {
    /// Connects to the ingress of `config`'s coordinator, with its security settings.
    public convenience init(stepperID: String, config: FlowBusConfig, contentType: ContentType = .fbv) throws {
        try self.init(
            stepperID: stepperID, endpoints: config.ingressEndpoints, contentType: contentType, curve: config.curve,
            heartbeatMilliseconds: config.heartbeatMilliseconds)
    }
}

extension OutcomeWatcher {
    /// Subscribes to `config`'s events endpoint for steps of `stepperID` (and deep links).
    /// - Throws: ``ClientError`` when flowd sends no heartbeat within `timeout`.
    public convenience init(stepperID: String, config: FlowBusConfig, timeout: Duration = .seconds(5)) throws {
        try self.init(
            stepperID: stepperID, eventsEndpoints: config.eventsEndpoints, curve: config.curve, timeout: timeout)
    }
}

extension StepperProcess {
    /// A stepper for `stepperID` on the coordinator of `config`. It sends heartbeats and logs
    /// when flowd stops answering them and when it is back.
    public convenience init(
        stepperID: String, config: FlowBusConfig, contentType: ContentType = .fbv,
        logger: Logger = Logger(label: "flowbus.stepper")
    ) throws {
        self.init(
            publisher: try StepPublisher(stepperID: stepperID, config: config, contentType: contentType),
            controlEndpoints: config.controlEndpoints, curve: config.curve,
            heartbeat: .milliseconds(config.heartbeatMilliseconds),
            livenessIntervals: config.heartbeatLiveness, logger: logger)
    }
}

extension ReactorView {
    /// A view of `reactorID` on the host that serves it in `config` (`config.reactorHost(for:)`).
    /// - Throws: ``ClientError`` when no host of the config serves the id.
    public convenience init(
        reactorID: String, config: FlowBusConfig, contentType: ContentType = .fbv, context: Context? = nil
    ) throws {
        guard let host = config.reactorHost(for: reactorID) else {
            throw ClientError(
                .unknownReactor,
                "no reactor host serves \(reactorID): list it (or its family, e.g. movie/) under reactors.<host>.serves in the config"
            )
        }
        try self.init(
            reactorID: reactorID, actionsEndpoints: host.spec.actionsEndpoints,
            statesEndpoints: host.spec.statesEndpoints,
            contentType: contentType, curve: config.curve, heartbeatMilliseconds: config.heartbeatMilliseconds,
            context: context)
    }

}
