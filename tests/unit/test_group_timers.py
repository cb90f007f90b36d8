"""Timers driven by a fake clock: initial delay, rebalance, session, pending, sync."""

from __future__ import annotations

from dataclasses import replace

from test_group_support import Harness, keep_alive, stable_harness

from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import (
    Cancel,
    GroupConfig,
    GroupState,
    HeartbeatResult,
    JoinMember,
    JoinResult,
    Schedule,
    SyncResult,
    handle_timer,
)
from zkcoord.core.membership import InitialDelay

S = GroupState
E = ErrorCode
CFG = GroupConfig()


def join_schedules(h: Harness) -> list[int]:
    return [op.deadline_ms for o in h.outcomes for op in o.timers
            if isinstance(op, Schedule) and op.key == "join"]


# -- initial rebalance delay -------------------------------------------------------

def test_initial_delay_alone_completes_after_delay():
    h = Harness()
    h.join("a", new_member_id="m1")
    h.advance(2999)
    assert h.group.state is S.PREPARING_REBALANCE
    h.advance(3000)
    assert h.group.state is S.COMPLETING_REBALANCE and h.now == 3000


def test_initial_delay_extends_while_members_arrive_up_to_rebalance_timeout():
    h = Harness()
    h.join("a", new_member_id="m1", rebalance_ms=10_000)
    assert h.group.initial_delay == InitialDelay(3000, 7000)
    for t, token in ((1000, "b"), (5000, "c"), (8000, "d"), (9500, "e")):
        h.advance(t)
        h.join(token, new_member_id=f"m-{token}", rebalance_ms=10_000)
        assert h.group.state is S.PREPARING_REBALANCE
    h.advance(9999)
    assert h.group.initial_delay == InitialDelay(1000, 0) and h.group.join_deadline_ms == 10_000
    h.advance(10_000)
    assert join_schedules(h) == [3000, 6000, 9000, 10_000]
    assert h.group.state is S.COMPLETING_REBALANCE and h.group.size == 5
    assert h.payload("e").generation_id == 1


def test_initial_delay_extension_arithmetic_matches_kafka():
    h = Harness()
    h.join("a", new_member_id="m1")  # rebalance timeout 30s: remaining 27s
    h.join("b", new_member_id="m2")
    h.advance(3000)
    assert h.group.initial_delay == InitialDelay(3000, 24_000)
    assert h.group.new_member_added is False and h.group.join_deadline_ms == 6000
    h.advance(6000)
    assert h.group.state is S.COMPLETING_REBALANCE


def test_initial_delay_longer_than_rebalance_timeout_is_not_extended():
    h = Harness()
    h.join("a", new_member_id="m1", rebalance_ms=1000)
    assert h.group.initial_delay == InitialDelay(3000, 0)
    h.join("b", new_member_id="m2", rebalance_ms=1000)
    h.advance(3000)
    assert h.group.state is S.COMPLETING_REBALANCE and join_schedules(h) == [3000]


def test_zero_initial_delay():
    h = Harness(config=GroupConfig(initial_rebalance_delay_ms=0))
    out = h.join("a", new_member_id="m1")
    assert out.timer("join") == Schedule("join", 0)
    h.advance(0)
    assert h.group.state is S.COMPLETING_REBALANCE


def test_no_extension_for_groups_past_generation_zero():
    h = stable_harness(1)
    h.leave("l", ("m1", None))
    assert h.group.state is S.EMPTY and h.group.generation_id == 2
    start = h.now
    h.join("a", new_member_id="n1")
    h.join("b", new_member_id="n2")
    assert h.group.new_member_added is False
    h.advance(start + 3000)
    assert h.group.state is S.COMPLETING_REBALANCE and h.group.generation_id == 3


def test_join_timer_before_deadline_or_out_of_phase_is_harmless():
    h = Harness()
    h.join("a", new_member_id="m1")
    g = h.group
    assert handle_timer(g, "join", 2999, CFG).group is g
    stable = stable_harness(1).group
    assert handle_timer(stable, "join", 10**9, CFG).group is stable
    assert handle_timer(stable, "bogus", 10**9, CFG).group is stable


# -- rebalance timeout ---------------------------------------------------------------

def test_rebalance_timeout_drops_leader_and_elects_joined_member():
    h = stable_harness(2)
    start = h.now
    h.join("f", "m2", protocols=(("range", b"v2"),))
    keep_alive(h, ["m1"], start + 30_000)
    assert list(h.group.members) == ["m2"] and h.group.leader_id == "m2"
    assert h.payload("f") == JoinResult(E.NONE, 2, "consumer", "range", "m2", "m2", False,
                                       (JoinMember("m2", None, b"v2"),))
    assert h.group.state is S.COMPLETING_REBALANCE and h.group.generation_id == 2
    assert h.records[-1]["g"] == 1  # generation 2 was reserved: its start wrote nothing


# -- sessions ------------------------------------------------------------------------

def test_session_expiry_in_stable_removes_member_and_rebalances():
    h = stable_harness(2)
    start = h.now
    h.advance(start + 9000)
    h.heartbeat("hb", "m1")
    assert h.timers["session:m1"] == start + 19_000 and h.timers["session:m2"] == start + 10_000
    h.advance(start + 10_000)
    out = h.outcomes[-1]
    assert list(h.group.members) == ["m1"] and h.group.state is S.PREPARING_REBALANCE
    assert not out.persist and out.timer("join") == Schedule("join", start + 40_000)
    h.heartbeat("hb2", "m1")
    assert h.payload("hb2") == HeartbeatResult(E.REBALANCE_IN_PROGRESS)
    h.join("r", "m1")
    assert h.group.generation_id == 2 and h.payload("r").members == (JoinMember("m1", None, b"meta"),)


