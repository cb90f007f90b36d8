"""The heartbeat / commit fast paths give exactly the outcomes of the general
Draft path, and the cheap constructors keep the Group's invariants."""

from __future__ import annotations

import pytest
from test_group_support import Harness, join_req, stable_harness

from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.group import (
    Group,
    GroupConfig,
    GroupState,
    HeartbeatRequest,
    HeartbeatResult,
    JoinRequest,
    JoinResult,
    Outcome,
    Schedule,
    SyncRequest,
    SyncResult,
    handle_delete,
    handle_sync,
    handle_heartbeat,
    handle_join,
    handle_timer,
    new_group,
    touch_member,
)
from zkcoord.core.group import _accept_joining_member, _join_current_member, _join_new_member, _validate_sync
from zkcoord.core.messages import HEARTBEAT, JOIN, SYNC, Cancel, Reply
from zkcoord.core.membership import validate_current_member
from zkcoord.core.rebalance import (
    Draft, remove_member, remove_pending_sync_member, schedule_session, try_complete_join,
)
from zkcoord.errors import StateError

S = GroupState
E = ErrorCode
CFG = GroupConfig()


# -- the general path, as the handlers were written before the fast paths ---------

def draft_heartbeat(group: Group, req: HeartbeatRequest, now_ms: int) -> Outcome:
    w = Draft.of(group, now_ms, CFG)
    if w.state is S.DEAD:
        error = E.COORDINATOR_NOT_AVAILABLE
    else:
        error = validate_current_member(w, req.member_id, req.group_instance_id) or E.NONE
        if error is E.NONE and req.generation_id != w.generation_id:
            error = E.ILLEGAL_GENERATION
        elif error is E.NONE and w.state is S.EMPTY:
            error = E.UNKNOWN_MEMBER_ID
        elif error is E.NONE:
            schedule_session(w, req.member_id)
            if w.state is S.PREPARING_REBALANCE:
                error = E.REBALANCE_IN_PROGRESS
    w.reply(req.token, HEARTBEAT, HeartbeatResult(error))
    return w.outcome()


def draft_touch(group: Group, member_id: str, now_ms: int) -> Outcome:
    w = Draft.of(group, now_ms)
    if w.state in (S.STABLE, S.PREPARING_REBALANCE) and member_id in w.members:
        schedule_session(w, member_id)
    return w.outcome()


def full_rebuild(group: Group) -> Group:
    """The same group through the checked constructor."""
    return Group(**group.__dict__)


def groups_in_every_state() -> list[Group]:
    stable = stable_harness(3)
    static = stable_harness(2, instance_ids=True)
    completing = Harness()
    completing.join("a", new_member_id="m1")
    completing.join("b", new_member_id="m2")
    completing.advance(6000)
    preparing = stable_harness(2)
    preparing.join("l", "m1")  # the leader's join starts a rebalance
    empty = stable_harness(1)
    empty.leave("x", ("m1", None))
    dead = stable_harness(1)
    dead.leave("x", ("m1", None))
    dead.apply(handle_delete(dead.group))
    groups = [stable.group, static.group, completing.group, preparing.group, empty.group,
              dead.group, new_group("g")]
    assert {g.state for g in groups} == set(S)
    return groups


REQUESTS = [
    ("m1", None, None), ("m2", None, None), ("m3", None, None), ("ghost", None, None),
    ("m1", None, 0), ("m2", None, 7), ("", None, None), ("m1", "i1", None), ("m2", "i1", None),
    ("m2", "i2", None), ("m1", "i9", None),
]


@pytest.mark.parametrize("group", groups_in_every_state(), ids=lambda g: g.state.value)
def test_heartbeat_fast_path_equals_the_draft_path(group: Group):
    for now in (group.session_deadlines.get("m1", 0), 123_456):
        for member_id, instance_id, generation in REQUESTS:
            gen = group.generation_id if generation is None else generation
            req = HeartbeatRequest(("t", member_id), member_id, gen, instance_id)
            fast = handle_heartbeat(group, req, now, CFG)
            slow = draft_heartbeat(group, req, now)
            assert fast == slow
            assert (fast.group is group) == (slow.group is group)
            assert full_rebuild(fast.group) == fast.group  # invariants hold


