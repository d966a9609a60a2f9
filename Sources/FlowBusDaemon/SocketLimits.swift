import FlowBusConfiguration

extension FlowBusConfig.Limits {
    /// libzmq's own limit, above the configured one: a frame between the two reaches FlowBus and is
    /// refused with an `oversize` diagnostic; only a larger one is cut off (the peer disconnected)
    /// before it is allocated.
    package var socketCeiling: Int64 {
        Int64(maxMessageBytes) * 4
    }
}
