"""FlowBus wire protocol v1 (docs/PROTOCOL.md) for Python: codecs, messages and pyzmq clients.

    from flowbus import Stepper, Events, ReactorView, status

The codecs (`flowbus.wire`, `flowbus.values`, `flowbus.messages`, `flowbus.clone`) need only
the standard library; the clients (`flowbus.client`) need pyzmq.
"""

from __future__ import annotations

# `name as name`: re-exported for type checkers (PEP 484), without an __all__.
from .clone import CloneMerger as CloneMerger, StateUpdate as StateUpdate
from .messages import (Ack as Ack, Action as Action, DeepLink as DeepLink, Diagnostic as Diagnostic,
                       DidNavigate as DidNavigate, Heartbeat as Heartbeat, Message as Message,
                       Navigation as Navigation, NavigationCommand as NavigationCommand,
                       PresentableReport as PresentableReport, Replay as Replay, ReplayRequest as ReplayRequest,
                       Snapshot as Snapshot,
                       SnapshotRequest as SnapshotRequest, State as State, StatusReply as StatusReply,
                       StatusRequest as StatusRequest, Step as Step, WillNavigate as WillNavigate,
                       ack_frames as ack_frames, action_frames as action_frames, decode as decode,
                       deep_link_frames as deep_link_frames, diagnostic_frames as diagnostic_frames,
                       did_navigate_frames as did_navigate_frames, encode as encode,
                       heartbeat_frames as heartbeat_frames, navigation_command_frames as navigation_command_frames,
                       presentable_report_frames as presentable_report_frames, replay_frames as replay_frames,
                       replay_request_frames as replay_request_frames, snapshot_frames as snapshot_frames,
                       snapshot_request_frames as snapshot_request_frames, state_frames as state_frames,
                       status_reply_frames as status_reply_frames, status_request_frames as status_request_frames,
                       step_frames as step_frames, will_navigate_frames as will_navigate_frames)
from .values import (decode_fbv as decode_fbv, decode_json as decode_json, decode_value as decode_value,
                     encode_fbv as encode_fbv, encode_json as encode_json, encode_value as encode_value)
from .wire import (CONTENT_FBV as CONTENT_FBV, CONTENT_JSON as CONTENT_JSON, CONTENT_NONE as CONTENT_NONE,
                   PROTOCOL_VERSION as PROTOCOL_VERSION, Envelope as Envelope, WireError as WireError,
                   new_source as new_source, topic as topic)

__version__ = "0.1.0"

try:
    from .client import (Dropped as Dropped, Events as Events, FlowBusError as FlowBusError, NoAck as NoAck,
                         NoOutcome as NoOutcome, NotConnected as NotConnected, ReactorView as ReactorView,
                         Receipt as Receipt, Refused as Refused, Stepper as Stepper, status as status)
except ImportError as _error:  # pyzmq missing: codecs still work
    _missing = _error

    def __getattr__(name: str) -> object:
        if name in ("Dropped", "Events", "FlowBusError", "NoAck", "NoOutcome", "NotConnected", "ReactorView",
                    "Receipt", "Refused", "Stepper", "status"):
            raise ImportError(f"flowbus.{name} needs pyzmq (pip install pyzmq): {_missing}")
        raise AttributeError(name)
