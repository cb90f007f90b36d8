"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup and offset-commit validation."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_group_support import Harness, join_req, stable_harness

from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import (
    Cancel,
    GroupConfig,
    GroupState,
    HeartbeatResult,
    JoinMember,
    JoinResult,
    LeaveResult,
    Schedule,
    SyncResult,
    handle_join,
    new_group,
    touch_member,
    validate_offset_commit,
)
from zkcoord.core.group_record import to_record
from zkcoord.core.membership import InitialDelay
from zkcoord.core.messages import LeaveMemberResult

S = GroupState
E = ErrorCode
CFG = GroupConfig()


def ok_join(gen, member, leader="m1", members=(), protocol="range"):
    return JoinResult(E.NONE, gen, "consumer", protocol, leader, member, False, tuple(members))


# -- the first join ------------------------------------------------------------------

def test_first_join_starts_initial_delay_and_parks():
    h = Harness()
    out = h.join("j1", new_member_id="m1")
    g = out.group
    assert (g.state, g.generation_id, g.leader_id, g.protocol_type) == (
        S.PREPARING_REBALANCE, 0, "m1", "consumer")
    assert dict(g.awaiting_join) == {"m1": "j1"} and g.new_members == {"m1"}
    assert g.join_deadline_ms == 3000 and g.initial_delay == InitialDelay(3000, 27_000)
    # A new group has no reserved generation: the first join reserves a block
    # (written now, while the initial delay runs, not when the join phase ends).
    assert out.replies == () and out.persist and g.generation_reserved == 100
    assert out.timers == (Schedule("session:m1", 300_000), Schedule("join", 3000))


def test_single_member_rebalance_end_to_end():
    h = Harness()
    h.join("j1", new_member_id="m1")
    h.now = 3000
    out = h.fire("join")
    # Generation 1 is already reserved: the end of the join phase writes nothing.
    assert not out.persist and h.group.state is S.COMPLETING_REBALANCE
    assert h.payload("j1") == ok_join(1, "m1", members=[JoinMember("m1", None, b"meta")])
    assert out.timers == (Cancel("join"), Schedule("session:m1", 13_000), Schedule("sync", 33_000))
    assert h.group.pending_sync == {"m1"} and h.group.new_members == frozenset()
    h.now = 4000
    out = h.sync("s1", "m1", assignments={"m1": b"A"})
    assert out.persist and h.group.state is S.STABLE
    assert h.payload("s1") == SyncResult(E.NONE, "consumer", "range", b"A")
    assert out.timers == (Cancel("sync"), Schedule("session:m1", 14_000))
    assert len(h.records) == 2
    assert (h.records[0]["s"], h.records[0]["g"], h.records[0]["gr"]) == ("PreparingRebalance", 0, 100)
    assert (h.records[1]["s"], h.records[1]["g"], h.records[1]["gr"]) == ("Stable", 1, 100)


def test_two_member_rebalance_replies_and_leader_member_list():
    h = stable_harness(2)
    assert h.payload("j1") == ok_join(1, "m1", members=[
        JoinMember("m1", None, b"meta"), JoinMember("m2", None, b"meta")])
    assert h.payload("j2") == ok_join(1, "m2")
    assert h.payload("s1") == SyncResult(E.NONE, "consumer", "range", b"a-m1")
    assert h.payload("s2") == SyncResult(E.NONE, "consumer", "range", b"a-m2")
    assert [o.persist for o in h.outcomes].count(True) == 2


# -- join errors -----------------------------------------------------------------------

@pytest.mark.parametrize("session_ms, ok", [
    (5999, False), (6000, True), (1_800_000, True), (1_800_001, False)])
def test_session_timeout_bounds(session_ms, ok):
    g = new_group("g")
    out = handle_join(g, join_req("j", session_ms=session_ms), 0, CFG)
    if ok:
        assert out.group.state is S.PREPARING_REBALANCE and out.replies == ()
    else:
        assert out.group is g
        assert out.reply_for("j").payload == JoinResult.failed("", E.INVALID_SESSION_TIMEOUT)


