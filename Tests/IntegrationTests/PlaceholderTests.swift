import FlowBusClient
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusReactorHost
import FlowBusTesting
import FlowBusTools
import FlowBusWire
import Foundation
import TestFixtures
import Testing

@Suite("{param} placeholders: checked at start-up, refused as bad-params at run time")
struct PlaceholderTests {
    @Test("flowd refuses a config whose first step uses a param it cannot carry, with the rule and the fix; exit 64")
    func refusedAtStartUp() throws {
        let topology = try TestTopology(configYAML: durableFlowYAML)
        let bad = topology.directory.appendingPathComponent("bad.yaml").path
        try durableFlowYAML.replacingOccurrences(
            of: "setRoot: { screen: home,", with: "setRoot: { screen: \"home/{user}\","
        )
        .write(toFile: bad, atomically: true, encoding: .utf8)
        let refused = try topology.run("flowd", ["--config", bad])
        #expect(refused.status == 64, "a config error, as any other (ArgumentParser's validation error)")
        #expect(
            refused.output.contains("flows.LoadFlow.steps.start[0].setRoot.screen 'home/{user}' uses {user}"),
            "\(refused.output)")
        #expect(refused.output.contains("Write the id without {user}"), "\(refused.output)")
        #expect(!refused.output.contains("flowd listening"))
    }

    @Test("A step lacking a placeholder's key is refused as bad-params naming the key, not unknown-step")
    func refusedAtRunTime() throws {
        let topology = try TestTopology(configYAML: durableFlowYAML)
        try topology.startFlowd()
        let diagnostics = try topology.subscribe(["diag/"])
        let stepper = try StepPublisher(stepperID: "load", endpoint: topology.config.endpoints.ingress)
        _ = try stepper.publish("open", ["ident": 7])
        #expect(try stepper.waitForAcknowledgement(timeout: .seconds(10)))
        guard case .message(.diagnostic(let refused))? = try diagnostics.next(timeout: .seconds(5)) else {
            Issue.record("a diagnostic is published")
            return
        }
        #expect(refused.reason == .badParams)
        #expect(
            refused.message.contains("lacks param 'id'") && refused.message.contains("'detail/{id}'"),
            "\(refused.message)")
        #expect(refused.details["stepper"] == "load")
        let dropped = try topology.status()["totals"]?.mapValue?["dropped"]?.mapValue
        #expect(dropped?["bad-params"] == 1 && dropped?["unknown-step"] == nil, "\(String(describing: dropped))")
    }
}
