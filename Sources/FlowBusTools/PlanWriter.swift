import FlowBusWire

/// Writes an exploration's plans as test files a user keeps: pytest with the `flowbus` plugin, or
/// Swift Testing with FlowBusTesting. Each plan is one test that starts the topology afresh, sends
/// its messages in order and asserts, after each, the didNavigate events (exactly, in order), the
/// refusal's reason, and flowd's tree (its status `flows`).
public enum PlanWriter {
    /// A pytest module; run it with `pytest --flowbus-config CONFIG FILE`.
    public static func pytest(_ exploration: FlowExploration, config: String) -> String {
        var lines = [
            "\"\"\"Plans of \(config), written by `flowctl explore --write-pytest`: each drives the real daemons",
            "from a fresh start and asserts every didNavigate and flowd's tree after each message.",
            "Run: pytest --flowbus-config \(config) THIS_FILE\"\"\"",
            "",
            "import pytest",
            "",
            "from flowbus import Dropped",
            "",
            "",
            "@pytest.fixture",
            "def flowbus_topology(flowbus_topologies):",
            "    \"\"\"flowd alone: the plans send steps and deep links only.\"\"\"",
            "    return flowbus_topologies(launch=False, hosts=[])",
        ]
        for (index, plan) in exploration.plans.enumerated() {
            lines += [
                "", "", "def test_plan_\(index + 1)(flowbus_topology):",
                "    navigation = flowbus_topology.navigation()",
            ]
            for step in plan.steps {
                let params = step.message.step.params.isEmpty ? "" : ", **\(python(.map(step.message.step.params)))"
                let name = python(.string(step.message.step.name))
                let send =
                    step.message.stepperID.map { "flowbus_topology.step(\(python(.string($0))), \(name)\(params))" }
                    ?? "flowbus_topology.deeplink(\(name)\(params))"
                if let refusal = step.refusals.first, step.navigations.isEmpty, let stepperID = step.message.stepperID {
                    lines += ["    with pytest.raises(Dropped, match=\(python(.string(refusal)))):", "        \(send)"]
                    for reason in step.refusals {
                        lines.append(
                            "    navigation.expect_diagnostic(\(python(.string(reason))), stepper=\(python(.string(stepperID))))"
                        )
                    }
                } else {
                    lines.append("    \(send)")
                }
                if !step.navigations.isEmpty {
                    let expected = step.navigations.map { navigation in
                        let text = python(.string("\(navigation.flow).\(navigation.step)"))
                        return navigation.params.isEmpty ? text : "(\(text), \(python(.map(navigation.params))))"
                    }
                    lines.append("    navigation.expect(\(expected.joined(separator: ", ")))")
                }
                lines.append("    assert flowbus_topology.tree() == \(python(step.tree))")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// A Swift Testing file; run it with `swift test` from the package root (the config path is
    /// relative to it).
    public static func swiftTesting(_ exploration: FlowExploration, config: String) -> String {
        var lines = [
            "// Plans of \(config), written by `flowctl explore --write-swift`: each drives the real flowd",
            "// from a fresh start and asserts every didNavigate and flowd's tree after each message.",
            "import FlowBusTesting",
            "import FlowBusWire",
            "import Testing",
            "",
            "@Suite(\"Explored plans of \(config)\", .serialized)",
            "struct ExploredPlans {",
        ]
        for (index, plan) in exploration.plans.enumerated() {
            lines += [
                "    @Test(\"plan \(index + 1)\")", "    func plan\(index + 1)() throws {",
                "        try withTopology(configFile: \(swiftString(config))) { topology in",
                "            try topology.startFlowd()", "            let trace = try topology.navigationTrace()",
            ]
            for step in plan.steps {
                let name = swiftString(step.message.step.name)
                let params = swift(.map(step.message.step.params))
                if let stepperID = step.message.stepperID {
                    lines.append("            try topology.step(\(name), \(params), as: \(swiftString(stepperID)))")
                } else {
                    lines.append("            try topology.deepLink(\(name), \(params))")
                }
                if step.navigations.isEmpty, let stepperID = step.message.stepperID {
                    for reason in step.refusals {
                        lines.append(
                            "            try trace.expectDiagnostic(DiagnosticReason(rawValue: \(swiftString(reason))), stepper: \(swiftString(stepperID)))"
                        )
                    }
                }
                if !step.navigations.isEmpty {
                    let expected = step.navigations.map {
                        "Navigation(flow: \(swiftString($0.flow)), step: \(swiftString($0.step)), \(swift(.map($0.params))))"
                    }
                    lines.append("            try trace.expect([\(expected.joined(separator: ", "))])")
                }
                let tree = (try? WireJSON.string(step.tree)) ?? "[]"
                lines.append("            #expect(try topology.status()[\"flows\"] == WireJSON.decode(#\"\(tree)\"#))")
            }
            lines += ["        }", "    }"]
        }
        lines.append("}")
        return lines.joined(separator: "\n") + "\n"
    }

    /// A Python literal of `value`: JSON's string escapes are Python's too.
    package static func python(_ value: WireValue) -> String {
        switch value {
        case .null: "None"
        case .bool(let flag): flag ? "True" : "False"
        case .int(let number): String(number)
        case .double(let number): "\(number)"
        case .string: (try? WireJSON.string(value)) ?? "\"\""
        case .list(let items): "[" + items.map(python).joined(separator: ", ") + "]"
        case .map(let map):
            "{"
                + map.sorted { $0.key < $1.key }.map { "\(python(.string($0.key))): \(python($0.value))" }
                .joined(separator: ", ") + "}"
        }
    }

    /// A Swift string literal of `text`.
    static func swiftString(_ text: String) -> String {
        var literal = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": literal += "\\\\"
            case "\"": literal += "\\\""
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                literal += "\\u{\(String(scalar.value, radix: 16))}"
            default: literal.unicodeScalars.append(scalar)
            }
        }
        return literal + "\""
    }

    /// A Swift `WireValue` literal of a step's params (strings, numbers, bools and nested
    /// containers are literals of `WireValue`).
    package static func swift(_ value: WireValue) -> String {
        switch value {
        case .null: "nil"
        case .bool(let flag): flag ? "true" : "false"
        case .int(let number): String(number)
        case .double(let number): "\(number)"
        case .string(let text): swiftString(text)
        case .list(let items): "[" + items.map(swift).joined(separator: ", ") + "]"
        case .map(let map):
            map.isEmpty
                ? "[:]"
                : "["
                    + map.sorted { $0.key < $1.key }.map { "\(swiftString($0.key)): \(swift($0.value))" }
                    .joined(separator: ", ") + "]"
        }
    }
}