def test_known_member_id_on_new_group_is_unknown_member():
    g = new_group("g")
    out = handle_join(g, join_req("j", "ghost"), 0, CFG)
    assert out.group is g and out.timers == () and not out.persist
    assert out.reply_for("j").payload == JoinResult.failed("ghost", E.UNKNOWN_MEMBER_ID)


@pytest.mark.parametrize("kw", [{"protocol_type": ""}, {"protocols": ()}])
def test_empty_group_needs_protocol_type_and_protocols(kw):
    g = new_group("g")
    out = handle_join(g, join_req("j", **kw), 0, CFG)
    assert out.group is g
    assert out.reply_for("j").payload == JoinResult.failed("", E.INCONSISTENT_GROUP_PROTOCOL)


def test_inconsistent_protocol_against_existing_members():
    h = stable_harness(2)
    before = h.group
    h.join("a", protocol_type="connect")
    h.join("b", protocols=(("rr", b""),))
    h.join("c", "m2", protocols=(("rr", b""),))
    assert h.payload("a") == JoinResult.failed("", E.INCONSISTENT_GROUP_PROTOCOL)
    assert h.payload("b") == JoinResult.failed("", E.INCONSISTENT_GROUP_PROTOCOL)
    assert h.payload("c") == JoinResult.failed("m2", E.INCONSISTENT_GROUP_PROTOCOL)
    assert h.group is before


def test_new_member_id_must_be_fresh():
    h = stable_harness(1)
    from zkcoord.errors import StateError
    with pytest.raises(StateError, match="new_member_id"):
        handle_join(h.group, join_req("x", new_member_id="m1"), h.now, CFG)
    with pytest.raises(StateError, match="new_member_id"):
        handle_join(h.group, join_req("x", new_member_id=""), h.now, CFG)


# -- MEMBER_ID_REQUIRED --------------------------------------------------------------

def test_member_id_required_then_rejoin():
    h = Harness()
    out = h.join("j1", new_member_id="p1", require_known=True)
    assert h.payload("j1") == JoinResult.failed("p1", E.MEMBER_ID_REQUIRED)
    assert h.group.state is S.EMPTY and dict(h.group.pending_members) == {"p1": 10_000}
    assert out.timers == (Schedule("pending:p1", 10_000),) and not out.persist
    h.now = 500
    out = h.join("j2", "p1", require_known=True)
    assert h.group.state is S.PREPARING_REBALANCE and list(h.group.members) == ["p1"]
    assert dict(h.group.pending_members) == {}
    assert out.timers == (Cancel("pending:p1"), Schedule("session:p1", 300_500), Schedule("join", 3500))
    h.advance(3500)
    assert h.payload("j2") == ok_join(1, "p1", leader="p1", members=[JoinMember("p1", None, b"meta")])


def test_pending_member_blocks_join_completion_until_it_rejoins():
    h = stable_harness(1)
    h.join("p", new_member_id="p1", require_known=True)
    assert h.group.state is S.STABLE and "p1" in h.group.pending_members
    h.join("l", "m1")
    assert h.group.state is S.PREPARING_REBALANCE and not h.answered("l")
    out = h.join("p2", "p1")
    assert not out.persist and h.group.state is S.COMPLETING_REBALANCE and h.group.generation_id == 2
    assert h.payload("l").members == (JoinMember("m1", None, b"meta"), JoinMember("p1", None, b"meta"))
    assert h.payload("p2") == ok_join(2, "p1")


def test_pending_member_with_instance_id_is_unknown_server_error():
    h = Harness()
    h.join("j1", new_member_id="p1", require_known=True)
    h.join("j2", "p1", instance_id="i1")
    assert h.payload("j2") == JoinResult.failed("p1", E.UNKNOWN_SERVER_ERROR)


# -- rejoining -----------------------------------------------------------------------

