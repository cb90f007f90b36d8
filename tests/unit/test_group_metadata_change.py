"""handle_metadata_change: a subscribed topic's partition count changed."""

from __future__ import annotations

import pytest
from test_group_support import REBALANCE_MS, SESSION_MS, Harness, stable_harness

from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import (
    Cancel,
    GroupConfig,
    GroupState,
    HeartbeatResult,
    JoinMember,
    Outcome,
    Schedule,
    SyncResult,
    handle_delete,
    handle_metadata_change,
    new_group,
)

S = GroupState
E = ErrorCode
CFG = GroupConfig()


def changed(h: Harness) -> Outcome:
    return h.apply(handle_metadata_change(h.group, h.now, h.config))


def test_stable_group_starts_a_rebalance_that_members_learn_by_heartbeat():
    h = stable_harness(2)
    before = h.group
    outcome = changed(h)
    assert (outcome.persist, outcome.replies) == (False, ())
    assert outcome.timers == (Schedule("join", h.now + REBALANCE_MS),)
    g = outcome.group
    assert (g.state, g.generation_id, g.leader_id, g.protocol_name) == (S.PREPARING_REBALANCE, 1, "m1", "range")
    assert (g.join_deadline_ms, g.initial_delay, dict(g.awaiting_join)) == (h.now + REBALANCE_MS, None, {})
    assert g.members == before.members  # assignments are kept until the next generation
    assert g.session_deadlines == before.session_deadlines
    h.heartbeat("hb2", "m2")
    assert h.payload("hb2") == HeartbeatResult(E.REBALANCE_IN_PROGRESS)


def test_the_rebalance_it_starts_ends_in_the_next_generation():
    h = stable_harness(2)
    changed(h)
    h.join("r2", "m2")
    assert not h.answered("r2")
    h.join("r1", "m1")
    assert (h.group.state, h.group.generation_id) == (S.COMPLETING_REBALANCE, 2)
    assert h.payload("r1").members == (JoinMember("m1", None, b"meta"), JoinMember("m2", None, b"meta"))
    assert (h.payload("r2").generation_id, h.payload("r2").leader_id) == (2, "m1")


def test_completing_rebalance_answers_parked_syncs_and_clears_assignments():
    h = stable_harness(2)
    h.join("r1", "m1")
    h.join("r2", "m2")
    assert (h.group.state, h.group.generation_id) == (S.COMPLETING_REBALANCE, 2)
    assert [m.assignment for m in h.group.members.values()] == [b"a-m1", b"a-m2"]
    h.sync("again-s2", "m2")
    assert not h.answered("again-s2") and "sync" in h.timers
    outcome = changed(h)
    assert outcome.replies[0].payload == SyncResult(E.REBALANCE_IN_PROGRESS)
    assert [r.token for r in outcome.replies] == ["again-s2"]
    # The member answered gets a fresh session, as Kafka's propagateAssignment does.
    assert outcome.timers == (Schedule("session:m2", h.now + SESSION_MS), Cancel("sync"),
                              Schedule("join", h.now + REBALANCE_MS))
    g = outcome.group
    assert (g.state, g.generation_id, dict(g.awaiting_sync), g.pending_sync) == \
        (S.PREPARING_REBALANCE, 2, {}, frozenset())
    assert (g.sync_deadline_ms, g.sync_generation) == (None, None)
    assert [m.assignment for m in g.members.values()] == [b"", b""]
    h.sync("again-s1", "m1", assignments={"m1": b"late"})
    assert h.payload("again-s1") == SyncResult(E.REBALANCE_IN_PROGRESS)


def _preparing() -> Harness:
    h = stable_harness(2)
    h.join("r1", "m1")  # the leader's join starts a rebalance
    assert h.group.state is S.PREPARING_REBALANCE
    return h


def _dead() -> Harness:
    h = Harness()
    h.apply(handle_delete(h.group))
    assert h.group.state is S.DEAD
    return h


@pytest.mark.parametrize("make", [Harness, _preparing, _dead], ids=["empty", "preparing", "dead"])
def test_other_states_change_nothing(make):
    h = make()
    before = h.group
    outcome = handle_metadata_change(before, h.now + 1, CFG)
    assert outcome == Outcome(before)
    assert outcome.group is before


def test_a_never_used_group_stays_as_it_was():
    group = new_group("g")
    assert handle_metadata_change(group, 5, CFG) == Outcome(group)
