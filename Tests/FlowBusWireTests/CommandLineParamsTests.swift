import FlowBusWire
import Testing

@Suite("Params from a command line")
struct CommandLineParamsTests {
    @Test("key=value reads bools, ints, doubles and strings; key:=JSON any value")
    func values() throws {
        let params = try CommandLineParams.parse([
            "id=23452", "ratio=0.5", "big=1e3", "ok=true", "title=Heat", "code:=\"23\"", "tags:=[1,2]", "neg=-4",
        ])
        #expect(
            params == [
                "id": 23452, "ratio": 0.5, "big": 1000.0, "ok": true, "title": "Heat", "code": "23", "tags": [1, 2],
                "neg": -4,
            ])
    }

    @Test("Malformed arguments are refused with what is wrong")
    func errors() {
        func message(_ arguments: [String]) -> String {
            do {
                _ = try CommandLineParams.parse(arguments)
                return ""
            } catch {
                return error.description
            }
        }
        #expect(message(["withMovieId"]).contains("is not key=value"))
        #expect(message(["=1"]).contains("empty key"))
        #expect(message(["a=1", "a=2"]).contains("given twice"))
        #expect(message(["n=99999999999999999999"]).contains("64-bit"))
        // A huge argument is quoted, not echoed whole.
        let huge = message(["n=" + String(repeating: "7", count: 300)])
        #expect(huge.contains("\"" + String(repeating: "7", count: 64) + "…\" (300 digits) does not fit"), "\(huge)")
        #expect(huge.count < 200, "\(huge)")
        #expect(message([String(repeating: "k", count: 300)]).count < 150)
        #expect(message(["j:={"]).contains("not JSON"))
        // Not a JSON number: kept as text.
        #expect((try? CommandLineParams.parse(["v=007"])) == ["v": "007"])
    }

    @Test("Each malformed argument carries a code a caller can match")
    func codes() {
        func code(_ arguments: [String]) -> ParamSyntaxError.Code? {
            do {
                _ = try CommandLineParams.parse(arguments)
                return nil
            } catch {
                return error.code
            }
        }
        #expect(code(["withMovieId"]) == .malformed)
        #expect(code(["=1"]) == .malformed)
        #expect(code(["a=1", "a:=2"]) == .duplicateKey)
        #expect(code(["j:={"]) == .invalidJSON)
        #expect(code(["n=99999999999999999999"]) == .outOfRange)
        #expect(code(["x=1e999"]) == .outOfRange)
        #expect(code(["a=1", "b:=[2]"]) == nil)
        #expect(ParamSyntaxError.Code.duplicateKey.description == "duplicate-key")
    }
}