def test_leader_rejoin_in_stable_rebalances():
    h = stable_harness(2)
    h.now = 20_000
    out = h.join("l", "m1")
    assert h.group.state is S.PREPARING_REBALANCE and not out.persist and out.replies == ()
    assert out.timers == (Schedule("join", 50_000),)
    assert h.heartbeat("hb", "m2").replies[0].payload == HeartbeatResult(E.REBALANCE_IN_PROGRESS)
    out = h.join("f", "m2")
    assert not out.persist and h.group.generation_id == 2  # generation 2 was reserved
    assert h.payload("f") == ok_join(2, "m2")
    assert [r.token for r in out.replies] == ["l", "f"]  # the leader's answer first
    assert [m.member_id for m in h.payload("l").members] == ["m1", "m2"]


def test_single_member_leader_rejoin_completes_at_once():
    h = stable_harness(1)
    out = h.join("l", "m1")
    assert not out.persist and h.group.state is S.COMPLETING_REBALANCE and h.group.generation_id == 2
    assert h.payload("l") == ok_join(2, "m1", members=[JoinMember("m1", None, b"meta")])
    # assignments of the previous generation are not written for CompletingRebalance
    assert "a" not in to_record(h.group)["m"][0]


def test_follower_rejoin_unchanged_in_stable_gets_current_generation():
    h = stable_harness(2)
    before = h.group
    out = h.join("f", "m2")
    assert out.group is before and out.timers == ()
    assert h.payload("f") == ok_join(1, "m2")


def test_follower_rejoin_with_new_metadata_rebalances():
    h = stable_harness(2)
    h.join("f", "m2", protocols=(("range", b"new"),))
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.group.members["m2"].protocols == (("range", b"new"),)
    assert dict(h.group.awaiting_join) == {"m2": "f"}


def test_rejoin_in_completing_with_same_metadata_resends_generation():
    h = stable_harness(2)
    h.join("l", "m1")
    h.join("f", "m2")
    assert h.group.state is S.COMPLETING_REBALANCE
    h.join("f2", "m2")
    h.join("l2", "m1")
    assert h.payload("f2") == ok_join(2, "m2")
    assert h.payload("l2") == h.payload("l")
    assert h.group.state is S.COMPLETING_REBALANCE


def test_rejoin_in_completing_with_new_metadata_fails_parked_syncs():
    h = stable_harness(2)
    h.join("l", "m1")
    h.join("f", "m2")
    h.now = 50_000
    h.sync("sf", "m2")
    out = h.join("l2", "m1", protocols=(("range", b"v2"),))
    assert h.group.state is S.PREPARING_REBALANCE and not out.persist
    assert h.payload("sf") == SyncResult(E.REBALANCE_IN_PROGRESS)
    assert out.timer("session:m2") == Schedule("session:m2", 60_000)
    assert out.timer("sync") == Cancel("sync")
    assert all(m.assignment == b"" for m in h.group.members.values())


def test_duplicate_parked_join_answers_the_older_request():
    h = Harness()
    h.join("j1", new_member_id="m1")
    h.join("j1b", "m1")
    assert h.payload("j1") == JoinResult.failed("m1", E.REBALANCE_IN_PROGRESS)
    assert dict(h.group.awaiting_join) == {"m1": "j1b"}
    h.advance(3000)
    assert h.payload("j1b").error is E.NONE


def test_rejoin_of_unknown_member_in_stable():
    h = stable_harness(2)
    h.join("x", "m9")
    assert h.payload("x") == JoinResult.failed("m9", E.UNKNOWN_MEMBER_ID)


def test_protocol_selected_by_votes_at_completion():
    h = Harness()
    h.join("a", new_member_id="m1", protocols=(("range", b"1"), ("rr", b"1")))
    h.join("b", new_member_id="m2", protocols=(("rr", b"2"), ("range", b"2")))
    h.join("c", new_member_id="m3", protocols=(("rr", b"3"),))
    h.advance(6000)
    assert h.group.protocol_name == "rr"
    assert h.payload("a").members == (
        JoinMember("m1", None, b"1"), JoinMember("m2", None, b"2"), JoinMember("m3", None, b"3"))


# -- group size --------------------------------------------------------------------