@pytest.mark.parametrize("group", groups_in_every_state(), ids=lambda g: g.state.value)
def test_touch_member_fast_path_equals_the_draft_path(group: Group):
    for now in (group.session_deadlines.get("m1", 0), 123_456):
        for member_id in ("m1", "m2", "ghost", ""):
            fast = touch_member(group, member_id, now)
            slow = draft_touch(group, member_id, now)
            assert fast == slow
            assert (fast.group is group) == (slow.group is group)
            assert full_rebuild(fast.group) == fast.group


def test_heartbeat_restarts_only_the_members_session():
    h = stable_harness(3)
    before = h.group
    out = handle_heartbeat(before, HeartbeatRequest("hb", "m2", 1), before.session_deadlines["m2"] + 5, CFG)
    deadline = before.session_deadlines["m2"] + 5 + 10_000
    assert out.timers == (Schedule("session:m2", deadline),)
    assert out.group.session_deadlines == {**before.session_deadlines, "m2": deadline}
    assert list(out.group.session_deadlines) == list(before.session_deadlines)  # order kept
    assert out.group.members is before.members and out.group.static_members is before.static_members
    assert before.session_deadlines["m2"] != deadline  # the input is not mutated
    assert out.reply_for("hb").payload == HeartbeatResult(E.NONE) and not out.persist


def test_heartbeat_with_an_unchanged_deadline_returns_the_same_group():
    h = stable_harness(2)
    g = h.group
    now = g.session_deadlines["m1"] - 10_000
    out = handle_heartbeat(g, HeartbeatRequest("hb", "m1", 1), now, CFG)
    assert out.group is g and out.timers == (Schedule("session:m1", now + 10_000),)


def test_with_session_deadline_refuses_a_non_member():
    g = stable_harness(1).group
    with pytest.raises(StateError, match="non-member 'ghost'"):
        g.with_session_deadline("ghost", 5)


def test_frozenmap_set_copies_and_keeps_order():
    m = FrozenMap({"a": 1, "b": 2})
    assert m.set("c", 3) == {"a": 1, "b": 2, "c": 3} and list(m.set("a", 9)) == ["a", "b"]
    assert m == {"a": 1, "b": 2} and hash(m.set("a", 1)) == hash(m)


def test_draft_that_changes_nothing_returns_its_base():
    g = stable_harness(2).group
    assert Draft.of(g, 0).outcome().group is g
    assert handle_timer(g, "session:m1", 0, CFG).group is g
    w = Draft.of(g, 0)
    w.session_deadlines["m1"] += 1
    w.session_deadlines["m1"] -= 1
    assert w.outcome().group is g  # equal again: still the base
    w.session_deadlines["m1"] += 1
    assert w.outcome().group == full_rebuild(w.freeze()) != g


# -- SyncGroup in Stable ------------------------------------------------------------

def draft_sync_in_stable(group: Group, req: SyncRequest, now_ms: int) -> Outcome:
    """handle_sync's Stable branch as the Draft path wrote it."""
    w = Draft.of(group, now_ms, CFG)
    error = _validate_sync(w, req)
    if error is not None:
        w.reply(req.token, SYNC, SyncResult(error))
    else:
        remove_pending_sync_member(w, req.member_id)
        w.reply(req.token, SYNC, SyncResult(
            E.NONE, w.protocol_type, w.protocol_name, w.members[req.member_id].assignment))
        schedule_session(w, req.member_id)
    return w.outcome()


def stable_groups_owing_syncs() -> list[Group]:
    """Stable groups: all synced; the leader synced first (m2, m3 owe one);
    only m3 owes one; static members."""
    synced = stable_harness(3).group
    h = Harness()
    for i in (1, 2, 3):
        h.join(f"j{i}", new_member_id=f"m{i}")
    while h.group.state is S.PREPARING_REBALANCE:
        h.advance(h.timers["join"])
    h.sync("s1", "m1", assignments={"m1": b"a1", "m2": b"a2", "m3": b"a3"})
    leader_first = h.group
    h.sync("s2", "m2")
    one_owing = h.group
    static = stable_harness(2, instance_ids=True).group
    groups = [synced, leader_first, one_owing, static]
    assert all(g.state is S.STABLE for g in groups)
    assert (leader_first.pending_sync, one_owing.pending_sync) == ({"m2", "m3"}, {"m3"})
    assert leader_first.sync_deadline_ms is not None
    return groups


SYNC_REQUESTS = REQUESTS + [("m1", None, None, "other-type", None), ("m3", None, None, None, "roundrobin"),
                            ("m3", None, None, "consumer", "range")]