def test_stale_session_timer_is_harmless():
    h = stable_harness(2)
    start = h.now
    h.now = start + 5000
    h.heartbeat("hb", "m2")
    g = h.group
    assert handle_timer(g, "session:m2", start + 10_000, CFG).group is g
    assert handle_timer(g, "session:ghost", start + 10**6, CFG).group is g
    assert handle_timer(g, "pending:ghost", start + 10**6, CFG).group is g


def test_last_member_expiring_empties_group_and_persists():
    h = stable_harness(1)
    h.advance(h.now + 10_000)
    assert h.group.state is S.EMPTY and h.group.generation_id == 2
    assert h.outcomes[-1].persist and h.records[-1]["s"] == "Empty"
    assert h.timers == {}


def test_parked_join_excuses_missed_heartbeats():
    h = stable_harness(2)
    start = h.now
    h.now = start + 1000
    h.join("l", "m1")
    keep_alive(h, ["m2"], start + 10_000)
    assert "m1" in h.group.members and "m1" not in h.group.session_deadlines
    assert "session:m1" not in h.timers
    h.now = start + 11_000
    h.join("f", "m2")
    assert h.group.generation_id == 2 and h.timers["session:m1"] == start + 21_000


def test_new_member_parked_too_long_expires():
    h = stable_harness(1)
    start = h.now
    h.join("n", new_member_id="m2", rebalance_ms=600_000)
    assert h.timers["session:m2"] == start + 300_000 and h.timers["join"] == start + 600_000
    keep_alive(h, ["m1"], start + 300_000, step=9000)
    assert h.payload("n") == JoinResult.failed("", E.UNKNOWN_MEMBER_ID)
    assert list(h.group.members) == ["m1"] and h.group.state is S.PREPARING_REBALANCE


def test_parked_sync_excuses_missed_heartbeats_then_sync_timeout():
    h = Harness()
    h.join("a", new_member_id="m1")
    h.join("b", new_member_id="m2")
    h.advance(6000)
    h.sync("s2", "m2")
    keep_alive(h, ["m1"], 16_000)
    assert "m2" in h.group.members and "m2" not in h.group.session_deadlines
    keep_alive(h, ["m1"], 36_000)
    # the leader never sent SyncGroup: it is removed, the rest must rejoin
    assert list(h.group.members) == ["m2"] and h.group.state is S.PREPARING_REBALANCE
    assert h.payload("s2") == SyncResult(E.REBALANCE_IN_PROGRESS)
    assert h.timers["session:m2"] == 46_000 and h.group.leader_id == "m2"


# -- pending member ids --------------------------------------------------------------

def test_pending_member_id_expires():
    h = Harness()
    h.join("p", new_member_id="p1", require_known=True)
    g = h.group
    assert handle_timer(g, "pending:p1", 9999, CFG).group is g
    h.advance(10_000)
    assert dict(h.group.pending_members) == {} and h.group.state is S.EMPTY
    h.join("late", "p1")
    assert h.payload("late") == JoinResult.failed("p1", E.UNKNOWN_MEMBER_ID)


def test_pending_member_expiry_unblocks_join_phase():
    h = stable_harness(1)
    start = h.now
    h.join("p", new_member_id="p1", require_known=True)
    h.join("l", "m1")
    assert h.group.state is S.PREPARING_REBALANCE
    h.advance(start + 10_000)
    assert h.group.generation_id == 2 and not h.outcomes[-1].persist  # reserved
    assert h.payload("l").members == (JoinMember("m1", None, b"meta"),)


# -- pending sync --------------------------------------------------------------------

def test_follower_that_never_syncs_is_removed():
    h = Harness()
    h.join("a", new_member_id="m1")
    h.join("b", new_member_id="m2")
    h.advance(6000)
    h.sync("s1", "m1", assignments={"m1": b"x", "m2": b"y"})
    assert h.group.state is S.STABLE and h.timers["sync"] == 36_000
    keep_alive(h, ["m1", "m2"], 35_999)
    h.advance(36_000)
    out = h.outcomes[-1]
    assert list(h.group.members) == ["m1"] and h.group.state is S.PREPARING_REBALANCE
    assert h.group.generation_id == 1 and not out.persist
    assert out.timers == (Cancel("session:m2"), Schedule("join", 66_000))


def test_sync_timer_of_older_generation_is_harmless():
    h = stable_harness(2)
    g = replace(h.group, sync_deadline_ms=h.now, sync_generation=0, pending_sync=frozenset({"m2"}))
    out = handle_timer(g, "sync", h.now, CFG)
    assert out.group.state is S.STABLE and list(out.group.members) == ["m1", "m2"]
    assert out.group.sync_deadline_ms is None and out.timers == ()


def test_all_synced_cancels_sync_timer():
    h = Harness()
    h.join("a", new_member_id="m1")
    h.join("b", new_member_id="m2")
    h.advance(6000)
    h.sync("s2", "m2")
    out = h.sync("s1", "m1", assignments={})
    assert out.timer("sync") == Cancel("sync") and "sync" not in h.timers
    assert h.group.sync_deadline_ms is None and h.group.pending_sync == frozenset()
