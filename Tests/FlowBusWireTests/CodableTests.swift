import Foundation
import Testing

@testable import FlowBusWire

struct Movie: Codable, Equatable {
    var id: Int
    var title: String
    var rating: Double
    var tags: [String]
    var director: String?
    var year: UInt16
    var flags: [Bool]
    var ratio: Float
    var extra: WireValue
}

enum MovieStep: Codable, Equatable {
    case moviePicked(withId: Int)
    case settings
    case castPicked(withId: Int64, name: String)
    case unlabeled(Int, String)
    case note(text: String?)
    case movieDetail(movie: Movie)
    case userIsLoggedIn
}

enum Tab: String, Codable, Equatable {
    case home, settings
}

let sampleMovie = Movie(
    id: 23452, title: "Amélie", rating: 8.3, tags: ["drama", "paris"], director: nil, year: 2001,
    flags: [true, false], ratio: 1.5, extra: ["any": [1, "two", nil]])

class CodableBase: Codable {
    var base = 1
    init() {}
}

final class CodableChild: CodableBase {
    var child = "c"
    enum Keys: String, CodingKey { case child, matrix }
    override init() { super.init() }
    required init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Keys.self)
        child = try container.decode(String.self, forKey: .child)
        try super.init(from: container.superDecoder())
    }
    override func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(child, forKey: .child)
        var matrix = container.nestedUnkeyedContainer(forKey: .matrix)
        var row = matrix.nestedUnkeyedContainer()
        try row.encode(1)
        try row.encodeNil()
        try super.encode(to: container.superEncoder())
    }
}

