/// The language-neutral form of a step as it travels on the bus: a name and named, typed
/// parameters. `moviePicked(withMovieId: 23452)` is name `moviePicked`, params `["withMovieId": 23452]`.
///
/// A declared (table-driven) flow navigates on `CanonicalStep` directly; a typed Swift flow turns
/// it into its own step type through `Flow/step(from:)` or a decoder registered with
/// `FlowCoordinator/setStepDecoder(_:forFlowNamed:)`.
public struct CanonicalStep: Sendable, Hashable, CustomStringConvertible {
    /// The step's name, e.g. `moviePicked`.
    public var name: String
    /// The step's parameters, e.g. `["withMovieId": 23452]`.
    public var params: WireParams

    /// Creates a canonical step.
    /// - Parameters:
    ///   - name: the step's name.
    ///   - params: its parameters; none by default.
    public init(name: String, params: WireParams = [:]) {
        self.name = name
        self.params = params
    }

    /// Creates a canonical step: `CanonicalStep("moviePicked", ["withMovieId": 23452])`.
    public init(_ name: String, _ params: WireParams = [:]) {
        self.init(name: name, params: params)
    }

    /// The canonical `home` step, the initial step of `DefaultStepper`.
    public static let home = CanonicalStep(name: "home")

    /// The step as Swift would print the matching enum case: `movieList`,
    /// `moviePicked(withMovieId: 23452)` (parameters sorted by name).
    public var description: String {
        if params.isEmpty { return name }
        let arguments = params.sorted { $0.key < $1.key }
            .map { entry -> String in
                if case .string(let text) = entry.value { return "\(entry.key): \"\(text)\"" }
                return "\(entry.key): \(entry.value.displayText)"
            }
        return "\(name)(\(arguments.joined(separator: ", ")))"
    }
}
