import FlowBusConfiguration
import FlowBusTools
import FlowBusWire
import Testing

@Suite("Flow graphs")
struct FlowGraphTests {
    let config: FlowBusConfig

    init() throws {
        config = try FlowBusConfig.parse(
            yaml: """
                endpoints: { ingress: ipc://a, events: ipc://b, control: ipc://c }
                coordinator: { flow: Main, step: start }
                flows:
                  Main:
                    steps:
                      start:
                        - setRoot: { screen: list, stepper: list }
                      settings:
                        - present: { flow: Settings, step: open }
                  Settings:
                    steps:
                      open:
                        - push: { screen: "settings/{id}" }
                      done:
                        - end: closed
                """, environment: [:])
    }

    @Test("Declared flows draw steps, screens, child flows and ends")
    func declared() {
        let graph = FlowGraph.declared(config)
        #expect(graph.nodes.contains { $0.id == "Main.start" && $0.group == "Main" })
        #expect(graph.edges.contains(.init(from: "Main.start", to: "screen:list", label: "setRoot")))
        #expect(graph.edges.contains(.init(from: "Main.settings", to: "Settings.open", label: "present Settings")))
        #expect(graph.edges.contains(.init(from: "Settings.done", to: "parent.closed", label: "end")))
        #expect(graph.edges.contains(.init(from: "start", to: "Main.start", label: "")))
        #expect(graph.dot.hasPrefix("digraph flowbus {"))
        #expect(graph.dot.contains("\"Main.start\" -> \"screen:list\" [label=\"setRoot\"];"))
        #expect(graph.mermaid.hasPrefix("flowchart LR"))
        #expect(graph.mermaid.contains("-->|\"present Settings\"|"))
    }

    @Test("The live tree draws containers, children and hidden presentables dimmed")
    func live() {
        let status: WireParams = [
            "flows": [
                [
                    "id": "Main#1",
                    "root": [
                        "id": "main", "kind": "stack", "visible": true,
                        "children": [
                            ["id": "list", "kind": "screen", "visible": false, "children": []],
                            ["id": "detail", "kind": "screen", "visible": true, "children": []],
                        ],
                    ],
                ]
            ]
        ]
        let graph = FlowGraph.live(status)
        #expect(graph.nodes.map(\.id) == ["Main#1:main", "Main#1:list", "Main#1:detail"])
        #expect(graph.nodes.first { $0.id == "Main#1:list" }?.dimmed == true)
        #expect(graph.edges.count == 2)
        #expect(graph.dot.contains("style=dashed"))
    }
}
