import Foundation

/// A store several instances of a daemon share, one of them active: only the instance holding the
/// store's lease writes to it or serves (flowd's shared journal, a reactor host's shared states).
/// The lease is held by the connection itself, so an instance that loses its connection loses the
/// lease and can no longer commit, hence no longer acknowledge, before another instance can take
/// the lease over.
public protocol LeasedStore: AnyObject, Sendable {
    /// Where it is, for messages: an address without its password.
    var location: String { get }
    /// Returns once this instance holds the lease, recording it in the lease history. While
    /// another instance holds it, `waiting` is called once with what is known of the holder, and
    /// `following` between attempts: a standby applies what the active instance committed meanwhile.
    func acquireLease(
        instance: String, waiting: @escaping @Sendable (String) -> Void, following: @Sendable () async throws -> Void
    ) async throws
    /// Throws if the lease can no longer be relied on (the connection is gone).
    func verifyLease() throws
    /// Throws at once, without a statement, if the lease is already known to be lost.
    func checkLease() throws
    /// Registers what to call, once and from another thread, when the lease is found lost
    /// between two checks: the daemon wakes its loop, which stops at once.
    func whenLeaseLost(_ handler: @escaping @Sendable (String) -> Void)
    /// Who took the lease, newest first.
    func leaseHistory(limit: Int) throws -> [LeaseRecord]
}

extension LeasedStore {
    public func acquireLease(instance: String, waiting: @escaping @Sendable (String) -> Void) async throws {
        try await acquireLease(instance: instance, waiting: waiting, following: {})
    }
}

/// One taking of a shared store's lease.
public struct LeaseRecord: Sendable, Hashable {
    public var instance: String
    public var host: String
    public var pid: Int
    public var acquired: Date

    public init(instance: String, host: String, pid: Int, acquired: Date) {
        self.instance = instance
        self.host = host
        self.pid = pid
        self.acquired = acquired
    }
}
