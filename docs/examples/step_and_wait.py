#!/usr/bin/env python3
"""Publish one step with the Python client (clients/python) and say what flowd did with it.

Usage:
    step_and_wait.py RUN_DIR STEPPER_ID STEP_NAME [key=value | key:=JSON ...]

    python3 docs/examples/step_and_wait.py "$FLOWBUS_RUN_DIR" wishlist/movie/42 castPicked withCastId=7

Connects to flowd's `ingress.sock` and `events.sock` in RUN_DIR (the demo config's endpoints),
subscribes to `events` before sending, publishes the step with `wait=True`, and prints
`applied`, or `dropped: REASON: message` when flowd's flows dropped it (PROTOCOL.md 3.3).
Params are read as `publish_step.py` reads them (bool, int, double, else string; `:=` JSON).

Exit status: 0 applied; 1 refused on arrival; 2 usage; 3 no answer; 4 dropped by the flows.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
sys.path.insert(0, HERE)

from publish_step import parse_params  # noqa: E402  (beside this file)


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    run_dir, stepper_id, name, *rest = argv
    try:
        params = parse_params(rest)
    except ValueError as error:
        print(f"step_and_wait.py: {error}", file=sys.stderr)
        return 2
    from flowbus import Dropped, NoAck, NotConnected, Refused, Stepper  # needs pyzmq

    try:
        with Stepper(f"ipc://{run_dir}/ingress.sock", stepper_id, events_endpoint=f"ipc://{run_dir}/events.sock") as stepper:
            stepper.publish_params(name, params, wait=True)
    except Dropped as dropped:
        print(f"dropped: {dropped.reason}: {dropped.diagnostic.message}")
        return 4
    except Refused as refused:
        print(f"refused: {refused.reason}: {refused.diagnostic.message}")
        return 1
    except (NoAck, NotConnected, TimeoutError) as error:
        print(f"no answer: {error} (is flowd running on {run_dir}?)", file=sys.stderr)
        return 3
    print(f"step {name} as {stepper_id}: applied")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
