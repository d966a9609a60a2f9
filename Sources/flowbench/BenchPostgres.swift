import FlowBusTesting
import Foundation

/// The PostgreSQL server of the steps_journaled_postgres scenario: started on 127.0.0.1 at its
/// first measurement, with fsync on as in production, and stopped when flowbench ends.
final class BenchPostgres: @unchecked Sendable {
    static let shared = BenchPostgres()

    private let lock = NSLock()
    private var server: PostgresServer?

    /// Whether a server can be started here (Debian's postgresql-15 is installed).
    static var isAvailable: Bool { PostgresServer.unavailableReason == nil }

    /// A new database on the server (started if needed); its URL.
    func database(named name: String) throws -> String {
        try lock.withLock {
            if server == nil { server = try PostgresServer(durable: true) }
            return try server!.createDatabase(name)
        }
    }

    func stop() {
        lock.withLock {
            server?.stop()
            server = nil
        }
    }
}
