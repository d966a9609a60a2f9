"""§4.4 The receiving ledger, on flowd's `ingress` and a reactor host's `actions` alike.

"Applied" is observed where the daemon re-publishes what it applied: steps on `events` (§3.3) and
actions on `states` while someone subscribes to `action/` (§3.2).
"""

import pytest

import rawwire as w
from scenario import T, Side, acks_of, applied, details_name, is_ack, settle, wait_ack

SIDES = ["ingress", "actions"]


def setup(topology, side_name, prefix="ledger"):
    side = Side(side_name, topology)
    return side, w.new_source(prefix), topology.peer(side.endpoint), topology.sub(side.publisher,
                                                                                   [side.applied_prefix, "diag/"])


def diags_about(msgs, source):
    return [m for m in msgs if m.kind == w.DIAGNOSTIC and isinstance(m.details, dict)
            and m.details.get("source") == source]


def assert_acks_cumulative(replies, source, last):
    acks = acks_of(replies, source)
    assert acks == sorted(acks) and acks and max(acks) == last, f"§4.3: acks must grow to {last}: {acks}"


@pytest.mark.parametrize("side_name", SIDES)
def test_fresh_messages_applied_in_order_ack_cumulative(shared, side_name):
    """§4.4 fresh: applied and acknowledged; §4.3 ACK: cumulative, topic id = the source id of the messages."""
    side, source, peer, pub = setup(shared, side_name)
    for seq in range(1, 6):
        peer.send(side.message(seq, source))
    replies = wait_ack(peer, source, 5) + settle(side, peer)
    assert_acks_cumulative(replies, source, 5)
    assert not diags_about(replies, source), replies
    assert applied(pub, source, 5) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("side_name", SIDES)
def test_duplicate_acknowledged_again_with_last_not_applied_twice(shared, side_name):
    """§4.4 duplicate: "not applied again; acknowledged again with L; no diagnostic"; §7: MUST NOT process again."""
    side, source, peer, pub = setup(shared, side_name)
    for seq in (1, 2, 3):
        peer.send(side.message(seq, source))
    wait_ack(peer, source, 3)
    for seq in (2, 3, 1):  # resends, with new message ids: (source, sequence) is the key
        peer.send(side.message(seq, source))
    replies = settle(side, peer)
    assert acks_of(replies, source) and set(acks_of(replies, source)) == {3}, \
        f"§4.4: each duplicate is acknowledged again with L = 3: {replies}"
    assert not diags_about(replies, source), f"§4.4/§7: no diagnostic for a duplicate: {replies}"
    peer.send(side.message(4, source))
    assert not diags_about(wait_ack(peer, source, 4), source)
    assert applied(pub, source, 4) == [1, 2, 3, 4], "§4.4: duplicates are not applied again"
    # what the flows say about the unbound stepper's steps (§3.3) comes once per step applied; nothing else
    if side_name == "ingress":
        pub.seen_or_wait(lambda m: m.is_diag("unbound-stepper") and details_name(m, source, 4), T, "refusal of 4")
    published = [(m.reason, m.details.get("sequence")) for m in diags_about(pub.seen, source)]
    expected = [("unbound-stepper", seq) for seq in (1, 2, 3, 4)] if side_name == "ingress" else []
    assert published == expected, f"§4.4/§7: no diagnostic for a duplicate (`duplicate` is reserved): {published}"


@pytest.mark.parametrize("side_name", SIDES)
def test_gap_refused_out_of_order_then_resend_from_expected(shared, side_name):
    """§4.4 out of order: not applied, not acknowledged, L repeated after one `out-of-order` diagnostic per batch
    (details `source`, `topic`, `sequence` = first refused, `expected` = L + 1, `count`); resend from `expected`."""
    side, source, peer, pub = setup(shared, side_name)
    peer.send(side.message(1, source))
    wait_ack(peer, source, 1)
    for seq in (3, 4, 5):  # 2 is "lost"
        peer.send(side.message(seq, source))

    def refused(msgs):
        return [m for m in msgs if m.is_diag("out-of-order") and m.details.get("source") == source]
    replies = []
    while sum(m.details.get("count", 0) for m in refused(replies)) < 3:
        replies += peer.until(lambda m: m.is_diag("out-of-order"), T, "out-of-order diagnostic")
    replies += settle(side, peer)

    diags = refused(replies)
    assert all(a <= 1 for a in acks_of(replies, source)), f"§4.4: nothing past the gap is acknowledged: {replies}"
    covered = []
    for diag in diags:
        d = diag.details
        assert d.get("expected") == 2 and d.get("topic") == side.topic(), f"§4.4 details: {d}"
        assert isinstance(d.get("count"), int) and d["count"] >= 1, d
        covered += list(range(d["sequence"], d["sequence"] + d["count"]))
    assert covered == [3, 4, 5], f"§4.4: one diagnostic per batch, first refused + count: {[m.details for m in diags]}"
    first = replies.index(diags[0])
    assert any(is_ack(m, source) and m.acked == 1 for m in replies[first:]), \
        f"§4.4: the last ack (L = 1) is repeated after the diagnostic: {replies}"
    pub.until(lambda m: m.is_diag("out-of-order") and details_name(m, source, 3), T, "out-of-order published")

    for seq in (2, 3, 4, 5):
        peer.send(side.message(seq, source))
    wait_ack(peer, source, 5)
    assert applied(pub, source, 5) == [1, 2, 3, 4, 5], "§4.4: after the resend everything is applied, in order"


