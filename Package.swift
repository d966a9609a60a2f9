// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "FlowBus",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "ZeroMQ", targets: ["ZeroMQ"]),
        .library(name: "FlowBusWire", targets: ["FlowBusWire"]),
        .library(name: "Flows", targets: ["Flows"]),
        .library(name: "Reactors", targets: ["Reactors"]),
        .library(name: "FlowBus", targets: ["FlowBus"]),
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
        .target(
            name: "FlowBus",
            dependencies: [
                "ZeroMQ", "FlowBusWire", "Flows", "Reactors",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]
        ),
        .target(name: "FlowBusTesting", dependencies: ["FlowBus", "FlowBusWire", "Reactors"]),
        .target(
            name: "FlowBusPrometheus",
            dependencies: [
                "FlowBus",
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .target(
            name: "FlowBusPostgres",
            dependencies: [
                "FlowBus",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "flowd",
            dependencies: [
                "FlowBus", "FlowBusPrometheus", "FlowBusPostgres",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "flowctl",
            dependencies: [
                "FlowBus", "FlowBusPostgres", "FlowBusWire", "ZeroMQ",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "flowbench",
            dependencies: [
                "ZeroMQ", "FlowBusWire", "FlowBusTesting",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "movie-app",
            dependencies: [
                "FlowBus", "Flows",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            path: "Sources/Examples/movie-app"
        ),
        .executableTarget(
            name: "wire-smoke",
            dependencies: [
                "ZeroMQ", "FlowBusWire",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Sources/Examples/wire-smoke"
        ),
        .executableTarget(
            name: "reactor-host",
            dependencies: [
                "FlowBus", "FlowBusPrometheus", "FlowBusWire", "Reactors",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            path: "Sources/Examples/reactor-host"
        ),
        .executableTarget(
            name: "stepper-load",
            dependencies: [
                "FlowBus", "FlowBusWire",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Sources/Examples/stepper-load"
        ),
        .target(
            name: "FlowBusStudio",
            dependencies: [
                "FlowBus", "FlowBusWire", "Flows",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
            ],
            resources: [.copy("Page")]
        ),
        .executableTarget(
            name: "flowbus-studio",
            dependencies: [
                "FlowBus", "FlowBusStudio",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "ZeroMQTests", dependencies: ["ZeroMQ"]),
        .testTarget(name: "FlowBusWireTests", dependencies: ["FlowBusWire"], exclude: ["Fixtures"]),
        .testTarget(name: "FlowsTests", dependencies: ["Flows"]),
        .testTarget(name: "ReactorsTests", dependencies: ["Reactors"]),
        .testTarget(
            name: "FlowBusTests",
            dependencies: ["FlowBus", "FlowBusWire", "Flows", "Reactors", "ZeroMQ", .product(name: "Logging", package: "swift-log")]
        ),
        .testTarget(name: "FlowBusStudioTests", dependencies: ["FlowBusStudio", "FlowBus", "FlowBusWire"]),
        .testTarget(
            name: "FlowBusPostgresTests",
            dependencies: ["FlowBus", "FlowBusPostgres", "FlowBusTesting", "FlowBusWire", "ZeroMQ"]
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["FlowBus", "FlowBusTesting", "FlowBusWire", "Flows", "Reactors", "ZeroMQ"]
        ),
    ]
)

// One set of strictness settings for every target.
for target in package.targets where target.type != .system {
    target.swiftSettings = (target.swiftSettings ?? []) + [
        .swiftLanguageMode(.v6),
        .enableUpcomingFeature("ExistentialAny"),
        .enableUpcomingFeature("MemberImportVisibility"),
    ]
}
