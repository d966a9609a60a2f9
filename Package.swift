// swift-tools-version: 6.1
import PackageDescription

// Modules by what they are and what they weigh (docs/ARCHITECTURE.md has the map):
// an app that only publishes steps or sends actions links FlowBusClient, that is ZeroMQ and
// FlowBusWire; PostgreSQL (NIO, BoringSSL) and the studio (Hummingbird) are traits, off by default.
let logging = Target.Dependency.product(name: "Logging", package: "swift-log")
let argumentParser = Target.Dependency.product(name: "ArgumentParser", package: "swift-argument-parser")
let serviceLifecycle = Target.Dependency.product(name: "ServiceLifecycle", package: "swift-service-lifecycle")
let unixSignals = Target.Dependency.product(name: "UnixSignals", package: "swift-service-lifecycle")
let grdb = Target.Dependency.product(name: "GRDB", package: "GRDB.swift")
/// SQLite's own calls, for the journal's hot insert (GRDB's system SQLite module).
let sqlite = Target.Dependency.product(name: "GRDBSQLite", package: "GRDB.swift")
let coreMetrics = Target.Dependency.product(name: "CoreMetrics", package: "swift-metrics")
/// The tracing API (spans, W3C context propagation); no exporter, no NIO.
let tracing = Target.Dependency.product(name: "Tracing", package: "swift-distributed-tracing")

