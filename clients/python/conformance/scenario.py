"""What the tests share: the two ledger endpoints (§4.4), barriers, and checks of received messages."""

import rawwire as w

T = 5.0  # bound of every wait, seconds

UNBOUND_STEPPER = "conformance"  # bound by no flow: its steps are re-published, then refused (§3.3)
REACTOR = "counter"  # a reactor of the demo host; `increase` is one of its actions


class Side:
    """A receiving endpoint judged by the ledger of §4.4: flowd's `ingress` or a reactor host's `actions`.

    `message` builds a valid numbered message of its usual kind; `publisher` is where the daemon
    publishes refusals (events / states) and where what it applied is re-published (§3.2, §3.3).
    """

    def __init__(self, name, topology):
        self.name = name
        if name == "ingress":
            self.endpoint, self.publisher, self.applied_prefix = topology.ingress, topology.events, "step/"
            self.kind = w.STEP
        else:
            self.endpoint, self.publisher, self.applied_prefix = topology.actions, topology.states, "action/"
            self.kind = w.ACTION

    def __repr__(self):
        return self.name

    def message(self, seq, source, name=None, params=None, **kw):
        if self.name == "ingress":
            return w.step(UNBOUND_STEPPER, name or "ping", seq, source, params, **kw)
        return w.action(REACTOR, name or "increase", seq, source, params, **kw)

    def topic(self):
        return f"step/{UNBOUND_STEPPER}" if self.name == "ingress" else f"action/{REACTOR}"

    def sentinel(self, source):
        """A harmless numbered message; its ack ends the batch it was read in."""
        if self.name == "ingress":
            return w.step("conformance-sentinel", "sentinel", 1, source)
        return w.snapshot_request(REACTOR, 1, source)


def is_ack(msg, source, at_least=1):
    return msg.kind == w.ACK and msg.topic == f"ack/{source}" and msg.acked >= at_least


def acks_of(msgs, source):
    return [m.acked for m in msgs if m.kind == w.ACK and m.topic == f"ack/{source}"]


def settle(side, peer):
    """Every reply to what `peer` sent before: a sentinel from a fresh source, its ack, then a heartbeat answer.

    Acks leave once their batch is dealt with (§4.4); the heartbeat is read in a later batch.
    """
    source = w.new_source("sentinel")
    peer.send(side.sentinel(source))
    got = peer.until(lambda m: is_ack(m, source), T, f"ack of the sentinel {source}")
    return got + peer.barrier(T)


def wait_ack(peer, source, seq):
    return peer.until(lambda m: is_ack(m, source, seq), T, f"ack/{source} covering {seq}")


def details_name(diag, source, seq):
    """True if the diagnostic names the message (source, seq) of the sender."""
    try:
        details = diag.details
    except Exception:
        return False
    return isinstance(details, dict) and details.get("source") == source and details.get("sequence") == seq


def applied(sub, source, last_seq):
    """Sequences of `source` re-published on `sub` (an `applied_prefix` subscription) since it was opened, once
    `last_seq` is among them: PUB keeps order, so nothing applied before it is still to come."""
    def republished(m):
        return m.source == source and m.kind in (w.STEP, w.ACTION)
    sub.seen_or_wait(lambda m: republished(m) and m.seq == last_seq, T, f"re-publication of {source} #{last_seq}")
    return [m.seq for m in sub.seen if republished(m)]


def shape_errors(msg):
    """What breaks §4 in a message a daemon sent (empty if nothing)."""
    errors = []
    f = msg.frames
    if msg.env.version != 1:
        errors.append(f"version {msg.env.version}")
    if msg.env.flags != 0:
        errors.append(f"flags {msg.env.flags} (§4.2: MUST be 0 on send)")
    if msg.kind not in w.KIND_FRAMES:
        return errors + [f"kind {msg.kind}"]
    traced = msg.kind in w.TRACE_KINDS and len(f) == w.KIND_FRAMES[msg.kind] + 1
    if len(f) != w.KIND_FRAMES[msg.kind] and not traced:
        errors.append(f"{len(f)} frames, kind {msg.kind} has {w.KIND_FRAMES[msg.kind]} (§4.1)")
    prefix = w.KIND_PREFIX[msg.kind]
    if prefix == "status":
        if msg.topic != "status":
            errors.append(f"topic {msg.topic!r} for kind {msg.kind}")
    elif not msg.topic.startswith(prefix) or msg.topic == prefix:
        errors.append(f"topic {msg.topic!r} for kind {msg.kind} (§4.2, §3.4)")
    if len(f[0]) > 255:
        errors.append("topic over 255 bytes")
    if errors:
        return errors
    ct = msg.env.content_type
    if msg.kind == w.ACK and len(f[2]) != 8:
        errors.append(f"ack frame 2 of {len(f[2])} bytes")
    if msg.kind == w.HEARTBEAT and msg.topic_id != msg.source:
        errors.append(f"heartbeat topic id {msg.topic_id!r} != source {msg.source!r} (§4.3)")
    if msg.kind == w.DIAGNOSTIC:
        if f[2].decode(errors="replace") != msg.topic_id:
            errors.append(f"reason {f[2]!r} != topic id {msg.topic_id!r} (§4.3)")
        if ct not in (w.JSON, w.FBV):
            errors.append(f"diagnostic content type {ct} (§4.3: not none)")
        else:
            try:
                details = msg.details
            except Exception as error:
                errors.append(f"details do not decode: {error}")
            else:
                if not isinstance(details, dict) or not isinstance(details.get("message"), str):
                    errors.append(f"details {details!r} lack a `message` string (§4.3)")
    if msg.kind in (w.WILL_NAVIGATE, w.DID_NAVIGATE) and f[2].decode(errors="replace") != msg.topic_id:
        errors.append(f"flow name {f[2]!r} != topic id {msg.topic_id!r} (§4.3)")
    if msg.kind == w.NAV_COMMAND:
        if f[2] not in (b"setRoot", b"push", b"pop", b"present", b"dismiss", b"setTabs", b"selectTab", b"end"):
            errors.append(f"verb {f[2]!r} (§4.3)")
        if f[5] not in (b"screen", b"stack", b"tabs", b"flow", b""):
            errors.append(f"presentable kind {f[5]!r} (§4.3)")
    if msg.kind in (w.STATE, w.SNAPSHOT) and ct not in (w.JSON, w.FBV):
        errors.append(f"state content type {ct} (§4.3: not none)")
    if msg.kind == w.STATUS_REPLY and ct != w.JSON:
        errors.append(f"status reply content type {ct} (§4.3: MUST be JSON)")
    value_frame = {w.STATE: 2, w.SNAPSHOT: 2, w.STATUS_REPLY: 2, w.WILL_NAVIGATE: 4, w.DID_NAVIGATE: 4,
                   w.DIAGNOSTIC: 3}.get(msg.kind)
    if value_frame is not None and ct in (w.JSON, w.FBV) and f[value_frame]:
        try:
            msg.value(value_frame)
        except Exception as error:
            errors.append(f"frame {value_frame} does not decode: {error}")
        else:
            errors += [f"frame {value_frame}: {e} (§5.1/§5.2)" for e in w.canonical_errors(ct, f[value_frame])]
    return errors