@pytest.mark.parametrize("side_name", SIDES)
def test_first_contact_without_memory_adopts_first_sequence(shared, side_name):
    """§4.4 first contact: "a receiver without that memory adopts the first sequence it sees"."""
    side, source, peer, pub = setup(shared, side_name)
    peer.send(side.message(7, source))
    peer.send(side.message(8, source))
    replies = wait_ack(peer, source, 8)
    assert not diags_about(replies, source), replies
    assert applied(pub, source, 8) == [7, 8]


@pytest.mark.parametrize("side_name", ["ingress"])
def test_first_contact_with_memory_requires_1(persistent, side_name):
    """§4.4 first contact: "a receiver that remembers every source it ever dealt with (flowd with a journal)
    requires sequence 1 and refuses any other with `out-of-order` (`expected` 1)"."""
    side, source, peer, pub = setup(persistent, side_name)
    peer.send(side.message(7, source))
    replies = peer.until(lambda m: m.is_diag("out-of-order"), T, "out-of-order diagnostic")
    replies += settle(side, peer)
    diag = [m for m in replies if m.is_diag("out-of-order")][0]
    assert diag.details.get("expected") == 1 and details_name(diag, source, 7), diag.details
    assert diag.details.get("count") == 1, diag.details
    assert all(a == 0 for a in acks_of(replies, source)), f"§4.4: not acknowledged: {replies}"
    for seq in range(1, 8):
        peer.send(side.message(seq, source))
    wait_ack(peer, source, 7)
    assert applied(pub, source, 7) == [1, 2, 3, 4, 5, 6, 7]


def test_sender_ahead_of_a_ledger_that_lost_it_is_refused_journal_behind(persistent):
    """§4.4 a ledger on disk behind its sender: a source the ledger on disk does not know (L = 0), whose
    sender goes back to the sequence it sent after the `out-of-order` refusal (it holds nothing older), is
    behind: "The receiver MUST NOT apply S and what follows, nor acknowledge past L" and refuses them with
    `journal-behind` (`journal_last`, `received`, `lost`, `adopted` false)."""
    side, source, peer, pub = setup(persistent, "ingress")
    peer.send(side.message(7, source))
    peer.until(lambda m: m.is_diag("out-of-order"), T, "out-of-order diagnostic")
    peer.send(side.message(7, source))  # the oldest it holds: 1...6 were acknowledged by a ledger that lost them
    peer.send(side.message(8, source))
    replies = peer.until(lambda m: m.is_diag("journal-behind"), T, "journal-behind diagnostic")
    replies += settle(side, peer)
    diag = [m for m in replies if m.is_diag("journal-behind")][0]
    assert details_name(diag, source, 7), diag.details
    assert (diag.details.get("journal_last"), diag.details.get("received"), diag.details.get("lost")) == (0, 7, 6), \
        diag.details
    assert diag.details.get("adopted") is False, diag.details
    assert all(a == 0 for a in acks_of(replies, source)), f"§4.4: not acknowledged past L = 0: {replies}"
    sentinel = w.new_source("sentinel")
    peer.send(side.message(1, sentinel))
    wait_ack(peer, sentinel, 1)
    assert applied(pub, sentinel, 1) and not [m for m in pub.seen if m.source == source], "§4.4: not applied"
    # "A message at L + 1 ends the state (the sender did hold it)."
    for seq in range(1, 9):
        peer.send(side.message(seq, source))
    wait_ack(peer, source, 8)
    assert applied(pub, source, 8) == list(range(1, 9))


