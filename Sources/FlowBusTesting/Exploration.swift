public import FlowBusTools

extension TestTopology {
    /// Explores this topology's declared flows with flowd's engine, without the daemons: what can
    /// never happen, each with its config path (see `FlowExplorer` in FlowBusTools). `flowctl explore` prints it.
    public func explore(limits: FlowExplorer.Limits = FlowExplorer.Limits()) async throws -> FlowExploration {
        try await FlowExplorer(config: config).explore(limits: limits)
    }
}
