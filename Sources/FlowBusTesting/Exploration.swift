public import FlowBusTools
import Foundation

extension TestTopology {
    /// Explores this topology's declared flows with flowd's engine, without the daemons: what can
    /// never happen, each with its config path (see `FlowExplorer` in FlowBusTools). `flowctl explore` prints it.
    public func explore(limits: FlowExplorer.Limits = FlowExplorer.Limits()) async throws -> FlowExploration {
        try await FlowExplorer(config: config).explore(limits: limits)
    }

    /// Walks this topology's flows at random on daemons of the walk's own (a fresh coordinator and
    /// reactor hosts in a run directory each, not this topology's processes): `count` messages
    /// drawn with `seed` among the declared flows' steps, `sampleSteps` and `sampleActions`,
    /// checked after each, a failure shrunk (see `FlowWalker` in FlowBusTools). `flowctl explore
    /// --walk` prints it.
    ///
    /// - Parameters:
    ///   - restarts: Times the coordinator is stopped and started again on a journal during the walk.
    ///   - kill: Restarts kill the coordinator (SIGKILL) instead of stopping it.
    ///   - renderer: Also send renderer reports (appeared, disappeared, dismissed).
    ///   - coordinator: The coordinator executable, a product built by this package (`flowd`, or
    ///     an app's own that runs flows written in Swift) or a path.
    public func walk(
        count: Int, seed: UInt64, restarts: Int = 0, kill: Bool = false, renderer: Bool = false,
        coordinator: String = "flowd"
    ) async throws
        -> FlowWalker.Report
    {
        let executable = coordinator.contains("/") ? coordinator : try BuiltProducts.executable(coordinator).path
        return try await FlowWalker(
            config: config, configPath: configPath, flowd: executable, restarts: restarts, kill: kill,
            renderer: renderer
        )
        .walk(count: count, seed: seed)
    }
}
