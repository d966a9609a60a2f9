/// The flows of the durability and failover tests, as a topology file's `coordinator:` and
/// `flows:` sections: `start` binds the stepper `load` to a root screen that takes steps while
/// covered (`allowStepWhenNotPresented`), `open` pushes `detail/{id}` with a stepper of its own,
/// and `tick` changes nothing (`none`), so that a long stream of ticks leaves the tree as it was.
public enum LoadFlow {
    public static let sections = """
        coordinator: { flow: LoadFlow, step: start }
        flows:
          LoadFlow:
            root: stack
            id: load
            steps:
              start:
                - setRoot: { screen: home, stepper: load, allowStepWhenNotPresented: true }
              open:
                - push: { screen: "detail/{id}", stepper: "detail/{id}" }
              tick: [none]

        """
}