@Suite struct CodableTests {
    @Test func structRoundTrip() throws {
        let value = try WireValueEncoder().encode(sampleMovie)
        #expect(
            value
                == .map([
                    "id": 23452, "title": "Amélie", "rating": 8.3, "tags": ["drama", "paris"], "year": 2001,
                    "flags": [true, false], "ratio": 1.5, "extra": ["any": [1, "two", nil]],
                ]))
        #expect(try WireValueDecoder().decode(Movie.self, from: value) == sampleMovie)
        var withDirector = sampleMovie
        withDirector.director = "Jeunet"
        #expect(
            try WireValueDecoder().decode(Movie.self, from: WireValueEncoder().encode(withDirector)) == withDirector)
    }

    @Test func sameShapeAsFoundationJSON() throws {
        // The wire form of a value equals what JSONEncoder writes, parsed by our JSON reader.
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let foundation = try WireJSON.decode(Array(try encoder.encode(MovieStep.movieDetail(movie: sampleMovie))))
        #expect(try WireValueEncoder().encode(MovieStep.movieDetail(movie: sampleMovie)) == foundation)
    }

    @Test func canonicalStepForms() throws {
        let cases: [(MovieStep, String, WireParams)] = [
            (.moviePicked(withId: 23452), "moviePicked", ["withId": 23452]),
            (.settings, "settings", [:]),
            (.castPicked(withId: -1, name: "Audrey"), "castPicked", ["withId": -1, "name": "Audrey"]),
            (.unlabeled(7, "x"), "unlabeled", ["_0": 7, "_1": "x"]),
            (.note(text: nil), "note", [:]),
            (.note(text: "hi"), "note", ["text": "hi"]),
            (.userIsLoggedIn, "userIsLoggedIn", [:]),
        ]
        for (step, name, params) in cases {
            let form = try canonicalForm(step)
            #expect(form.name == name)
            #expect(form.params == params)
            #expect(try decodeCanonical(MovieStep.self, name: name, params: params) == step)
        }
        #expect(
            try WireValueEncoder().encode(MovieStep.moviePicked(withId: 23452)) == ["moviePicked": ["withId": 23452]])
        #expect(try WireValueEncoder().encode(MovieStep.settings) == ["settings": [:]])
        let detail = try canonicalForm(MovieStep.movieDetail(movie: sampleMovie))
        #expect(
            try decodeCanonical(MovieStep.self, name: detail.name, params: detail.params)
                == .movieDetail(movie: sampleMovie))
    }

    @Test func canonicalThroughTheWire() throws {
        // Swift enum → step message (FBV and JSON) → decode → Swift enum.
        for contentType in [ContentType.json, .fbv] {
            let (name, params) = try canonicalForm(MovieStep.castPicked(withId: 5, name: "Mathieu"))
            let buffer = try StepMessage(
                stepperID: "cast", envelope: envelope(.step, contentType), name: name, params: params
            ).encoded()
            let view = try NamedMessageView.decode(from: buffer)
            let step = try decodeCanonical(MovieStep.self, name: view.name, params: try view.params.decodeParams())
            #expect(step == .castPicked(withId: 5, name: "Mathieu"))
        }
    }

    @Test func rawValueEnumsUseTheBareName() throws {
        let form = try canonicalForm(Tab.settings)
        #expect(form.name == "settings" && form.params.isEmpty)
        #expect(try decodeCanonical(Tab.self, name: "home", params: [:]) == .home)
    }

    @Test func canonicalErrors() throws {
        #expect(throws: WireError.self) { try canonicalForm(sampleMovie) }
        #expect(throws: WireError.self) { try canonicalForm(42) }
        enum Odd: Codable { case café }
        #expect(throws: WireError.self) { try canonicalForm(Odd.café) }
        #expect(throws: DecodingError.self) { try decodeCanonical(MovieStep.self, name: "unknownStep", params: [:]) }
        #expect(throws: DecodingError.self) {
            try decodeCanonical(MovieStep.self, name: "moviePicked", params: ["withId": "x"])
        }
        #expect(throws: DecodingError.self) { try decodeCanonical(MovieStep.self, name: "moviePicked", params: [:]) }
        #expect(throws: DecodingError.self) { try decodeCanonical(Tab.self, name: "profile", params: [:]) }
    }

    @Test func numericConversions() throws {
        let decoder = WireValueDecoder()
        #expect(try decoder.decode(Int.self, from: .double(3.0)) == 3)
        #expect(try decoder.decode(Double.self, from: .int(3)) == 3.0)
        #expect(try decoder.decode(UInt8.self, from: .int(255)) == 255)
        #expect(throws: DecodingError.self) { try decoder.decode(UInt8.self, from: .int(256)) }
        #expect(throws: DecodingError.self) { try decoder.decode(Int.self, from: .double(3.5)) }
        #expect(throws: DecodingError.self) { try decoder.decode(Int.self, from: .string("3")) }
        #expect(throws: DecodingError.self) { try decoder.decode(String.self, from: .null) }
        #expect(try decoder.decode(Int?.self, from: .null) == nil)
        #expect(try WireValueEncoder().encode(UInt64(Int64.max)) == .int(.max))
        #expect(throws: EncodingError.self) { try WireValueEncoder().encode(UInt64.max) }
        #expect(try WireValueEncoder().encode([Int8(-1), 2]) == [-1, 2])
        #expect(try WireValueEncoder().encode(["k": Float(0.5)]) == ["k": 0.5])
        #expect(try WireValueEncoder().encode(Int?.none) == .null)
    }

    @Test func nestedContainersAndSuperEncoders() throws {
        let value = try WireValueEncoder().encode(CodableChild())
        #expect(value == ["child": "c", "matrix": [[1, nil]], "super": ["base": 1]])
        #expect(try WireValueDecoder().decode(CodableChild.self, from: value).child == "c")
    }

    @Test func wireValueIsCodableThroughFoundation() throws {
        let value: WireValue = ["a": [1, 2.5, "x", true, nil], "b": [:]]
        let data = try JSONEncoder().encode(value)
        #expect(try JSONDecoder().decode(WireValue.self, from: data) == value)
    }
}
