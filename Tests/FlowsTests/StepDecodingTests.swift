import Flows
import Testing

private enum AddressStep: Step, Codable, Equatable {
    case addressEntered(zip: String)
    case confirmed
}

@Suite("Typed steps from canonical ones")
struct StepDecodingTests {
    @Test("A case whose params do not fit is refused with the decoding error; an unknown case is nil")
    func decodingFailures() throws {
        let wrongType = CanonicalStep("addressEntered", ["zip": 75001]).decoded(as: AddressStep.self)
        let refused = try #require(wrongType as? RefusedStep)
        #expect(refused.reason == .unknownStep)
        #expect(
            refused.message
                == "its params do not fit AddressStep.addressEntered: expected String for zip, got int 75001")
        let missing = try #require(CanonicalStep("addressEntered").decoded(as: AddressStep.self) as? RefusedStep)
        #expect(missing.message.hasSuffix("missing param 'zip'"), "\(missing.message)")
        #expect(CanonicalStep("nosuch").decoded(as: AddressStep.self) == nil)
        #expect(
            CanonicalStep("addressEntered", ["zip": "75001"]).decoded(as: AddressStep.self) as? AddressStep
                == .addressEntered(zip: "75001"))
        #expect(CanonicalStep("confirmed").decoded(as: AddressStep.self) as? AddressStep == .confirmed)
    }

    @Test("A step says whether it is a canonical step without a cast: itself if it is, nil for any other")
    func canonicalStepWithoutACast() {
        let canonical: any Step = CanonicalStep("addressEntered", ["zip": "75001"])
        #expect(canonical.canonicalStep == CanonicalStep("addressEntered", ["zip": "75001"]))
        let typed: any Step = AddressStep.confirmed
        #expect(typed.canonicalStep == nil)
        let refused: any Step = RefusedStep(reason: .unknownStep, message: "no")
        #expect(refused.canonicalStep == nil)
    }
}
