import FlowBusClient
import FlowBusConfiguration
import FlowBusDaemon
import FlowBusProtocol
import FlowBusWire
import Flows
import ZeroMQ

/// Why a journal cannot be used, with what to do about it.
public enum JournalError: Error, CustomStringConvertible, Sendable {
    case missing(String)
    case exists(String)
    case damaged(path: String, cause: String)
    case unrestorable(path: String, cause: String)
    case unopenable(path: String, cause: String)

    public var description: String {
        switch self {
        case .missing(let path):
            "no journal at \(path)"
        case .exists(let path):
            "\(path) exists: salvage writes a new journal, name a file that does not exist"
        case .damaged(let path, let cause):
            """
            the journal \(path) is damaged (\(cause)); flowd does not start on it. \
            See what can be read with `flowctl journal check \(path)`; copy every readable entry to a new \
            journal with `flowctl journal salvage \(path) --to NEW`, then point persistence.journal at NEW \
            (or move the damaged file aside to start empty: what it holds is then lost)
            """
        case .unopenable(let path, let cause):
            """
            cannot open the journal \(path): \(cause). Set persistence.journal to a file in a directory this \
            user can write (e.g. /var/lib/flowbus/flowd-journal.sqlite), or fix the permissions
            """
        case .unrestorable(let path, let cause):
            """
            the checkpoint in the journal \(path) cannot be restored: \(cause). The entries it covers were \
            compacted away, so flowd does not start on it. Start flowd with the config the journal was written \
            with, or move the journal aside to start from an empty tree (its navigation state is then lost)
            """
        }
    }
}
