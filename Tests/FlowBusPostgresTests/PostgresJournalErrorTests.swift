#if PostgreSQL
import FlowBusPostgres
import FlowBusTesting
import Logging
import Testing

@Suite("PostgreSQL journal errors: a code for each thing a caller can tell apart")
struct PostgresJournalErrorTests {
    /// The code of the error `body` throws; nil when it throws none, or not a PostgresJournalError.
    func code(_ body: () async throws -> Void) async -> PostgresJournalError.Code? {
        do {
            try await body()
            return nil
        } catch {
            return (error as? PostgresJournalError)?.code
        }
    }

    @Test("A URL that is not postgres://user:password@host:port/database is invalid-url, its password left out")
    func invalidURL() async {
        let logger = Logger(label: "test")
        #expect(await code { _ = try await PostgresJournal.connect(url: "flowbus.db", logger: logger) } == .invalidURL)
        do {
            _ = try await PostgresJournal.connect(url: "postgres://:secret@db/flowbus", logger: logger)
            Issue.record("a URL without a user was taken")
        } catch let error as PostgresJournalError {
            #expect(error.code == .invalidURL)
            #expect(!error.description.contains("secret"), "\(error)")
        } catch {
            Issue.record("not a PostgresJournalError: \(error)")
        }
    }

    @Test(
        "A server gone: the call fails, and every later call at once with connection-lost",
        .enabled(if: PostgresServer.unavailableReason == nil, "needs PostgreSQL"))
    func serverGone() async throws {
        let server = try PostgresServer()
        let journal = try await PostgresJournal.connect(url: server.url, logger: Logger(label: "test"))
        defer { journal.close() }
        server.stop()
        // Which one depends on whether the client saw the session end before the call timed out.
        let first = await code { try journal.verifyLease() }
        #expect(first == .noAnswer || first == .connectionLost, "\(String(describing: first))")
        let start = ContinuousClock.now
        #expect(await code { try journal.verifyLease() } == .connectionLost)
        #expect(start.duration(to: .now) < .seconds(1), "a broken connection is not asked again")
    }

    @Test("A server that does not listen is cannot-connect")
    func cannotConnect() async {
        // Port 1 on the loopback: nothing listens there, the connection is refused at once.
        let url = "postgres://flowbus@127.0.0.1:1/flowbus"
        #expect(
            await code { _ = try await PostgresJournal.connect(url: url, logger: Logger(label: "test")) }
                == .cannotConnect)
    }
}
#endif
