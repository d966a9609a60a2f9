import FlowBusWire
import Flows

/// What a status request asks for (PROTOCOL.md §4.3): the summary always; of the lists, the
/// `sections` named (all by default), and one page of each (`flows` in pre-order, `bindings` by
/// stepper id, `steppers` and `peers` by id; filtered by id `prefix`, `peers` also by `alive`).
package struct StatusQuery: Equatable {
    package static let sectionNames: Set<String> = ["flows", "bindings", "steppers", "peers"]
    /// Entries of a paged list returned when the request does not say, and at most.
    package static let defaultPageLimit = 100
    package static let maxPageLimit = 1000

    package struct Page: Equatable {
        package var offset = 0
        package var limit = StatusQuery.defaultPageLimit
        package var prefix: String?
        package var alive: Bool?
    }

    package var sections = StatusQuery.sectionNames
    /// A request that does not page the tree's lists gets up to the most a page holds, as before
    /// they were paged.
    package var flows = Page(limit: StatusQuery.maxPageLimit)
    package var bindings = Page(limit: StatusQuery.maxPageLimit)
    package var steppers = Page()
    package var peers = Page()

    package init() {}

    /// Reads a request's params; unknown keys are ignored, a wrong value is `bad-params`.
    package init(_ params: WireParams) throws(WireError) {
        if let value = params["sections"] {
            guard case .list(let names) = value, names.allSatisfy({ $0.stringValue != nil }) else {
                throw WireError(
                    .badParams, "status param 'sections' is a list of section names: \(Self.sectionNames.sorted())")
            }
            let wanted = Set(names.compactMap(\.stringValue))
            if let unknown = wanted.subtracting(Self.sectionNames).sorted().first {
                throw WireError(
                    .badParams,
                    "status has no section '\(unknown)': \(Self.sectionNames.sorted().joined(separator: ", "))")
            }
            sections = wanted
        }
        flows = try Self.page(params, "flows", default: flows)
        bindings = try Self.page(params, "bindings", default: bindings)
        steppers = try Self.page(params, "steppers")
        peers = try Self.page(params, "peers")
    }

    /// The part of a list the engine takes: nothing but its counts when the section is not asked for.
    package func window(of section: String, _ page: Page) -> SnapshotWindow {
        SnapshotWindow(offset: page.offset, limit: sections.contains(section) ? page.limit : 0, prefix: page.prefix)
    }

    private static func page(
        _ params: WireParams, _ key: String, default page: Page = Page()
    ) throws(WireError)
        -> Page
    {
        var page = page
        guard let value = params[key] else { return page }
        guard case .map(let map) = value else {
            throw WireError(.badParams, "status param '\(key)' is a map: {offset, limit, prefix, alive}")
        }
        if let offset = map["offset"] {
            guard let number = offset.intValue, number >= 0 else {
                throw WireError(.badParams, "\(key).offset is an int ≥ 0")
            }
            page.offset = Int(clamping: number)
        }
        if let limit = map["limit"] {
            guard let number = limit.intValue, number >= 0, number <= Int64(maxPageLimit) else {
                throw WireError(.badParams, "\(key).limit is an int from 0 to \(maxPageLimit)")
            }
            page.limit = Int(number)
        }
        if let prefix = map["prefix"] {
            guard let text = prefix.stringValue else { throw WireError(.badParams, "\(key).prefix is a string") }
            page.prefix = text
        }
        if let alive = map["alive"] {
            guard case .bool(let flag) = alive else { throw WireError(.badParams, "\(key).alive is a bool") }
            page.alive = flag
        }
        return page
    }
}
