import FlowBusClient
import FlowBusConfiguration
import FlowBusWire
import Foundation
import Testing

@Suite("Topology config")
struct ConfigTests {
    let minimal = """
        endpoints:
          ingress: ipc://${RUN:-/tmp/fb}/in.sock
          events: ipc://${RUN:-/tmp/fb}/ev.sock
          control: ipc://${RUN:-/tmp/fb}/ctl.sock
        """

    @Test("${VAR:-default} takes the environment's value, else the default")
    func variableExpansion() throws {
        let fromDefault = try FlowBusConfig.parse(yaml: minimal, environment: [:])
        #expect(fromDefault.endpoints.ingress == "ipc:///tmp/fb/in.sock")
        let fromEnvironment = try FlowBusConfig.parse(yaml: minimal, environment: ["RUN": "/run/x"])
        #expect(fromEnvironment.endpoints.events == "ipc:///run/x/ev.sock")
        #expect(fromEnvironment.limits == FlowBusConfig.Limits())
        #expect(fromEnvironment.heartbeatMilliseconds == 1000)
    }

    @Test(
        "endpoints may list several flowd instances: clients get all of them, flowd --instance picks its own; a shared journal is required"
    )
    func severalInstances() throws {
        let instances = """
            endpoints:
              - { ingress: tcp://10.0.0.1:5560, events: tcp://10.0.0.1:5561, control: tcp://10.0.0.1:5562 }
              - { ingress: tcp://10.0.0.2:5560, events: tcp://10.0.0.2:5561, control: tcp://10.0.0.2:5562, metrics: tcp://10.0.0.2:9464 }

            """
        var config = try FlowBusConfig.parse(
            yaml: instances + "persistence: { postgres: \"postgres://flowd@db/flowbus\" }", environment: [:])
        #expect(config.ingressEndpoints == ["tcp://10.0.0.1:5560", "tcp://10.0.0.2:5560"])
        #expect(config.controlEndpoints == ["tcp://10.0.0.1:5562", "tcp://10.0.0.2:5562"])
        #expect(config.endpoints.ingress == "tcp://10.0.0.1:5560", "the first one, unless an instance is selected")
        try config.selectInstance(2)
        #expect(config.endpoints.events == "tcp://10.0.0.2:5561" && config.endpoints.metrics == "tcp://10.0.0.2:9464")
        #expect(config.eventsEndpoints.count == 2, "clients still follow both")
        #expect(throws: ConfigError.self) { try config.selectInstance(3) }

        #expect {
            try FlowBusConfig.parse(yaml: instances, environment: [:])
        } throws: { error in
            "\(error)".contains("endpoints lists 2 flowd instances, which must share one journal")
                && "\(error)".contains("persistence.postgres")
        }
        let shared = instances.replacingOccurrences(of: "10.0.0.2:5561", with: "10.0.0.1:5561")
        #expect {
            try FlowBusConfig.parse(
                yaml: shared + "persistence: { postgres: \"postgres://flowd@db/flowbus\" }", environment: [:])
        } throws: { error in
            "\(error)".contains("endpoints[1].events and endpoints[0].events are both 'tcp://10.0.0.1:5561'")
        }
        let misspelt = instances.replacingOccurrences(
            of: "control: tcp://10.0.0.2:5562", with: "contrl: tcp://10.0.0.2:5562")
        #expect {
            try FlowBusConfig.parse(
                yaml: misspelt + "persistence: { postgres: \"postgres://flowd@db/flowbus\" }", environment: [:])
        } throws: { error in
            "\(error)".contains("control") && "\(error)".contains("1")
        }
        var single = try FlowBusConfig.parse(yaml: minimal, environment: [:])
        #expect(single.flowdInstances.count == 1)
        single.endpoints.ingress = "ipc:///tmp/other.sock"
        #expect(single.ingressEndpoints == ["ipc:///tmp/other.sock"], "one instance: the list follows an edit")
    }

    @Test("A reactor host lists several instances sharing PostgreSQL; --instance picks one; mistakes are named")
    func reactorHostInstances() throws {
        let yaml = """
            endpoints: { ingress: "ipc:///tmp/i", events: "ipc:///tmp/e", control: "ipc:///tmp/c" }
            reactors:
              bank:
                instances:
                  - { actions: "tcp://10.0.0.1:5570", states: "tcp://10.0.0.1:5571" }
                  - { actions: "tcp://10.0.0.2:5570", states: "tcp://10.0.0.2:5571", metrics: "tcp://10.0.0.2:9464" }
                serves: [account/]
                persistence: { postgres: "postgres://u:p@db/flowbus", reactors: [account/], lease: { keepAliveMs: 100, timeoutMs: 500 } }
            """
        var config = try FlowBusConfig.parse(yaml: yaml)
        let bank = try #require(config.reactors["bank"])
        #expect(bank.actionsEndpoints == ["tcp://10.0.0.1:5570", "tcp://10.0.0.2:5570"])
        #expect(bank.statesEndpoints == ["tcp://10.0.0.1:5571", "tcp://10.0.0.2:5571"])
        #expect(bank.actions == "tcp://10.0.0.1:5570")
        #expect(bank.persistence?.lease == LeaseTimings(keepAliveMs: 100, timeoutMs: 500))
        #expect(throws: ConfigError.self) { try config.selectReactorInstance(nil, of: "bank") }
        try config.selectReactorInstance(2, of: "bank")
        #expect(config.reactors["bank"]?.states == "tcp://10.0.0.2:5571")
        #expect(config.reactors["bank"]?.metrics == "tcp://10.0.0.2:9464")
        #expect(throws: ConfigError.self) { try config.selectReactorInstance(3, of: "bank") }

        func refusal(_ yaml: String) -> String {
            do {
                _ = try FlowBusConfig.parse(yaml: yaml)
                return "accepted"
            } catch {
                return "\(error)"
            }
        }
        let sqlite = yaml.replacingOccurrences(
            of:
                #"{ postgres: "postgres://u:p@db/flowbus", reactors: [account/], lease: { keepAliveMs: 100, timeoutMs: 500 } }"#,
            with: "{ database: bank.sqlite, reactors: [account/] }")
        #expect(refusal(sqlite).contains("set reactors.bank.persistence.postgres"), "\(refusal(sqlite))")
        let both = yaml.replacingOccurrences(
            of: "serves: [account/]", with: "actions: tcp://10.0.0.3:1\n    serves: [account/]")
        #expect(refusal(both).contains("in each instance"), "\(refusal(both))")
        let twice = yaml.replacingOccurrences(of: "tcp://10.0.0.2:5571\"", with: "tcp://10.0.0.1:5571\"")
        #expect(refusal(twice).contains("are both"), "\(refusal(twice))")
    }

    @Test("wire.publish picks JSON (the default) or FBV; anything else names the choices")
    func wirePublish() throws {
        #expect(try FlowBusConfig.parse(yaml: minimal, environment: [:]).wire.publish == .json)
        #expect(
            try FlowBusConfig.parse(yaml: minimal + "\nwire: { publish: fbv }", environment: [:]).wire.publish == .fbv)
        #expect {
            try FlowBusConfig.parse(yaml: minimal + "\nwire: { publish: xml }", environment: [:])
        } throws: { error in
            "\(error)".contains("'xml' is not a content type to publish with: json or fbv")
        }
    }

    @Test("limits.controlRate and limits.controlBurst: 100 and 200 by default, positive, misspellings named")
    func controlRateLimits() throws {
        let defaults = try FlowBusConfig.parse(yaml: minimal, environment: [:]).limits
        #expect(defaults.controlRate == 100 && defaults.controlBurst == 200)
        let set = try FlowBusConfig.parse(
            yaml: minimal + "\nlimits: { controlRate: 2.5, controlBurst: 5 }", environment: [:]
        ).limits
        #expect(set.controlRate == 2.5 && set.controlBurst == 5)
        #expect {
            try FlowBusConfig.parse(yaml: minimal + "\nlimits: { controlRate: 0 }", environment: [:])
        } throws: { error in
            "\(error)".contains("limits.controlRate is 0.0")
        }
        #expect {
            try FlowBusConfig.parse(yaml: minimal + "\nlimits: { controlBrust: 5 }", environment: [:])
        } throws: { error in
            "\(error)".contains("limits.controlBrust (did you mean 'controlBurst'?)")
        }
    }

    @Test("limits.receiveHighWaterMark: 1000 by default, apart from highWaterMark, at least 1")
    func receiveHighWaterMark() throws {
        let defaults = try FlowBusConfig.parse(yaml: minimal, environment: [:]).limits
        #expect(defaults.receiveHighWaterMark == 1000 && defaults.highWaterMark == 100_000)
        let set = try FlowBusConfig.parse(
            yaml: minimal + "\nlimits: { receiveHighWaterMark: 50, highWaterMark: 7 }", environment: [:]
        ).limits
        #expect(set.receiveHighWaterMark == 50 && set.highWaterMark == 7)
        #expect {
            try FlowBusConfig.parse(yaml: minimal + "\nlimits: { receiveHighWaterMark: 0 }", environment: [:])
        } throws: { error in
            "\(error)".contains("limits.receiveHighWaterMark is 0: at least 1 expected")
        }
    }

    @Test("logFormat: text or json, for the daemons; anything else is refused with the choices")
    func logFormat() throws {
        #expect(try FlowBusConfig.parse(yaml: minimal, environment: [:]).logFormat == nil)
        #expect(try FlowBusConfig.parse(yaml: minimal + "\nlogFormat: json", environment: [:]).logFormat == .json)
        #expect {
            try FlowBusConfig.parse(yaml: minimal + "\nlogFormat: xml", environment: [:])
        } throws: { error in
            "\(error)".contains("'xml' is not a log format: text or json")
        }
    }

    @Test("A YAML syntax error names the line, the column and what the parser expected")
    func yamlSyntaxError() throws {
        #expect {
            try FlowBusConfig.parse(
                yaml: minimal + "\n   limits: { highWaterMark: 7 }", source: "c1.yaml", environment: [:])
        } throws: { error in
            "\(error)".contains("c1.yaml: YAML syntax error at line 5, column 10: mapping values are not allowed")
                && "\(error)".contains("   limits: { highWaterMark: 7 }\n         ^")
        }
        #expect {
            try FlowBusConfig.parse(yaml: minimal + "\nlimits: [1, 2", source: "c1.yaml", environment: [:])
        } throws: { error in
            "\(error)".contains(
                "c1.yaml: YAML syntax error at the end of the file: did not find expected ',' or ']' (while parsing a flow sequence, which started at line 5, column 9)"
            )
        }
    }

    @Test(
        "persistence.lease: 200 ms and 1 s by default, set per topology, for PostgreSQL only, the timeout ≥ 3 keep-alives"
    )
    func leaseTimings() throws {
        let postgres = "\npersistence:\n  postgres: postgres://flowd@db/flowbus\n"
        let defaults = try FlowBusConfig.parse(yaml: minimal + postgres, environment: [:]).persistence?.lease
        #expect(defaults == LeaseTimings(keepAliveMs: 200, timeoutMs: 1000))
        let set = try FlowBusConfig.parse(
            yaml: minimal + postgres + "  lease: { keepAliveMs: 100, timeoutMs: 400 }", environment: [:]
        ).persistence?.lease
        #expect(set == LeaseTimings(keepAliveMs: 100, timeoutMs: 400))
        #expect {
            try FlowBusConfig.parse(
                yaml: minimal + postgres + "  lease: { keepAliveMs: 200, timeoutMs: 500 }", environment: [:])
        } throws: { error in
            "\(error)".contains("persistence.lease.timeoutMs is 500: it must be at least 3 × keepAliveMs (600)")
        }
        #expect {
            try FlowBusConfig.parse(yaml: minimal + postgres + "  lease: { keepAliveMs: 5 }", environment: [:])
        } throws: { error in
            "\(error)".contains("persistence.lease.keepAliveMs is 5: it must be 10 or more")
        }
        #expect {
            try FlowBusConfig.parse(
                yaml: minimal + "\npersistence: { journal: flowd.sqlite, lease: { timeoutMs: 2000 } }", environment: [:]
            )
        } throws: { error in
            "\(error)".contains("persistence.lease applies to a journal several flowd share")
        }
        #expect {
            try FlowBusConfig.parse(yaml: minimal + postgres + "  lease: { keepAliveMS: 100 }", environment: [:])
        } throws: { error in
            "\(error)".contains("persistence.lease.keepAliveMS (did you mean 'keepAliveMs'?)")
        }
    }

    @Test("A {param} a step certainly lacks is refused at start-up with the rule's path, the placeholder and the fix")
    func placeholdersCheckedAtStartUp() throws {
        func config(_ flows: String) -> String {
            minimal + "\ncoordinator: { flow: Main, step: start }\nflows:\n" + flows
        }
        // The first step carries no params.
        #expect {
            try FlowBusConfig.parse(
                yaml: config(
                    """
                      Main:
                        steps:
                          start:
                            - setRoot: { screen: "home/{user}" }
                    """), environment: [:])
        } throws: { error in
            "\(error)".contains(
                "flows.Main.steps.start[0].setRoot.screen 'home/{user}' uses {user}, but step 'start' of Main is reached as coordinator.step, which carries no params"
            )
                && "\(error)".contains("Write the id without {user}")
        }
        // Passed on to a child flow's first step, then forwarded to its parent.
        #expect {
            try FlowBusConfig.parse(
                yaml: config(
                    """
                      Main:
                        steps:
                          start:
                            - present: { flow: Child, step: open }
                          back:
                            - push: { screen: x, stepper: "x/{id}" }
                      Child:
                        steps:
                          open:
                            - forwardToParent: back
                    """), environment: [:])
        } throws: { error in
            "\(error)".contains("flows.Main.steps.back[0].push.stepper 'x/{id}' uses {id}")
                && "\(error)".contains("forwarded to the parent with the params of flows.Child.steps.open[0]")
        }
        // A step reached from a stepper may carry anything: checked when it arrives (bad-params).
        _ = try FlowBusConfig.parse(
            yaml: config(
                """
                  Main:
                    steps:
                      start:
                        - setRoot: { screen: home, stepper: home }
                      picked:
                        - push: { screen: "item/{id}" }
                        - present: { flow: Child, step: open }
                  Child:
                    steps:
                      open:
                        - setRoot: { screen: "child/{id}" }
                """), environment: [:])
    }

    @Test("Unknown keys are refused with their path and the key they probably misspell")
    func unknownKeys() throws {
        let yaml =
            minimal + """

                heartbeatMilisecond: 50
                colour: blue
                limits: { maxSources: 10, metrics: ~ }
                coordinator: { flow: Main, step: start }
                flows:
                  Main:
                    root: stack
                    steps:
                      start:
                        - setRoot: { screen: home, steper: cart }
                      other: [none]
                """
        #expect {
            try FlowBusConfig.parse(yaml: yaml, environment: [:])
        } throws: { error in
            "\(error)".contains(
                "unknown keys: heartbeatMilisecond (did you mean 'heartbeatMilliseconds'?), colour, "
                    + "flows.Main.steps.start[0].setRoot.steper (did you mean 'stepper'?); remove or correct them")
        }
        // The demo's config, with every kind of section, has none.
        let demo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/demo.yaml").path
        _ = try FlowBusConfig.load(path: demo, environment: ["FLOWBUS_RUN_DIR": "/tmp/x"])
    }

    @Test("A variable without a default that is not set names the fix")
    func missingVariable() {
        #expect {
            try FlowBusConfig.parse(yaml: "endpoints: { ingress: ipc://${NOPE}/x }", environment: [:])
        } throws: { error in
            "\(error)".contains("NOPE is not set") && "\(error)".contains("${NOPE:-value}")
        }
    }

    @Test("A missing key is reported with its path")
    func missingKey() {
        #expect {
            try FlowBusConfig.parse(yaml: "endpoints: { ingress: ipc://a, events: ipc://b }", environment: [:])
        } throws: { error in
            "\(error)".contains("missing key 'control'") && "\(error)".contains("endpoints")
        }
    }

    @Test("A bad endpoint, an unknown root flow and an undeclared child flow are refused at load")
    func validation() {
        #expect(throws: ConfigError.self) {
            try FlowBusConfig.parse(
                yaml: "endpoints: { ingress: http://x, events: ipc://b, control: ipc://c }", environment: [:])
        }
        #expect {
            try FlowBusConfig.parse(yaml: minimal + "\ncoordinator: { flow: Main, step: start }\n", environment: [:])
        } throws: { "\($0)".contains("coordinator.flow 'Main' is not declared") }
        let undeclaredChild =
            minimal + """

                flows:
                  Main:
                    steps:
                      go:
                        - present: { flow: Ghost, step: start }
                """
        #expect {
            try FlowBusConfig.parse(yaml: undeclaredChild, environment: [:])
        } throws: { "\($0)".contains("starts flow 'Ghost'") }
    }

    @Test("coordinator.step and a child flow's first step must be in their flow's table, named with the fix")
    func missingSteps() {
        let rootless =
            minimal + """

                coordinator: { flow: Main, step: strt }
                flows: { Main: { steps: { start: [] } } }
                """
        #expect {
            try FlowBusConfig.parse(yaml: rootless, environment: [:])
        } throws: {
            "\($0)".contains(
                "coordinator.step 'strt' is not a step of flows.Main.steps (start): add it there, or name one of those (did you mean 'start'?)"
            )
        }
        let childless =
            minimal + """

                flows:
                  Main: { steps: { go: [{ present: { flow: Child, step: begin } }] } }
                  Child: { steps: { start: [] } }
                """
        #expect {
            try FlowBusConfig.parse(yaml: childless, environment: [:])
        } throws: {
            "\($0)".contains(
                "flows.Main.steps.go[0] starts Child with step 'begin', which flows.Child.steps lacks (start)")
        }
        let typo =
            minimal + """

                flows: { Main: { steps: { go: [] }, params: { og: { id: int } } } }
                """
        #expect {
            try FlowBusConfig.parse(yaml: typo, environment: [:])
        } throws: { "\($0)".contains("flows.Main.params.og declares params of a step flows.Main.steps lacks (go)") }
        let badType =
            minimal + """

                flows: { Main: { steps: { go: [] }, params: { go: { id: integer } } } }
                """
        #expect {
            try FlowBusConfig.parse(yaml: badType, environment: [:])
        } throws: { "\($0)".contains("'integer' is not a param type") }
    }

    @Test("${…} in launch: is left for `flowctl launch`; every other reader loads the file without those variables")
    func launchVariables() throws {
        let yaml =
            minimal + """

                launch:
                  - { name: flowd, command: ["${MY_BIN}/flowd", "--config", "${FLOWBUS_CONFIG}"] }
                heartbeatMilliseconds: ${BEAT:-250}
                """
        let plain = try FlowBusConfig.parse(yaml: yaml, environment: [:])
        #expect(plain.heartbeatMilliseconds == 250, "sections after launch: are still expanded")
        #expect(plain.launch?.first?.command.first == "${MY_BIN}/flowd")
        #expect(throws: ConfigError.self) {
            try FlowBusConfig.parse(yaml: yaml, environment: [:], expandingLaunch: true)
        }
        let launched = try FlowBusConfig.parse(
            yaml: yaml, environment: ["MY_BIN": "/opt/bin", "FLOWBUS_CONFIG": "app.yaml"], expandingLaunch: true)
        #expect(launched.launch?.first?.command == ["/opt/bin/flowd", "--config", "app.yaml"])
    }

    @Test("Every navigation rule form parses")
    func ruleForms() throws {
        let yaml =
            minimal + """

                flows:
                  Main:
                    root: stack
                    steps:
                      a:
                        - push: { screen: "movie/{id}", stepper: "movie/{id}", allowStepWhenNotPresented: true }
                        - setRoot: { screen: home }
                        - present: { screen: modal }
                        - present: { flow: Child, step: start }
                        - tabs: { id: tabs, flows: [{ flow: Child, step: start }], selected: 0 }
                        - selectTab: 1
                        - pop
                        - popToRoot: true
                        - dismiss
                        - forwardToParent: up
                        - forwardToCurrent: again
                        - end: done
                        - none
                  Child:
                    steps: { start: [] }
                """
        let config = try FlowBusConfig.parse(yaml: yaml, environment: [:])
        let rules = try #require(config.flows["Main"]?.steps["a"])
        #expect(rules.count == 13)
        #expect(
            rules[0]
                == .push(
                    ScreenSpec(
                        screen: "movie/{id}", stepper: "movie/{id}", allowStepWhenNotPresented: true,
                        allowStepWhenDismissed: nil)))
        #expect(rules[3] == .present(.flow(ChildFlowSpec(flow: "Child", step: "start"))))
        #expect(rules[6] == .pop)
        #expect(rules[7] == .popToRoot)
        #expect(rules[11] == .end("done"))
    }

    @Test("An unknown bare rule names the accepted ones")
    func unknownRule() {
        let yaml = minimal + "\nflows: { Main: { steps: { a: [jump] } } }\n"
        #expect {
            try FlowBusConfig.parse(yaml: yaml, environment: [:])
        } throws: { "\($0)".contains("unknown rule 'jump'") }
    }

    @Test("sampleActions: a name or one name with its params, by exact reactor id the host serves")
    func sampleActions() throws {
        let host = """
            reactors:
              demo:
                actions: ipc:///tmp/fb/a.sock
                states: ipc:///tmp/fb/s.sock
                serves: [counter, movie/]
                sampleActions:

            """
        let config = try FlowBusConfig.parse(
            yaml: minimal + "\n" + host + "      counter: [increase, { add: { by: 2 } }]\n      movie/7: [load]\n",
            environment: [:])
        #expect(
            config.reactors["demo"]?.sampleActions == [
                "counter": [.init(name: "increase"), .init(name: "add", params: ["by": .int(2)])],
                "movie/7": [.init(name: "load")],
            ])
        for (entry, message) in [
            ("      movie/: [load]\n", "reactors.demo.sampleActions.movie/ names the family movie/, not a reactor"),
            ("      login: [submit]\n", "reactors.demo.sampleActions.login: host demo does not serve login"),
            ("      counter: [{ a: {}, b: {} }]\n", "one name with its params"),
        ] {
            #expect {
                try FlowBusConfig.parse(yaml: minimal + "\n" + host + entry, environment: [:])
            } throws: { error in
                "\(error)".contains(message)
            }
        }
    }

    @Test("sampleSteps: by flow name, for flows written in Swift; a declared flow's are refused with the fix")
    func sampleSteps() throws {
        let swift = try FlowBusConfig.parse(
            yaml: minimal + "\nsampleSteps:\n  Shop: [open, { picked: { id: 7 } }]\n", environment: [:])
        #expect(swift.sampleSteps == ["Shop": [.init(name: "open"), .init(name: "picked", params: ["id": .int(7)])]])
        #expect {
            try FlowBusConfig.parse(
                yaml: minimal
                    + "\ncoordinator: { flow: Shop, step: open }\nflows:\n  Shop:\n    steps:\n      open: [{ setRoot: { screen: shop } }]\n"
                    + "sampleSteps:\n  Shop: [open]\n", environment: [:])
        } throws: { error in
            "\(error)".contains(
                "sampleSteps.Shop lists steps of a declared flow, whose steps flows.Shop.steps declares already: remove it"
            )
        }
    }

    @Test("tracing: is read as written; a bad endpoint, sampler, ratio or encoding is refused naming the key")
    func tracing() throws {
        let config = try FlowBusConfig.parse(
            yaml: minimal
                + "\ntracing: { endpoint: \"http://127.0.0.1:4318\", sampler: parentbased_traceidratio, ratio: 0.01, serviceName: flowd-eu }\n",
            environment: [:])
        #expect(
            config.tracing
                == TracingSpec(
                    endpoint: "http://127.0.0.1:4318", sampler: "parentbased_traceidratio", ratio: 0.01,
                    serviceName: "flowd-eu"))
        #expect(try FlowBusConfig.parse(yaml: minimal, environment: [:]).tracing == nil)
        for (entry, message) in [
            ("endpoint: 127.0.0.1:4318", "tracing.endpoint \"127.0.0.1:4318\" is not an http:// or https:// address"),
            ("sampler: sometimes", "tracing.sampler \"sometimes\" is unknown: use one of always_on"),
            ("ratio: 2", "tracing.ratio 2.0 is outside 0…1"),
            ("encoding: thrift", "tracing.encoding \"thrift\" is unknown: use protobuf or json"),
            ("samplr: always_on", "samplr"),
        ] {
            #expect {
                try FlowBusConfig.parse(yaml: minimal + "\ntracing: { \(entry) }\n", environment: [:])
            } throws: { error in
                "\(error)".contains(message)
            }
        }
    }

    @Test("The shipped demo config loads")
    func demoConfigLoads() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let config = try FlowBusConfig.load(
            path: root.appendingPathComponent("config/demo.yaml").path, environment: ["FLOWBUS_RUN_DIR": "/tmp/x"])
        #expect(config.coordinator == FlowBusConfig.Coordinator(flow: "MainFlow", step: "apiKey"))
        #expect(Set(config.flows.keys) == ["MainFlow", "WishlistFlow", "WatchedFlow", "SettingsFlow"])
        #expect(config.endpoints.ingress == "ipc:///tmp/x/ingress.sock")
    }

    @Test("The config path comes from --config, else FLOWBUS_CONFIG, else the default")
    func pathResolution() {
        #expect(FlowBusConfig.resolvePath("a.yaml", environment: [FlowBusConfig.pathVariable: "b.yaml"]) == "a.yaml")
        #expect(FlowBusConfig.resolvePath(nil, environment: [FlowBusConfig.pathVariable: "b.yaml"]) == "b.yaml")
        #expect(FlowBusConfig.resolvePath(nil, environment: [:]) == FlowBusConfig.defaultPath)
    }
}