def test_max_group_size_refuses_new_member_of_full_group():
    h = stable_harness(2, config=GroupConfig(max_group_size=2))
    before = h.group
    out = h.join("x")
    assert out.group is before
    assert h.payload("x") == JoinResult.failed("", E.GROUP_MAX_SIZE_REACHED)
    h.join("f", "m2")
    assert h.payload("f").error is E.NONE


def test_max_group_size_while_preparing_kicks_out_late_rejoiner():
    h = stable_harness(2)
    h.config = GroupConfig(max_group_size=1)
    h.join("l", "m1")
    out = h.join("f", "m2")
    assert h.payload("f") == JoinResult.failed("", E.GROUP_MAX_SIZE_REACHED)
    assert list(h.group.members) == ["m1"] and h.group.generation_id == 2
    assert not out.persist and out.timer("session:m2") == Cancel("session:m2")


def test_max_group_size_counts_rejoined_members_for_new_ones():
    h = Harness(config=GroupConfig(max_group_size=1))
    h.join("a", new_member_id="m1")
    h.join("b", new_member_id="m2")
    assert h.payload("b") == JoinResult.failed("", E.GROUP_MAX_SIZE_REACHED)
    assert list(h.group.members) == ["m1"]


# -- SyncGroup --------------------------------------------------------------------

def _completing(n=2):
    h = Harness()
    for i in range(1, n + 1):
        h.join(f"j{i}", new_member_id=f"m{i}")
    h.advance(6000 if n > 1 else 3000)
    assert h.group.state is S.COMPLETING_REBALANCE
    return h


def test_follower_sync_parks_until_leader_assigns():
    h = _completing(3)
    out = h.sync("s2", "m2")
    assert out.replies == () and not out.persist and dict(h.group.awaiting_sync) == {"m2": "s2"}
    assert h.group.pending_sync == {"m1", "m3"}
    out = h.sync("s1", "m1", assignments={"m1": b"x", "m2": b"y", "zz": b"ignored"})
    assert out.persist and h.group.state is S.STABLE
    assert h.payload("s2") == SyncResult(E.NONE, "consumer", "range", b"y")
    assert h.payload("s1") == SyncResult(E.NONE, "consumer", "range", b"x")
    assert h.group.members["m3"].assignment == b"" and h.group.pending_sync == {"m3"}
    assert out.timer("sync") is None
    out = h.sync("s3", "m3")
    assert h.payload("s3") == SyncResult(E.NONE, "consumer", "range", b"")
    assert not out.persist and out.timer("sync") == Cancel("sync")


def test_sync_errors():
    h = _completing(2)
    h.sync("a", "m9")
    h.sync("b", "m2", generation=7)
    h.sync("c", "m2", protocol_type="connect")
    h.sync("d", "m2", protocol_name="rr")
    h.sync("e", "m2", protocol_type="consumer", protocol_name="range")
    assert h.payload("a") == SyncResult(E.UNKNOWN_MEMBER_ID)
    assert h.payload("b") == SyncResult(E.ILLEGAL_GENERATION)
    assert h.payload("c") == SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
    assert h.payload("d") == SyncResult(E.INCONSISTENT_GROUP_PROTOCOL)
    assert not h.answered("e")


def test_sync_while_preparing_is_rebalance_in_progress():
    h = stable_harness(2)
    h.join("l", "m1")
    h.sync("s", "m2", generation=1)
    assert h.payload("s") == SyncResult(E.REBALANCE_IN_PROGRESS)


def test_sync_in_stable_returns_assignment_and_restarts_session():
    h = stable_harness(2)
    h.now = 12_345
    out = h.sync("again", "m2")
    assert h.payload("again") == SyncResult(E.NONE, "consumer", "range", b"a-m2")
    assert out.timers == (Schedule("session:m2", 22_345),) and not out.persist


def test_duplicate_parked_sync_answers_the_older_request():
    h = _completing(2)
    h.sync("s", "m2")
    h.sync("s-again", "m2")
    assert h.payload("s") == SyncResult(E.REBALANCE_IN_PROGRESS)
    h.sync("l", "m1", assignments={"m2": b"q"})
    assert h.payload("s-again").assignment == b"q"


# -- Heartbeat ---------------------------------------------------------------------