@pytest.mark.parametrize("group", stable_groups_owing_syncs(), ids=["synced", "leader-first", "one-owing", "static"])
def test_sync_in_stable_fast_path_equals_the_draft_path(group: Group):
    for now in (group.session_deadlines.get("m1", 0), 123_456):
        for member_id, instance_id, generation, *protocol in SYNC_REQUESTS:
            gen = group.generation_id if generation is None else generation
            protocol_type, protocol_name = protocol or (None, None)
            req = SyncRequest(("t", member_id), member_id, gen, instance_id, protocol_type, protocol_name)
            fast = handle_sync(group, req, now, CFG)
            slow = draft_sync_in_stable(group, req, now)
            assert fast == slow
            assert full_rebuild(fast.group) == fast.group  # invariants hold


def test_last_sync_in_stable_ends_the_sync_expiration():
    group = stable_groups_owing_syncs()[2]  # only m3 owes a SyncGroup
    out = handle_sync(group, SyncRequest("s3", "m3", 1), 500, CFG)
    assert out.timers == (Cancel("sync"), Schedule("session:m3", 10_500))
    assert (out.group.pending_sync, out.group.sync_deadline_ms, out.group.sync_generation) == (frozenset(), None, None)
    assert out.reply_for("s3").payload == SyncResult(E.NONE, "consumer", "range", b"a3")
    assert not out.persist and out.group.members is group.members


# -- a follower's SyncGroup in CompletingRebalance -------------------------------------

def draft_sync_in_completing(group: Group, req: SyncRequest, now_ms: int) -> Outcome:
    """handle_sync's CompletingRebalance branch, as the Draft path writes it."""
    w = Draft.of(group, now_ms, CFG)
    error = _validate_sync(w, req)
    if error is not None:
        w.reply(req.token, SYNC, SyncResult(error))
    else:
        old = w.awaiting_sync.get(req.member_id)
        if old is not None and old != req.token:
            w.reply(old, SYNC, SyncResult(E.REBALANCE_IN_PROGRESS))
        w.awaiting_sync[req.member_id] = req.token
        remove_pending_sync_member(w, req.member_id)
    return w.outcome()


def completing_groups() -> list[Group]:
    """CompletingRebalance: nobody synced; m2 parked (m3 owes one); m2 and m3
    parked; static members."""
    h = Harness()
    for i in (1, 2, 3):
        h.join(f"j{i}", new_member_id=f"m{i}")
    while h.group.state is S.PREPARING_REBALANCE:
        h.advance(h.timers["join"])
    fresh = h.group
    h.sync("s2", "m2")
    one_parked = h.group
    h.sync("s3", "m3")
    all_parked = h.group
    s = Harness()
    for i in (1, 2):
        s.join(f"j{i}", new_member_id=f"m{i}", instance_id=f"i{i}")
    while s.group.state is S.PREPARING_REBALANCE:
        s.advance(s.timers["join"])
    groups = [fresh, one_parked, all_parked, s.group]
    assert all(g.state is S.COMPLETING_REBALANCE and g.leader_id == "m1" for g in groups)
    assert (one_parked.pending_sync, all_parked.pending_sync) == ({"m1", "m3"}, {"m1"})
    return groups


@pytest.mark.parametrize("group", completing_groups(), ids=["fresh", "one-parked", "all-parked", "static"])
def test_follower_sync_in_completing_rebalance_fast_path_equals_the_draft_path(group: Group):
    for member_id, instance_id, generation, *protocol in SYNC_REQUESTS:
        if member_id == group.leader_id:
            continue  # the leader's SyncGroup takes the Draft path
        for token in (("t", member_id), group.awaiting_sync.get(member_id)):
            if token is None:
                continue
            gen = group.generation_id if generation is None else generation
            protocol_type, protocol_name = protocol or (None, None)
            req = SyncRequest(token, member_id, gen, instance_id, protocol_type, protocol_name)
            fast = handle_sync(group, req, 777, CFG)
            slow = draft_sync_in_completing(group, req, 777)
            assert fast == slow
            assert full_rebuild(fast.group) == fast.group  # invariants hold


def test_a_second_parked_sync_answers_the_first_and_the_leaders_completes_the_phase():
    group = completing_groups()[1]  # m2 parked as "s2"; m1 and m3 owe a SyncGroup
    out = handle_sync(group, SyncRequest("again", "m2", 1), 0, CFG)
    assert out.replies == (Reply("s2", SYNC, SyncResult(E.REBALANCE_IN_PROGRESS)),)
    assert out.group.awaiting_sync == {"m2": "again"} and out.timers == ()
    out = handle_sync(completing_groups()[2], SyncRequest("s1", "m1", 1, assignments={"m2": b"x"}), 0, CFG)
    assert out.persist and out.group.state is S.STABLE  # the leader's still takes the Draft path


