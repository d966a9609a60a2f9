import Synchronization

/// Cancels a piece of running work exactly once, whether `cancel()` comes before or after the
/// work was attached.
final class CancellationHandle: Sendable {
    private struct Storage {
        var isCancelled = false
        var onCancel: (@Sendable () -> Void)?
    }

    private let storage = Mutex(Storage())

    /// Attaches the way to cancel the work; runs it at once if already cancelled.
    func attach(_ onCancel: @escaping @Sendable () -> Void) {
        let cancelNow = storage.withLock { storage -> Bool in
            if storage.isCancelled { return true }
            storage.onCancel = onCancel
            return false
        }
        if cancelNow { onCancel() }
    }

    var isCancelled: Bool { storage.withLock(\.isCancelled) }

    /// Marks the work cancelled and cancels it; later calls do nothing.
    func cancel() {
        let onCancel = storage.withLock { storage -> (@Sendable () -> Void)? in
            if storage.isCancelled { return nil }
            storage.isCancelled = true
            defer { storage.onCancel = nil }
            return storage.onCancel
        }
        onCancel?()
    }
}

/// One in-flight asynchronous mutation stream (the task running the asynchronous part of a
/// `Mutations` value, or a cancellable part nested in it).
@usableFromInline
final class MutationStream: Sendable {
    let key: UInt64
    let ids: [CancelID]
    let parent: MutationStream?
    /// True for streams returned by `mutate(action:)` (they pass through the transform applied
    /// to the placeholder in `transform(mutation:)`); false for external streams.
    @usableFromInline let fromMutate: Bool
    let handle = CancellationHandle()

    init(key: UInt64, ids: [CancelID], parent: MutationStream?, fromMutate: Bool) {
        self.key = key
        self.ids = ids
        self.parent = parent
        self.fromMutate = fromMutate
    }

    /// True once this stream or one of its ancestors was cancelled.
    @usableFromInline var isCancelled: Bool { handle.isCancelled || (parent?.isCancelled ?? false) }
}

/// A running connection to a ``ReactorStore``: an action source bound with
/// ``ReactorStore/bind(actions:)`` or an observer added with ``ReactorStore/observe(_:)``.
///
/// Dropping the value does not end the connection; call ``cancel()`` (or shut the store down).
public struct ReactorSubscription: Sendable {
    let handle: CancellationHandle

    init(_ handle: CancellationHandle) { self.handle = handle }

    /// Ends the connection. Idempotent. An observer may still receive the emission that is in
    /// progress when `cancel()` is called from another thread, never a later one.
    public func cancel() { handle.cancel() }

    /// True once ``cancel()`` was called or the store shut down.
    public var isCancelled: Bool { handle.isCancelled }
}