def test_heartbeat_by_state():
    h = _completing(2)
    h.now = 7000
    out = h.heartbeat("c", "m2")
    assert h.payload("c") == HeartbeatResult(E.NONE)
    assert out.timers == (Schedule("session:m2", 17_000),) and not out.persist
    h.sync("s", "m1", assignments={})
    out = h.heartbeat("st", "m2")
    assert h.payload("st") == HeartbeatResult(E.NONE)
    h.join("l", "m1")
    h.heartbeat("p", "m2")
    assert h.payload("p") == HeartbeatResult(E.REBALANCE_IN_PROGRESS)
    h.heartbeat("g", "m2", generation=0)
    h.heartbeat("u", "m7")
    assert h.payload("g") == HeartbeatResult(E.ILLEGAL_GENERATION)
    assert h.payload("u") == HeartbeatResult(E.UNKNOWN_MEMBER_ID)


def test_heartbeat_on_empty_group_is_unknown_member():
    h = Harness()
    before = h.group
    out = h.heartbeat("h", "m1", generation=0)
    assert h.payload("h") == HeartbeatResult(E.UNKNOWN_MEMBER_ID)
    assert out.group is before and out.timers == () and not out.persist


# -- LeaveGroup --------------------------------------------------------------------

def test_leave_in_stable_starts_rebalance_without_persisting():
    h = stable_harness(2)
    h.now = 1000
    out = h.leave("l", ("m2", None))
    assert h.payload("l") == LeaveResult(E.NONE, (LeaveMemberResult("m2", None, E.NONE),))
    assert h.group.state is S.PREPARING_REBALANCE and list(h.group.members) == ["m1"]
    assert not out.persist and out.timer("session:m2") == Cancel("session:m2")
    assert out.timer("join") == Schedule("join", 31_000)
    h.join("r", "m1")
    assert h.group.generation_id == 2 and h.payload("r").error is E.NONE


def test_leave_of_everyone_makes_group_empty_with_bumped_generation():
    h = stable_harness(2)
    out = h.leave("l", ("m1", None), ("m2", None), ("m3", None))
    assert [m.error for m in h.payload("l").members] == [E.NONE, E.NONE, E.UNKNOWN_MEMBER_ID]
    assert h.group.state is S.EMPTY and h.group.generation_id == 2
    assert h.group.protocol_name is None and h.group.leader_id is None
    assert out.persist and h.records[-1] == {"v": 1, "s": "Empty", "g": 2, "gr": 100,
                                             "os": "zookeeper", "pt": "consumer"}
    assert h.timers == {}


def test_leave_unknown_member_and_empty_group():
    h = Harness()
    before = h.group
    out = h.leave("l", ("m1", None), ("", "i1"))
    assert h.payload("l") == LeaveResult(E.NONE, (
        LeaveMemberResult("m1", None, E.UNKNOWN_MEMBER_ID),
        LeaveMemberResult("", "i1", E.UNKNOWN_MEMBER_ID)))
    assert out.group is before and not out.persist


def test_leave_of_pending_member_completes_join_phase():
    h = stable_harness(1)
    h.join("p", new_member_id="p1", require_known=True)
    h.join("l", "m1")
    assert h.group.state is S.PREPARING_REBALANCE
    out = h.leave("lv", ("p1", None))
    assert h.payload("lv").members == (LeaveMemberResult("p1", None, E.NONE),)
    assert not out.persist and h.group.generation_id == 2 and "pending:p1" not in h.timers


def test_leave_of_member_with_parked_join_answers_it():
    h = Harness()
    h.join("j1", new_member_id="m1")
    h.join("j2", new_member_id="m2")
    h.leave("l", ("m2", None))
    assert h.payload("j2") == JoinResult.failed("", E.UNKNOWN_MEMBER_ID)
    assert list(h.group.members) == ["m1"]


def test_leave_of_member_with_parked_sync_answers_it():
    h = _completing(2)
    h.sync("s2", "m2")
    h.leave("l", ("m2", None))
    assert h.payload("s2") == SyncResult(E.UNKNOWN_MEMBER_ID)
    assert h.group.state is S.PREPARING_REBALANCE