# -- a member's JoinGroup while the group prepares a rebalance ----------------------------

def draft_join(group: Group, req: JoinRequest, now_ms: int, config: GroupConfig = CFG) -> Outcome:
    """handle_join as the Draft path writes it."""
    w = Draft.of(group, now_ms, config)
    if not config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms:
        w.reply(req.token, JOIN, JoinResult.failed(req.member_id, E.INVALID_SESSION_TIMEOUT))
        return w.outcome()
    if not _accept_joining_member(w, req.member_id):
        remove_member(w, req.member_id)
        w.reply(req.token, JOIN, JoinResult.failed("", E.GROUP_MAX_SIZE_REACHED))
    elif req.member_id == "":
        _join_new_member(w, req)
    else:
        _join_current_member(w, req)
    try_complete_join(w)
    return w.outcome()


def preparing_groups() -> list[tuple[str, Group, GroupConfig]]:
    out = []
    h = stable_harness(3)
    h.join("r1", "m1")  # the leader's rejoin starts a rebalance
    out.append(("one-rejoined", h.group, h.config))
    h.join("r2", "m2")
    out.append(("two-rejoined", h.group, h.config))
    s = stable_harness(3, instance_ids=True)
    s.join("r1", "m1", instance_id="i1")
    out.append(("static", s.group, s.config))
    p = stable_harness(3)
    p.join("x", "", new_member_id="p1", require_known=True)  # MEMBER_ID_REQUIRED: p1 pending
    p.join("r1", "m1")
    out.append(("pending-member", p.group, p.config))
    small = GroupConfig(max_group_size=3)
    m = stable_harness(3, config=small)
    m.join("n", "", new_member_id="m4")  # a fourth member: the group is over its size while preparing
    m.join("r1", "m1")
    m.join("r2", "m2")
    out.append(("full", m.group, small))
    d = Harness(config=GroupConfig(initial_rebalance_delay_ms=3000))
    d.join("j1", new_member_id="m1")
    d.join("j2", new_member_id="m2")
    out.append(("initial-delay", d.group, d.config))
    assert all(g.state is S.PREPARING_REBALANCE for _, g, _ in out)
    return out


JOINS = [  # (member id, instance id, protocols, session ms, token)
    ("m1", None, None, None, "again"), ("m1", None, None, None, "r1"), ("m2", None, None, None, "t2"),
    ("m3", None, None, None, "t3"), ("m4", None, None, None, "t4"), ("m2", None, (("range", b"new"),), None, "t2"),
    ("m2", None, (("roundrobin", b"x"),), None, "t2"), ("m2", None, None, 1, "t2"), ("ghost", None, None, None, "g"),
    ("p1", None, None, None, "tp"), ("m2", "i2", None, None, "t2"), ("m2", "i1", None, None, "t2"),
    ("m3", "i3", None, None, "t3"),
]


@pytest.mark.parametrize("name,group,config", preparing_groups(), ids=lambda v: v if isinstance(v, str) else "")
def test_rejoin_while_preparing_fast_path_equals_the_draft_path(name, group, config):
    for member_id, instance_id, protocols, session_ms, token in JOINS:
        req = join_req(token, member_id, instance_id=instance_id, protocols=protocols or (("range", b"meta"),),
                       session_ms=session_ms or 10_000, new_member_id=f"new-{token}")
        fast = handle_join(group, req, 4242, config)
        slow = draft_join(group, req, 4242, config)
        assert fast == slow, (name, member_id, token)
        assert list(fast.group.awaiting_join) == list(slow.group.awaiting_join)
        assert list(fast.group.members) == list(slow.group.members)
        assert full_rebuild(fast.group) == fast.group  # invariants hold


def test_the_last_rejoin_still_completes_the_join_phase():
    h = stable_harness(3)
    h.join("r1", "m1")
    h.join("r2", "m2")
    out = h.join("r3", "m3")
    assert not out.persist and h.group.state is S.COMPLETING_REBALANCE and h.group.generation_id == 2
    assert [r.token for r in out.replies] == ["r1", "r2", "r3"]  # the leader's (m1) first
