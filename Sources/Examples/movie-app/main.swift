// The movie demo's flows written in Swift instead of YAML: an app's own coordinator daemon.
//
// It runs the same CoordinatorService as flowd, on the endpoints of a topology file, with typed
// steps (a Codable enum) and flows that may adapt steps and run side effects.
import FlowBusConfiguration
import FlowBusCoordinator
import FlowBusDaemon
import Flows

/// The app's steps; Codable gives their wire form (`moviePicked(withMovieId:)` → `moviePicked`
/// with params `withMovieId`).
enum AppStep: Step, Codable, Equatable {
    case apiKey, apiKeyIsComplete, movieList, settings, settingsDone
    case moviePicked(withMovieId: Int)
    case castPicked(withCastId: Int)
}

@FlowActor
protocol AppFlow: Flow {}

extension AppFlow {
    /// Incoming canonical steps become AppSteps; anything else is refused as unknown-step, with
    /// the decoding error when the case exists but its params do not fit.
    func step(from canonical: CanonicalStep) -> (any Step)? {
        canonical.decoded(as: AppStep.self)
    }
}

final class MainFlow: AppFlow {
    let stack = NavigationStack(id: "main")
    var root: any Presentable { stack }
    var adaptsSteps: Bool { false }

    func navigate(to step: any Step) -> FlowContributors {
        guard let step = step as? AppStep else { return .none }
        switch step {
        case .apiKey:
            let screen = Screen(id: "apikey")
            stack.setRoot(screen)
            return .one(
                flowContributor: .contribute(withNextPresentable: screen, withNextStepper: RemoteStepper(id: "apikey")))
        case .apiKeyIsComplete:
            let dashboard = TabBar(id: "dashboard")
            let wishlist = MovieListFlow(name: "WishlistFlow", prefix: "wishlist")
            let watched = MovieListFlow(name: "WatchedFlow", prefix: "watched")
            dashboard.setTabs([wishlist, watched])
            stack.setRoot(dashboard)
            return .multiple(
                .contribute(
                    withNextPresentable: wishlist, withNextStepper: OneStepper(withSingleStep: AppStep.movieList)),
                .contribute(
                    withNextPresentable: watched, withNextStepper: OneStepper(withSingleStep: AppStep.movieList)),
                .contribute(withNextPresentable: dashboard, withNextStepper: RemoteStepper(id: "dashboard")))
        default:
            return .none
        }
    }
}

final class MovieListFlow: AppFlow {
    let name: String
    let stack: NavigationStack
    var flowName: String { name }
    var root: any Presentable { stack }

    init(name: String, prefix: String) {
        self.name = name
        self.stack = NavigationStack(id: prefix)
    }

    /// Swift flows can adapt steps: a movie id below 1 is shown as the list instead.
    func adapt(step: any Step) async throws -> any Step {
        if case AppStep.moviePicked(let id)? = step as? AppStep, id < 1 { return AppStep.movieList }
        return step
    }

    private func show(_ id: String, bound: Bool) -> FlowContributors {
        let screen = Screen(id: "\(stack.presentableID)/\(id)")
        stack.push(screen)
        guard bound else { return .none }
        return .one(
            flowContributor: .contribute(
                withNextPresentable: screen, withNextStepper: RemoteStepper(id: screen.presentableID)))
    }

    func navigate(to step: any Step) -> FlowContributors {
        guard let step = step as? AppStep else { return .none }
        switch step {
        case .movieList: return show("movies", bound: true)
        case .moviePicked(let id): return show("movie/\(id)", bound: true)
        case .castPicked(let id): return show("cast/\(id)", bound: false)
        default: return .none
        }
    }
}

/// A coordinator of one's own: `FlowBusHost` reads `--config` (else `$FLOWBUS_CONFIG`) and
/// `--log-level`, logs to standard error, and stops the service on SIGTERM or SIGINT.
@main
struct MovieApp {
    static func main() async {
        await FlowBusHost.main(label: "movie-app") { config, _, logger in
            [
                CoordinatorService(config: config, logger: logger) {
                    (flow: MainFlow(), stepper: OneStepper(withSingleStep: AppStep.apiKey))
                }
            ]
        }
    }
}
