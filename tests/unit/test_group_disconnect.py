"""expire_member_by: a closed connection ends a dynamic member's session
early (the daemon's opt-in member_disconnect_grace_ms), on a fake clock."""

from __future__ import annotations

from dataclasses import replace

from test_group_support import stable_harness

from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import GroupState, HeartbeatResult, Outcome, Schedule, expire_member_by

S = GroupState
E = ErrorCode


def expire(h, member_id: str, grace_ms: int) -> Outcome:
    return h.apply(expire_member_by(h.group, member_id, h.now + grace_ms))


def test_grace_zero_removes_the_member_and_rebalances_as_a_session_expiry():
    h = stable_harness(3)
    start, deadline = h.now, h.group.session_deadlines["m3"]
    assert deadline - start == 10_000  # its normal session
    out = expire(h, "m3", 0)
    assert out.timers == (Schedule("session:m3", start),) and not out.persist and out.replies == ()
    assert h.group.session_deadlines["m3"] == start and h.group.state is S.STABLE
    h.advance(start)
    assert "m3" not in h.group.members and h.group.state is S.PREPARING_REBALANCE
    # The others rejoin; the join phase ends with the two of them: one write, its end, as any rebalance.
    records = len(h.records)
    h.join("r1", "m1")
    h.join("r2", "m2")
    assert h.group.state is S.COMPLETING_REBALANCE and h.group.generation_id == 2
    assert list(h.group.members) == ["m1", "m2"]
    h.sync("t2", "m2")
    h.sync("t1", "m1", assignments={"m1": b"x", "m2": b"y"})
    assert h.group.state is S.STABLE and len(h.records) - records == 1


def test_a_grace_shortens_the_deadline_and_a_heartbeat_within_it_restores_the_session():
    h = stable_harness(2)
    start = h.now
    expire(h, "m2", 500)
    assert h.group.session_deadlines["m2"] == start + 500
    h.advance(start + 400)
    h.heartbeat("hb", "m2")  # it reconnected and heartbeats: the normal session again
    assert h.payload("hb") == HeartbeatResult(E.NONE)
    assert h.group.session_deadlines["m2"] == start + 400 + 10_000
    h.advance(start + 5_000)
    assert "m2" in h.group.members and h.group.state is S.STABLE and h.group.generation_id == 1


def test_without_a_heartbeat_the_member_goes_at_the_grace_not_at_its_session():
    h = stable_harness(2)
    start = h.now
    expire(h, "m2", 500)
    h.advance(start + 499)
    assert "m2" in h.group.members
    h.advance(start + 500)
    assert "m2" not in h.group.members and h.group.state is S.PREPARING_REBALANCE


def test_a_later_deadline_never_extends_the_session():
    h = stable_harness(2)
    deadline = h.group.session_deadlines["m2"]
    before = h.group
    out = expire(h, "m2", 60_000)
    assert out.group is before and out.timers == () and h.group.session_deadlines["m2"] == deadline
    assert expire(h, "m2", deadline - h.now).group is before  # equal: unchanged too


def test_static_members_unknown_ids_and_dead_groups_are_left_alone():
    h = stable_harness(2, instance_ids=True)
    before = h.group
    assert expire(h, "m2", 0).group is before and expire(h, "ghost", 0).group is before
    h.advance(h.now + 5_000)
    assert "m2" in h.group.members


def test_a_parked_member_stays_excused_as_at_any_session_expiry():
    h = stable_harness(2)
    h.heartbeat("hb", "m2")
    h.join("rj", "m1")  # m1 rejoins: PreparingRebalance, its JoinGroup parked
    assert h.group.state is S.PREPARING_REBALANCE and "m1" in h.group.awaiting_join
    out = expire(h, "m1", 0)
    assert out.timers == (Schedule("session:m1", h.now),)
    h.fire("session:m1")
    assert "m1" in h.group.members and "m1" not in h.group.session_deadlines


def test_a_member_without_a_deadline_gets_one():
    h = stable_harness(2)
    h.group = replace(h.group, session_deadlines={"m1": h.group.session_deadlines["m1"]})
    out = expire(h, "m2", 100)
    assert out.timers == (Schedule("session:m2", h.now + 100),)
    h.advance(h.now + 100)
    assert "m2" not in h.group.members
