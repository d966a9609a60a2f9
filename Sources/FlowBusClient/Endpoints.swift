@_exported public import FlowBusWire

/// One endpoint as it is, several as "a, b or c": where a message may go when flowd runs as
/// several instances.
public func describeEither(_ endpoints: [String]) -> String {
    endpoints.count <= 1
        ? endpoints.first ?? "" : endpoints.dropLast().joined(separator: ", ") + " or " + endpoints.last!
}
