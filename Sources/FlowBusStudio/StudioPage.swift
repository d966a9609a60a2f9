#if Studio
import FlowBusClient
import FlowBusConfiguration
import FlowBusTools
import FlowBusWire
import Foundation
import Hummingbird
import NIOCore

/// The page's files (`Page/` in the module's resources) and what it is told about the topology.
enum StudioPage {
    static let contentTypes = [
        "html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8",
    ]

    /// A file of the page, by name; only plain names of files that exist (no paths).
    static func resource(_ name: String) throws -> Response {
        let parts = name.split(separator: ".")
        guard parts.count == 2, !name.contains("/"), let type = contentTypes[String(parts[1])],
            let url = Bundle.module.url(
                forResource: String(parts[0]), withExtension: String(parts[1]), subdirectory: "Page"),
            let data = try? Data(contentsOf: url)
        else { throw HTTPError(.notFound) }
        return Response(
            status: .ok, headers: [.contentType: type, .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// The declared flows (steps and the screens they show, with their steppers), the graph
    /// `flowctl graph` draws, the reactors served. Endpoints and keys are left out: the page holds
    /// no secrets.
    static func configJSON(config: FlowBusConfig, configPath: String?, allowPublish: Bool) -> String {
        var flows: WireParams = [:]
        for (name, spec) in config.flows {
            var screens: WireParams = [:]
            for rules in spec.steps.values {
                for rule in rules {
                    switch rule {
                    case .push(let screen), .setRoot(let screen), .present(.screen(let screen)):
                        screens[screen.screen] = screen.stepper.map { .string($0) } ?? .null
                    case .tabs(let tabs):
                        screens[tabs.id] = tabs.stepper.map { .string($0) } ?? .null
                    default: break
                    }
                }
            }
            flows[name] = .map([
                "root": .string(spec.root.rawValue), "id": .string(spec.id ?? name.lowercased()),
                "steps": .list(spec.steps.keys.sorted().map { .string($0) }), "screens": .map(screens),
            ])
        }
        let graph = FlowGraph.declared(config)
        let document: WireParams = [
            "config": .string(configPath ?? ""), "allow_publish": .bool(allowPublish), "flows": .map(flows),
            "reactors": .list(
                config.reactors.sorted { $0.key < $1.key }.flatMap { host in host.value.serves.map { .string($0) } }),
            "graph": .map([
                "nodes": .list(
                    graph.nodes.map { node in
                        .map([
                            "id": .string(node.id),
                            "label": .string(node.label.replacingOccurrences(of: "\\n", with: "\n")),
                            "shape": .string(node.shape.rawValue), "group": node.group.map { .string($0) } ?? .null,
                        ])
                    }),
                "edges": .list(
                    graph.edges.map {
                        .map(["from": .string($0.from), "to": .string($0.to), "label": .string($0.label)])
                    }),
            ]),
        ]
        return (try? WireJSON.string(.map(document))) ?? "{}"
    }
}
#endif