let package = Package(
    name: "FlowBus",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "ZeroMQ", targets: ["ZeroMQ"]),
        .library(name: "FlowBusWire", targets: ["FlowBusWire"]),
        .library(name: "Flows", targets: ["Flows"]),
        .library(name: "Reactors", targets: ["Reactors"]),
        .library(name: "FlowBusClient", targets: ["FlowBusClient"]),
        .library(name: "FlowBusConfiguration", targets: ["FlowBusConfiguration"]),
        .library(name: "FlowBusDaemon", targets: ["FlowBusDaemon"]),
        .library(name: "FlowBusCoordinator", targets: ["FlowBusCoordinator"]),
        .library(name: "FlowBusReactorHost", targets: ["FlowBusReactorHost"]),
        .library(name: "FlowBusTools", targets: ["FlowBusTools"]),
        .library(name: "FlowBusTesting", targets: ["FlowBusTesting"]),
        .library(name: "FlowBusPrometheus", targets: ["FlowBusPrometheus"]),
        .library(name: "FlowBusPostgres", targets: ["FlowBusPostgres"]),
        .executable(name: "flowd", targets: ["flowd"]),
        .executable(name: "flowctl", targets: ["flowctl"]),
        .executable(name: "flowbench", targets: ["flowbench"]),
        .executable(name: "wire-smoke", targets: ["wire-smoke"]),
        .executable(name: "reactor-host", targets: ["reactor-host"]),
        .executable(name: "movie-app", targets: ["movie-app"]),
        .executable(name: "stepper-load", targets: ["stepper-load"]),
        .executable(name: "flowbus-studio", targets: ["flowbus-studio"]),
    ],
    traits: [
        .trait(
            name: "PostgreSQL",
            description:
                "flowd and reactor hosts on a shared PostgreSQL journal with a standby (postgres-nio, NIO, BoringSSL)"),
        .trait(name: "Studio", description: "flowbus-studio, the live web page and Foxglove bridge (Hummingbird)"),
        .trait(
            name: "Tracing",
            description: "daemons and flowctl export spans over OTLP/HTTP (swift-otel, NIO, AsyncHTTPClient)"),
        .default(enabledTraits: []),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.0.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.0.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.0.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.21.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.20.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.6.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.1.0"),
        .package(url: "https://github.com/swift-otel/swift-otel", from: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        .systemLibrary(
            name: "CZeroMQ",
            pkgConfig: "libzmq",
            providers: [.apt(["libzmq3-dev"])]
        ),
        .target(name: "ZeroMQ", dependencies: ["CZeroMQ"]),
        .target(name: "FlowBusWire"),
        .target(name: "Flows", dependencies: ["FlowBusWire"]),
        .target(name: "Reactors"),
        // The protocol's rules as I/O-free state machines; `package` access, not public API.
        .target(name: "FlowBusProtocol", dependencies: ["FlowBusWire"]),
        // What an app links to publish steps, send actions and read events and states.
        .target(name: "FlowBusClient", dependencies: ["ZeroMQ", "FlowBusWire", "FlowBusProtocol", logging]),
        // The topology file: its model and validation; no sockets, no engine.
        .target(
            name: "FlowBusConfiguration",
            dependencies: ["FlowBusWire", "FlowBusClient", .product(name: "Yams", package: "Yams")]),
        // Spans for every hop of a message and, with the Tracing trait, their OTLP export.
        .target(
            name: "FlowBusTracing",
            dependencies: [
                "FlowBusWire", "FlowBusConfiguration", tracing, logging, serviceLifecycle,
                .product(name: "OTel", package: "swift-otel", condition: .when(traits: ["Tracing"])),
            ]),
        // What every daemon runs: the loop, the router endpoint, the publisher, hosting.
        .target(
            name: "FlowBusDaemon",
            dependencies: [
                "ZeroMQ", "FlowBusWire", "FlowBusProtocol", "FlowBusClient", "FlowBusConfiguration", "FlowBusTracing",
                logging, serviceLifecycle, unixSignals, coreMetrics,
            ]),
        .target(
            name: "FlowBusCoordinator",
            dependencies: [
                "FlowBusDaemon", "FlowBusProtocol", "FlowBusClient", "FlowBusConfiguration", "FlowBusTracing", "Flows",
                grdb, sqlite, coreMetrics, tracing,
            ]),
        .target(
            name: "FlowBusReactorHost",
            dependencies: [
                "FlowBusDaemon", "FlowBusProtocol", "FlowBusClient", "FlowBusConfiguration", "FlowBusTracing",
                "Reactors",
                grdb, coreMetrics, tracing,
            ]),
        .target(
            name: "FlowBusTools",
            dependencies: [
                "FlowBusClient", "FlowBusConfiguration", "FlowBusDaemon", "FlowBusCoordinator", "Flows", grdb,
            ]),
        .target(
            name: "FlowBusTesting",
            dependencies: [
                "FlowBusClient", "FlowBusConfiguration", "FlowBusProtocol", "FlowBusTools", "FlowBusWire", "Reactors",
                "ZeroMQ",
            ]),
        .target(
            name: "FlowBusPrometheus",
            dependencies: [
                "FlowBusDaemon",
                coreMetrics,
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .target(
            name: "FlowBusPostgres",
            dependencies: [
                "FlowBusCoordinator", "FlowBusConfiguration", "FlowBusDaemon", "FlowBusWire",
                .product(name: "PostgresNIO", package: "postgres-nio", condition: .when(traits: ["PostgreSQL"])),
                logging,
            ]
        ),
        .executableTarget(
            name: "flowd",
            dependencies: [
                "FlowBusCoordinator", "FlowBusDaemon", "FlowBusConfiguration", "FlowBusPrometheus", argumentParser,
                logging,
                .target(name: "FlowBusPostgres", condition: .when(traits: ["PostgreSQL"])),
            ]
        ),
        .executableTarget(
            name: "flowctl",
            dependencies: [
                "FlowBusClient", "FlowBusConfiguration", "FlowBusCoordinator", "FlowBusDaemon", "FlowBusTools",
                "FlowBusTracing", "FlowBusWire", "ZeroMQ", argumentParser, .product(name: "Yams", package: "Yams"),
                tracing, serviceLifecycle,
                .target(name: "FlowBusPostgres", condition: .when(traits: ["PostgreSQL"])),
            ]
        ),
        .executableTarget(
            name: "flowbench",
            dependencies: [
                "ZeroMQ", "FlowBusWire", "FlowBusTesting", "FlowBusConfiguration", argumentParser,
                // The traced scenarios' OTLP/HTTP sink.
                .product(name: "Hummingbird", package: "hummingbird", condition: .when(traits: ["Tracing"])),
            ]
        ),
        .executableTarget(
            name: "movie-app",
            dependencies: [
                "FlowBusCoordinator", "FlowBusDaemon", "FlowBusConfiguration", "Flows", argumentParser, logging,
            ],
            path: "Sources/Examples/movie-app"
        ),
        .executableTarget(
            name: "wire-smoke",
            dependencies: ["ZeroMQ", "FlowBusWire", argumentParser],
            path: "Sources/Examples/wire-smoke"
        ),
        .executableTarget(
            name: "reactor-host",
            dependencies: [
                "FlowBusReactorHost", "FlowBusDaemon", "FlowBusConfiguration", "FlowBusPrometheus", "FlowBusWire",
                "Reactors", argumentParser, logging,
                .target(name: "FlowBusPostgres", condition: .when(traits: ["PostgreSQL"])),
            ],
            path: "Sources/Examples/reactor-host"
        ),
        // flowbench's and the integration tests' reactors (bench, ticker, tally/) behind a real reactor host;
        // built with the package, so it lands beside flowd in the bin directory, but not a product.
        .executableTarget(
            name: "fixture-reactors",
            dependencies: [
                "FlowBusReactorHost", "FlowBusDaemon", "FlowBusConfiguration", "FlowBusPrometheus", "FlowBusWire",
                "Reactors", argumentParser, logging,
                .target(name: "FlowBusPostgres", condition: .when(traits: ["PostgreSQL"])),
            ],
            path: "Sources/Fixtures/fixture-reactors"
        ),
        .executableTarget(
            name: "stepper-load",
            dependencies: ["FlowBusClient", "FlowBusConfiguration", "FlowBusWire", argumentParser],
            path: "Sources/Examples/stepper-load"
        ),
        .target(
            name: "FlowBusStudio",
            dependencies: [
                "FlowBusClient", "FlowBusConfiguration", "FlowBusTools", "FlowBusTracing", "FlowBusWire", "Flows",
                logging,
                .product(name: "Hummingbird", package: "hummingbird", condition: .when(traits: ["Studio"])),
                .product(
                    name: "HummingbirdWebSocket", package: "hummingbird-websocket", condition: .when(traits: ["Studio"])
                ),
            ],
            resources: [.copy("Page")]
        ),
        .executableTarget(
            name: "flowbus-studio",
            dependencies: [
                "FlowBusStudio", "FlowBusConfiguration", "FlowBusDaemon", "FlowBusTracing", argumentParser, logging,
                serviceLifecycle,
            ]
        ),
        // Flows and reactors the tests share; not shipped.
        .target(
            name: "TestFixtures", dependencies: ["FlowBusConfiguration", "FlowBusCoordinator", "FlowBusWire", grdb],
            path: "Tests/TestFixtures"),
        .testTarget(name: "ZeroMQTests", dependencies: ["ZeroMQ"]),
        .testTarget(name: "FlowBusWireTests", dependencies: ["FlowBusWire"], exclude: ["Fixtures"]),
        .testTarget(name: "FlowsTests", dependencies: ["Flows"]),
        .target(name: "ReactorFixtures", dependencies: ["Reactors"], path: "Tests/ReactorFixtures"),
        .testTarget(name: "ReactorsTests", dependencies: ["Reactors", "ReactorFixtures"]),
        .testTarget(name: "FlowBusProtocolTests", dependencies: ["FlowBusProtocol", "FlowBusWire"]),
        .testTarget(
            name: "FlowBusTracingTests",
            dependencies: ["FlowBusTracing", "FlowBusConfiguration", "FlowBusWire", logging]),
        .testTarget(
            name: "FlowBusClientTests", dependencies: ["FlowBusClient", "FlowBusProtocol", "FlowBusWire", "ZeroMQ"]),
        .testTarget(
            name: "FlowBusConfigurationTests", dependencies: ["FlowBusConfiguration", "FlowBusClient", "FlowBusWire"]),
        .testTarget(
            name: "FlowBusDaemonTests",
            dependencies: [
                "FlowBusDaemon", "FlowBusClient", "FlowBusConfiguration", "FlowBusProtocol", "FlowBusWire", "ZeroMQ",
                logging,
            ]),
        .testTarget(
            name: "FlowBusCoordinatorTests",
            dependencies: [
                "FlowBusCoordinator", "FlowBusConfiguration", "FlowBusWire", "Flows", "TestFixtures", logging,
            ]),
        .testTarget(
            name: "FlowBusReactorHostTests",
            dependencies: [
                "FlowBusReactorHost", "FlowBusClient", "FlowBusConfiguration", "FlowBusWire", "ReactorFixtures",
                "Reactors", "ZeroMQ", logging, grdb,
            ]),
        .testTarget(
            name: "FlowBusToolsTests",
            dependencies: [
                "FlowBusTools", "FlowBusClient", "FlowBusConfiguration", "FlowBusCoordinator", "FlowBusReactorHost",
                "FlowBusWire", "Reactors", "TestFixtures", logging,
            ]),
        .testTarget(
            name: "FlowBusStudioTests",
            dependencies: ["FlowBusStudio", "FlowBusClient", "FlowBusConfiguration", "FlowBusWire", logging]),
        .testTarget(
            name: "FlowBusPostgresTests",
            dependencies: [
                "FlowBusCoordinator", "FlowBusConfiguration", "FlowBusPostgres", "FlowBusTesting", "FlowBusClient",
                "FlowBusWire", "TestFixtures", "ZeroMQ",
            ]
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "FlowBusClient", "FlowBusConfiguration", "FlowBusCoordinator", "FlowBusReactorHost", "FlowBusTesting",
                "FlowBusTools", "FlowBusWire", "Flows", "Reactors", "TestFixtures", "ZeroMQ",
            ]
        ),
    ]
)

// One set of strictness settings for every target.
for target in package.targets where target.type != .system {
    target.swiftSettings =
        (target.swiftSettings ?? []) + [
            .swiftLanguageMode(.v6),
            .enableUpcomingFeature("ExistentialAny"),
            .enableUpcomingFeature("MemberImportVisibility"),
        ]
}
