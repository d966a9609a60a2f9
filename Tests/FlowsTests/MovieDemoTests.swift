import FlowBusWire
import Flows
import Testing

/// The RxFlow demo the seeds describe: api key onboarding, then a dashboard of two tabs
/// (Wishlist, Watched), each a stack movie list → movie detail → cast detail; settings as a
/// modal child flow that ends.
enum AppStep: Step, Equatable {
    case apiKey, apiKeyIsComplete, movieList
    case moviePicked(withMovieId: Int)
    case castPicked(withCastId: Int)
    case settings, settingsDone, about

    /// What the runtime's Codable-based decoder would do.
    init?(_ step: CanonicalStep) {
        switch step.name {
        case "apiKey": self = .apiKey
        case "apiKeyIsComplete": self = .apiKeyIsComplete
        case "movieList": self = .movieList
        case "moviePicked":
            guard let id = step.params["withMovieId"]?.intValue else { return nil }
            self = .moviePicked(withMovieId: Int(id))
        case "castPicked":
            guard let id = step.params["withCastId"]?.intValue else { return nil }
            self = .castPicked(withCastId: Int(id))
        case "settings": self = .settings
        case "settingsDone": self = .settingsDone
        case "about": self = .about
        default: return nil
        }
    }
}

@FlowActor
protocol AppFlow: Flow {}

extension AppFlow {
    func step(from canonical: CanonicalStep) -> (any Step)? { AppStep(canonical) }
}

final class MainFlow: AppFlow {
    let stack = NavigationStack(id: "main")
    var root: any Presentable { stack }

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
        case .settings:
            let settings = SettingsFlow()
            stack.present(settings)
            return .one(
                flowContributor: .contribute(
                    withNextPresentable: settings,
                    withNextStepper: OneStepper(withSingleStep: AppStep.settings)))
        case .settingsDone:
            stack.dismissPresented()
            return .none
        default:
            return .none
        }
    }
}

final class MovieListFlow: AppFlow {
    let name: String
    let prefix: String
    let stack: NavigationStack
    var flowName: String { name }
    var root: any Presentable { stack }

    init(name: String, prefix: String) {
        self.name = name
        self.prefix = prefix
        self.stack = NavigationStack(id: prefix)
    }

    private func show(_ id: String, bound: Bool) -> FlowContributors {
        let screen = Screen(id: "\(prefix)/\(id)")
        stack.push(screen)
        guard bound else { return .none }  // cast detail contributes nothing
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

final class SettingsFlow: AppFlow {
    let stack = NavigationStack(id: "settings")
    var root: any Presentable { stack }

    func navigate(to step: any Step) -> FlowContributors {
        guard let step = step as? AppStep else { return .none }
        switch step {
        case .settings:
            let list = Screen(id: "settings/list")
            stack.setRoot(list)
            return .one(
                flowContributor: .contribute(
                    withNextPresentable: list, withNextStepper: RemoteStepper(id: "settings/list")))
        case .about:
            stack.push(Screen(id: "settings/about"))
            return .none
        case .settingsDone:
            return .end(forwardToParentFlowWithStep: AppStep.settingsDone)
        default:
            return .none
        }
    }
}

@Suite("Movie demo")
@FlowActor
struct MovieDemoTests {
    @Test("The movie demo produces the exact didNavigate trace")
    func movieDemoTrace() async {
        let (coordinator, log) = makeCoordinator()
        let main = MainFlow()
        await coordinator.coordinate(flow: main, with: OneStepper(withSingleStep: AppStep.apiKey))
        await coordinator.receive(CanonicalStep("apiKeyIsComplete"), from: "apikey")
        await coordinator.waitUntilReady([main])
        await coordinator.receive(CanonicalStep("moviePicked", ["withMovieId": 23452]), from: "wishlist/movies")
        await coordinator.receive(CanonicalStep("castPicked", ["withCastId": 2]), from: "wishlist/movie/23452")

        // The Watched tab is not selected: its list's step is dropped, and reported.
        let hidden = await coordinator.receive(CanonicalStep("moviePicked", ["withMovieId": 1]), from: "watched/movies")
        #expect(hidden == [.dropped(.notVisible, flow: FlowID(name: "WatchedFlow", instance: 1))])
        // The user switches tabs in the renderer, which reports it.
        coordinator.report(.appeared, for: "watched/movies")
        await coordinator.receive(CanonicalStep("moviePicked", ["withMovieId": 1]), from: "watched/movies")

        await coordinator.receive(CanonicalStep("settings"), from: "dashboard")
        await coordinator.receive(CanonicalStep("about"), from: "settings/list")
        await coordinator.receive(CanonicalStep("settingsDone"), from: "settings/list")  // about covers the list
        coordinator.report(.dismissed, for: "settings/about")  // the user swipes back
        await coordinator.receive(CanonicalStep("settingsDone"), from: "settings/list")
        // The old api key screen is gone: its stepper's late step is reported, not lost.
        await coordinator.receive(CanonicalStep("apiKeyIsComplete"), from: "apikey")

        #expect(
            log.lines.filter { $0.hasPrefix("did navigate") } == [
                "did navigate flow=MainFlow#1 step=apiKey",
                "did navigate flow=MainFlow#1 step=apiKeyIsComplete",
                "did navigate flow=WishlistFlow#1 step=movieList",
                "did navigate flow=WatchedFlow#1 step=movieList",
                "did navigate flow=WishlistFlow#1 step=moviePicked(withMovieId: 23452)",
                "did navigate flow=WishlistFlow#1 step=castPicked(withCastId: 2)",
                "did navigate flow=WatchedFlow#1 step=moviePicked(withMovieId: 1)",
                "did navigate flow=MainFlow#1 step=settings",
                "did navigate flow=SettingsFlow#1 step=settings",
                "did navigate flow=SettingsFlow#1 step=about",
                "did navigate flow=SettingsFlow#1 step=settingsDone",
                "did navigate flow=MainFlow#1 step=settingsDone",
            ])
        #expect(log.reasons == [.notVisible, .notVisible, .dismissed])

        let snapshot = coordinator.snapshot()
        #expect(snapshot.flows.map(\.id.description) == ["MainFlow#1", "WishlistFlow#1", "WatchedFlow#1"])
        #expect(snapshot.flows.allSatisfy { $0.isReady })
        #expect(
            snapshot.bindings.filter(\.isRemote).map(\.stepperID) == [
                "dashboard", "watched/movie/1", "watched/movies", "wishlist/movie/23452", "wishlist/movies",
            ])
        #expect(
            snapshot.flow(FlowID(name: "WishlistFlow", instance: 1))?.root.children.map(\.id) == [
                "wishlist/movies", "wishlist/movie/23452", "wishlist/cast/2",
            ])
        #expect(main.stack.presented == nil)
        #expect(snapshot.totals.accepted == 11)  // stepper steps; the forwarded settingsDone is not a stepper's
        #expect(snapshot.totals.dropped == [.notVisible: 2, .dismissed: 1])
    }
}