def test_journal_behind_after_a_restart_and_the_loss_accepted(persistent):
    """§4.4 a ledger on disk behind its sender, across a restart with a journal that lost its last entries;
    then the reference flowd started with `--accept-journal-loss` adopts: S fresh, `adopted` true."""
    side, source, peer, pub = setup(persistent, "ingress")
    for seq in (1, 2, 3):
        peer.send(side.message(seq, source))
    wait_ack(peer, source, 3)
    journal = persistent.dir / "journal.sqlite"
    persistent.stop("flowd")  # a clean stop folds the write-ahead log into the file
    copy = journal.read_bytes()
    persistent.start_flowd()
    for seq in (4, 5):
        peer.send(side.message(seq, source))
    wait_ack(peer, source, 5)
    persistent.stop("flowd")
    journal.write_bytes(copy)  # the journal lost 4 and 5, acknowledged
    for suffix in ("-wal", "-shm"):
        (persistent.dir / f"journal.sqlite{suffix}").unlink(missing_ok=True)
    persistent.start_flowd()
    peer.send(side.message(6, source))
    diag = peer.until(lambda m: m.is_diag("out-of-order"), T, "out-of-order diagnostic")[-1]
    assert diag.details.get("expected") == 4, diag.details
    peer.send(side.message(6, source))  # the sender holds nothing older than 6
    replies = peer.until(lambda m: m.is_diag("journal-behind"), T, "journal-behind diagnostic")
    diag = replies[-1]
    assert (diag.details.get("journal_last"), diag.details.get("lost")) == (3, 2), diag.details
    replies += settle(side, peer)
    assert set(acks_of(replies, source)) <= {3}, f"§4.4: not acknowledged past L = 3: {replies}"

    persistent.stop("flowd")
    persistent.start_flowd("--accept-journal-loss")
    events = persistent.sub(side.publisher, [side.applied_prefix, "diag/journal-behind"])
    peer.send(side.message(6, source))
    peer.until(lambda m: m.is_diag("out-of-order"), T, "out-of-order diagnostic")
    peer.send(side.message(6, source))
    wait_ack(peer, source, 6)
    assert applied(events, source, 6) == [6]
    adopted = events.seen_or_wait(lambda m: m.is_diag("journal-behind"), T, "journal-behind published")
    assert adopted.details.get("adopted") is True and adopted.details.get("lost") == 2, adopted.details


def test_first_contact_with_a_retention_ledger_adopts(persistent):
    """§4.4 first contact: a reactor host, "whose state database keeps sources for a retention period only",
    adopts the first sequence it sees of a source found nowhere."""
    side, source, peer, pub = setup(persistent, "actions")
    peer.send(side.message(7, source))
    peer.send(side.message(8, source))
    replies = wait_ack(peer, source, 8)
    assert not diags_about(replies, source), replies
    assert applied(pub, source, 8) == [7, 8]


REFUSALS = {  # sequence 2, a readable v1 envelope, refused when read
    "kind-99": lambda side, source: [side.topic().encode(), w.envelope(99, 2, source, w.JSON)]
    + side.message(2, source)[2:],
    "bad-params": lambda side, source: side.message(2, source, params=b"[1]"),
    "bad-name-chars": lambda side, source: side.message(2, source, name=b"no spaces allowed"),
}


@pytest.mark.parametrize("side_name", SIDES)
@pytest.mark.parametrize("refusal", list(REFUSALS))
def test_refused_fresh_message_is_acknowledged(shared, side_name, refusal):
    """§4.4 fresh "applies it, or refuses it with a diagnostic naming it ... Either way L becomes its sequence
    and it is acknowledged"; §7. Sequence 1 ok, 2 refused, 3 ok: all acknowledged, 3 applied, 2 not."""
    side, source, peer, pub = setup(shared, side_name)
    peer.send(side.message(1, source))
    peer.send(REFUSALS[refusal](side, source))
    peer.send(side.message(3, source))
    replies = wait_ack(peer, source, 3)
    assert_acks_cumulative(replies, source, 3)
    diag = [m for m in diags_about(replies, source) if m.details.get("sequence") == 2]
    assert diag, f"§4.4: the refusal of 2 names it (source, sequence): {replies}"
    covering = next(i for i, m in enumerate(replies) if is_ack(m, source, 2))
    assert replies.index(diag[0]) < covering, f"§3.3: the diagnostic comes before the ack covering 2: {replies}"
    assert diag[0].details.get("topic") == side.topic(), diag[0].details
    assert applied(pub, source, 3) == [1, 3], "sequence 3 is applied after the refused 2; 2 is not"


