"""The heartbeat / commit fast paths give exactly the outcomes of the general
Draft path, and the cheap constructors keep the Group's invariants."""

from __future__ import annotations

import pytest
from test_group_support import Harness, stable_harness

from zkcoord.core.errors import ErrorCode
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.group import (
    Group,
    GroupConfig,
    GroupState,
    HeartbeatRequest,
    HeartbeatResult,
    Outcome,
    Schedule,
    handle_delete,
    handle_heartbeat,
    handle_timer,
    new_group,
    touch_member,
)
from zkcoord.core.messages import HEARTBEAT
from zkcoord.core.membership import validate_current_member
from zkcoord.core.rebalance import Draft, schedule_session
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
