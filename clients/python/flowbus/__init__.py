"""FlowBus wire protocol v1 (docs/PROTOCOL.md) for Python: codecs, messages and pyzmq clients.

    from flowbus import Stepper, Events, ReactorView, status

The codecs (`flowbus.wire`, `flowbus.values`, `flowbus.messages`, `flowbus.clone`) need only
the standard library; the clients (`flowbus.client`) need pyzmq.
"""

from .clone import CloneMerger, StateUpdate
from .messages import (Ack, Action, DeepLink, Diagnostic, DidNavigate, Heartbeat, Message, Navigation,
                       NavigationCommand, PresentableReport, Snapshot, SnapshotRequest, State, StatusReply,
                       StatusRequest, Step, WillNavigate, ack_frames, action_frames, decode, deep_link_frames,
                       diagnostic_frames, did_navigate_frames, encode, heartbeat_frames, navigation_command_frames,
                       presentable_report_frames, snapshot_frames, snapshot_request_frames, state_frames,
                       status_reply_frames, status_request_frames, step_frames, will_navigate_frames)
from .values import decode_fbv, decode_json, decode_value, encode_fbv, encode_json, encode_value
from .wire import (CONTENT_FBV, CONTENT_JSON, CONTENT_NONE, PROTOCOL_VERSION, Envelope, WireError, new_source,
                   topic)

__version__ = "0.1.0"

try:
    from .client import (Dropped, Events, FlowBusError, NoAck, NoOutcome, NotConnected, ReactorView, Receipt, Refused,
                         Stepper, status)
except ImportError as _error:  # pyzmq missing: codecs still work
    _missing = _error

    def __getattr__(name):
        if name in ("Dropped", "Events", "FlowBusError", "NoAck", "NoOutcome", "NotConnected", "ReactorView",
                    "Receipt", "Refused", "Stepper", "status"):
            raise ImportError(f"flowbus.{name} needs pyzmq (pip install pyzmq): {_missing}")
        raise AttributeError(name)