@pytest.mark.parametrize("side_name", SIDES)
def test_heartbeat_is_answered_and_a_numbered_one_fills_its_sequence(shared, side_name):
    """§4.4: "The receiver answers every heartbeat with a HEARTBEAT of its own to that peer, numbered in the
    sequence of that socket. A HEARTBEAT with a sequence above 0 is a numbered no-op, judged by the ledger like
    any message below (acknowledged when fresh, nothing applied)"."""
    side, source, peer, pub = setup(shared, side_name)
    peer.send(side.message(1, source))
    replies = wait_ack(peer, source, 1)
    peer.send(w.heartbeat(source, sequence=2))  # fills sequence 2
    replies += peer.until(lambda m: m.kind == w.HEARTBEAT, T, "heartbeat answer")
    peer.send(side.message(3, source))
    replies += wait_ack(peer, source, 3) + settle(side, peer)
    answer = next(m for m in replies if m.kind == w.HEARTBEAT)
    assert answer.topic == f"hb/{answer.source}" and len(answer.frames) == 2, answer
    assert not diags_about(replies, source), f"§4.4: 3 follows the filled 2, no gap: {replies}"
    assert acks_of(replies, source)[-1] == 3, f"§4.4: the numbered heartbeat was dealt with: {replies}"
    assert applied(pub, source, 3) == [1, 3], "§4.4: the heartbeat applies nothing; 3 is fresh, hence applied"
    own = [m.seq for m in replies if m.source == answer.source and m.kind != w.SNAPSHOT]
    assert own == sorted(set(own)), f"§4.2: the answer is numbered in the socket's sequence: {own}"


@pytest.mark.parametrize("side_name", SIDES)
def test_heartbeats_not_deduplicated(shared, side_name):
    """§4.3 HEARTBEAT: sequence 0 heartbeats "are not numbered, not acknowledged and not de-duplicated"; each is
    answered."""
    side, source, peer, _ = setup(shared, side_name)
    peer.send(w.heartbeat(source))
    peer.send(w.heartbeat(source))
    replies = peer.until(lambda m: m.kind == w.HEARTBEAT, T, "first answer")
    replies += peer.until(lambda m: m.kind == w.HEARTBEAT, T, "second answer")
    replies += settle(side, peer)
    assert not acks_of(replies, source) and not diags_about(replies, source), replies


@pytest.mark.parametrize("side_name", SIDES)
def test_deduplication_by_source_and_sequence_not_message_id(shared, side_name):
    """§4.2: "Receivers de-duplicate by (source, sequence)": the message id is not the key."""
    side, a, peer, pub = setup(shared, side_name, "dedup-a")
    b = w.new_source("dedup-b")
    mid = bytes(range(16))
    peer.send(side.message(1, a, message_id=mid))
    peer.send(side.message(1, b, message_id=mid))  # same id, other source: fresh
    peer.send(side.message(1, a, message_id=bytes(16)))  # other id, same (source, sequence): duplicate
    peer.send(side.message(2, a))
    peer.send(side.message(2, b))
    peer.seen_or_wait(lambda m: is_ack(m, a, 2), T, f"ack/{a} covering 2")
    peer.seen_or_wait(lambda m: is_ack(m, b, 2), T, f"ack/{b} covering 2")
    assert applied(pub, a, 2) == [1, 2]
    assert applied(pub, b, 2) == [1, 2]


def test_snapshot_request_is_a_numbered_ledger_entry(shared):
    """§4.4 applies to every message but heartbeats: a snapshotRequest is acknowledged; a resent one is a duplicate,
    "not applied again" (no second snapshot), "acknowledged again with L"."""
    side, source, peer, pub = setup(shared, "actions", "snapshot")
    peer.send(w.snapshot_request("counter", 1, source))
    first = wait_ack(peer, source, 1)
    assert [m.kind for m in first].count(w.SNAPSHOT) == 1, first
    peer.send(w.snapshot_request("counter", 1, source))
    again = settle(side, peer)
    assert acks_of(again, source) == [1], f"§4.4: acknowledged again with L: {again}"
    snapshots = [m for m in again if m.kind == w.SNAPSHOT]
    # settle's sentinel on `actions` is a snapshot request of its own: exactly one snapshot is its answer
    assert len(snapshots) == 1, f"§4.4: a duplicate snapshotRequest is not answered again: {again}"