def test_leader_leaving_passes_leadership():
    h = stable_harness(3)
    h.leave("l", ("m1", None))
    assert h.group.leader_id == "m2"


# -- offset commits ----------------------------------------------------------------

def test_offset_commit_without_group():
    assert validate_offset_commit(None, "", -1, None) is E.NONE
    assert validate_offset_commit(None, "m1", 3, None) is E.ILLEGAL_GENERATION


def test_offset_commit_on_empty_group():
    g = new_group("g")
    assert validate_offset_commit(g, "", -1, None) is E.NONE
    assert validate_offset_commit(g, "whoever", -1, None) is E.NONE
    assert validate_offset_commit(g, "m1", 0, None) is E.UNKNOWN_MEMBER_ID
    assert validate_offset_commit(g, "", 0, None) is E.UNKNOWN_MEMBER_ID


def test_offset_commit_on_stable_group():
    g = stable_harness(2).group
    assert validate_offset_commit(g, "m1", 1, None) is E.NONE
    assert validate_offset_commit(g, "m1", 0, None) is E.ILLEGAL_GENERATION
    assert validate_offset_commit(g, "m1", -1, None) is E.ILLEGAL_GENERATION
    assert validate_offset_commit(g, "m9", 1, None) is E.UNKNOWN_MEMBER_ID
    assert validate_offset_commit(g, "", -1, None) is E.UNKNOWN_MEMBER_ID
    assert validate_offset_commit(g, "", -1, None, transactional=True) is E.NONE


def test_offset_commit_during_rebalance():
    h = stable_harness(2)
    h.join("l", "m1")
    assert validate_offset_commit(h.group, "m2", 1, None) is E.NONE  # previous generation
    h.join("f", "m2")
    assert h.group.state is S.COMPLETING_REBALANCE
    assert validate_offset_commit(h.group, "m2", 2, None) is E.REBALANCE_IN_PROGRESS
    assert validate_offset_commit(h.group, "m2", 2, None, transactional=True) is E.NONE
    assert validate_offset_commit(h.group, "m2", 1, None) is E.ILLEGAL_GENERATION


def test_touch_member_counts_commit_as_heartbeat():
    h = stable_harness(2)
    out = touch_member(h.group, "m2", 50_000)
    assert out.timers == (Schedule("session:m2", 60_000),) and not out.persist
    assert touch_member(h.group, "m9", 50_000).group is h.group
    h.join("l", "m1")
    h.join("f", "m2")
    assert touch_member(h.group, "m2", 1).group is h.group


def test_join_request_is_normalised():
    req = join_req("j", protocols=[("range", bytearray(b"x"))])  # type: ignore[arg-type]
    assert req.protocols == (("range", b"x"),)
    assert replace(req, member_id="m").member_id == "m"


# -- generation reservations -------------------------------------------------------------

def test_a_rebalance_writes_a_reservation_only_when_its_generation_is_not_reserved():
    h = stable_harness(2)  # generation 1, generations up to 100 reserved
    assert h.group.generation_reserved == 100
    for generation in range(2, 101):
        records = len(h.records)
        out = h.join(f"lj{generation}", "m1")  # the leader rejoins: a rebalance starts
        assert not out.persist and h.group.state is S.PREPARING_REBALANCE
        out = h.join(f"fj{generation}", "m2")
        assert not out.persist and h.group.generation_id == generation
        h.sync(f"fs{generation}", "m2")
        out = h.sync(f"ls{generation}", "m1", assignments={"m1": b"x", "m2": b"y"})
        assert out.persist and len(h.records) == records + 1  # one write: the assignment
    # Generation 101 is not reserved: the rebalance's start writes the next block.
    out = h.join("lj101", "m1")
    assert out.persist and h.group.state is S.PREPARING_REBALANCE and h.group.generation_reserved == 200
    assert (h.records[-1]["s"], h.records[-1]["g"], h.records[-1]["gr"]) == ("PreparingRebalance", 100, 200)
    out = h.join("fj101", "m2")
    assert not out.persist and h.group.generation_id == 101
