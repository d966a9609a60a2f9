import Flows
import Foundation
import Testing

/// A flow whose whole state is its navigation tree, so that its checkpoints can be restored.
@FlowActor
private final class TreeFlow: CheckpointableFlow {
    let stack: NavigationStack

    init(rootID: String = "tree") {
        stack = NavigationStack(id: rootID)
    }

    var root: any Presentable { stack }
    func navigate(to step: any Step) -> FlowContributors { .none }
}

@Suite("Checkpoint errors: a code for each thing a caller can tell apart")
@FlowActor
struct CheckpointErrorTests {
    /// The code of the error `body` throws; nil when it throws none, or not a CheckpointError.
    func code(_ body: () throws -> Void) -> CheckpointError.Code? {
        do {
            try body()
            return nil
        } catch {
            return (error as? CheckpointError)?.code
        }
    }

    /// A checkpoint of a coordinator running one ``TreeFlow``.
    func treeCheckpoint() async throws -> CoordinatorCheckpoint {
        let (coordinator, _) = makeCoordinator()
        await coordinator.coordinate(flow: TreeFlow())
        return try coordinator.checkpoint()
    }

    /// `checkpoint` with `text` in its JSON replaced by `replacement`.
    func edited(
        _ checkpoint: CoordinatorCheckpoint, _ text: String, _ replacement: String
    ) throws
        -> CoordinatorCheckpoint
    {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let json = String(decoding: try encoder.encode(checkpoint), as: UTF8.self)
        try #require(json.contains(text), "\(json)")
        return try JSONDecoder().decode(
            CoordinatorCheckpoint.self, from: Data(json.replacing(text, with: replacement).utf8))
    }

    @Test("A checkpoint is obstructed while a flow holding other state is coordinated")
    func obstructed() async {
        let (coordinator, _) = makeCoordinator()
        await coordinator.coordinate(flow: ScriptedFlow())
        #expect(code { _ = try coordinator.checkpoint() } == .obstructed)
    }

    @Test("A checkpoint of another format version is refused with unsupported-format")
    func unsupportedFormat() async throws {
        let checkpoint = try await treeCheckpoint()
        let future = try edited(
            checkpoint, "\"format\":\(CoordinatorCheckpoint.currentFormat)",
            "\"format\":\(CoordinatorCheckpoint.currentFormat + 1)")
        #expect(code { try FlowCoordinator().restore(future) { _ in TreeFlow() } } == .unsupportedFormat)
        #expect(CheckpointError.Code.unsupportedFormat.description == "unsupported-format")
        #expect(code { try FlowCoordinator().restore(checkpoint) { _ in TreeFlow() } } == nil)
    }

    @Test("Restoring into a coordinator in use, against another config, or a damaged checkpoint: each its code")
    func restoreRefusals() async throws {
        let checkpoint = try await treeCheckpoint()
        let (used, _) = makeCoordinator()
        await used.coordinate(flow: TreeFlow())
        #expect(code { try used.restore(checkpoint) { _ in TreeFlow() } } == .coordinatorNotNew)
        #expect(code { try FlowCoordinator().restore(checkpoint) { _ in nil } } == .configMismatch)
        #expect(
            code { try FlowCoordinator().restore(checkpoint) { _ in TreeFlow(rootID: "other") } } == .configMismatch)
        let damaged = try edited(checkpoint, "\"o\":0", "\"o\":99")
        #expect(code { try FlowCoordinator().restore(damaged) { _ in TreeFlow() } } == .inconsistent)
    }
}
