import FlowBusConfiguration
import FlowBusDaemon
import Logging
import Testing

@Suite("A daemon's command line (FlowBusHost)")
struct HostOptionsTests {
    @Test("--config, --host and --log-level, also as --name=value; the path resolves as every tool's does")
    func parses() throws {
        let options = try #require(
            try HostOptions.parse(["--config", "app.yaml", "--host=cart", "--log-level", "debug"]))
        #expect(options == HostOptions(config: "app.yaml", logLevel: .debug, host: "cart"))
        #expect(options.configPath == "app.yaml")
        #expect(try HostOptions.parse(["-c", "x.yaml"])?.config == "x.yaml")
        #expect(try HostOptions.parse([]) == HostOptions())
        #expect(try HostOptions.parse(["--help"]) == nil)
        #expect(try HostOptions.parse(["--log-format", "json"])?.logFormat == .json)
        #expect(try HostOptions.parse([])?.logFormat == nil, "unsaid: the config's logFormat decides")
    }

    @Test("An unknown argument, a missing value or a bad level is a usage error naming it")
    func refuses() {
        #expect { try HostOptions.parse(["--cofig", "x"]) } throws: { "\($0)" == "unknown argument '--cofig'" }
        #expect { try HostOptions.parse(["--host"]) } throws: { "\($0)" == "--host needs a value" }
        #expect { try HostOptions.parse(["--log-level", "loud"]) } throws: {
            "\($0)".contains("'loud' is not a log level")
        }
        #expect { try HostOptions.parse(["--log-format=xml"]) } throws: {
            "\($0)" == "'xml' is not a log format: use text or json"
        }
    }

    @Test("Each usage error carries a code a caller can match")
    func codes() {
        func code(_ arguments: [String]) -> HostUsageError.Code? {
            do {
                _ = try HostOptions.parse(arguments)
                return nil
            } catch {
                return error.code
            }
        }
        #expect(code(["--cofig", "x"]) == .unknownArgument)
        #expect(code(["--config"]) == .missingValue)
        #expect(code(["--log-level=loud"]) == .invalidValue)
        #expect(code(["--host", "cart"]) == nil)
        #expect(HostUsageError.Code.unknownArgument.description == "unknown-argument")
    }
}
