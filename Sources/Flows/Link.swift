/// A reference to a coordinator or a flow's record that reads nil once the object is gone, as
/// `weak` does, for objects retained on every step: a Swift weak reference gives its object a side
/// table, and then each retain and release of the object takes the runtime's slow path.
///
/// The object owns its link, fills it once initialized and empties it as its isolated deinit
/// starts: its deinit runs on the ``FlowActor``, where every reader is.
@FlowActor
final class Link<Object: AnyObject> {
    private(set) unowned(unsafe) var object: Object?

    init() {}

    /// Called once by the object, at the end of its initializer.
    func attach(_ object: Object) {
        self.object = object
    }

    /// Called by the object as its deinit starts.
    func detach() {
        object = nil
    }
}
