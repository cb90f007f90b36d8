"""Static membership (group.instance.id): replacement, fencing, leaving."""

from __future__ import annotations

from test_group_support import Harness, keep_alive, stable_harness

from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import (
    Cancel,
    GroupState,
    HeartbeatResult,
    JoinMember,
    JoinResult,
    LeaveResult,
    Schedule,
    SyncResult,
    validate_offset_commit,
)
from zkcoord.core.messages import LeaveMemberResult

S = GroupState
E = ErrorCode


def test_static_member_joins_without_member_id_required():
    h = Harness()
    out = h.join("j", new_member_id="i1-uuid", instance_id="i1", require_known=True)
    assert out.replies == () and h.group.state is S.PREPARING_REBALANCE
    assert dict(h.group.static_members) == {"i1": "i1-uuid"}
    h.advance(3000)
    assert h.payload("j").members == (JoinMember("i1-uuid", "i1", b"meta"),)


def test_static_replacement_in_stable_without_protocol_change_keeps_generation():
    h = stable_harness(2, instance_ids=True)
    h.now = 10_000
    out = h.join("r", new_member_id="m2-new", instance_id="i2")
    assert out.persist and h.group.state is S.STABLE and h.group.generation_id == 1
    assert list(h.group.members) == ["m1", "m2-new"]
    assert dict(h.group.static_members) == {"i1": "m1", "i2": "m2-new"}
    assert h.group.members["m2-new"].assignment == b"a-m2"
    assert h.payload("r") == JoinResult(E.NONE, 1, "consumer", "range", "m1", "m2-new", False, ())
    assert out.timers == (Cancel("session:m2"), Schedule("session:m2-new", 20_000))
    assert h.records[-1]["m"][1]["id"] == "m2-new" and h.records[-1]["s"] == "Stable"
    h.sync("s", "m2-new")
    assert h.payload("s") == SyncResult(E.NONE, "consumer", "range", b"a-m2")


def test_static_leader_replacement_reports_old_leader_to_old_clients():
    h = stable_harness(2, instance_ids=True)
    h.join("r", new_member_id="m1-new", instance_id="i1")
    assert h.group.leader_id == "m1-new"
    assert h.payload("r") == JoinResult(E.NONE, 1, "consumer", "range", "m1", "m1-new", False, ())


def test_static_leader_replacement_skips_assignment_for_new_clients():
    h = stable_harness(2, instance_ids=True)
    h.join("r", new_member_id="m1-new", instance_id="i1", skip=True)
    assert h.payload("r") == JoinResult(
        E.NONE, 1, "consumer", "range", "m1-new", "m1-new", True,
        (JoinMember("m1-new", "i1", b"meta"), JoinMember("m2", "i2", b"meta")))
    h.join("r2", new_member_id="m2-new", instance_id="i2", skip=True)
    assert h.payload("r2") == JoinResult(E.NONE, 1, "consumer", "range", "m1-new", "m2-new", False, ())


def test_static_replacement_with_protocol_change_rebalances():
    h = stable_harness(2, instance_ids=True, protocols=(("range", b"meta"), ("rr", b"meta")))
    out = h.join("r", new_member_id="m2-new", instance_id="i2", protocols=(("rr", b"meta"),))
    assert h.group.state is S.PREPARING_REBALANCE and not out.persist and out.replies == ()
    assert dict(h.group.awaiting_join) == {"m2-new": "r"}


def test_old_member_id_is_fenced_after_replacement():
    h = stable_harness(2, instance_ids=True)
    h.join("r", new_member_id="m2-new", instance_id="i2")
    h.heartbeat("hb", "m2", instance_id="i2")
    h.sync("s", "m2", instance_id="i2")
    h.join("j", "m2", instance_id="i2")
    assert h.payload("hb") == HeartbeatResult(E.FENCED_INSTANCE_ID)
    assert h.payload("s") == SyncResult(E.FENCED_INSTANCE_ID)
    assert h.payload("j") == JoinResult.failed("m2", E.FENCED_INSTANCE_ID)
    assert validate_offset_commit(h.group, "m2", 1, "i2") is E.FENCED_INSTANCE_ID
    assert validate_offset_commit(h.group, "m2-new", 1, "i2") is E.NONE
    assert validate_offset_commit(h.group, "m2-new", 1, "i9") is E.UNKNOWN_MEMBER_ID
    h.heartbeat("hb2", "m2-new", instance_id="i9")
    assert h.payload("hb2") == HeartbeatResult(E.UNKNOWN_MEMBER_ID)


def test_static_replacement_while_preparing_fences_parked_join():
    h = stable_harness(3, instance_ids=True)
    h.join("l", "m1", instance_id="i1")
    h.join("old", "m2", instance_id="i2")
    assert h.group.state is S.PREPARING_REBALANCE
    out = h.join("new", new_member_id="m2-new", instance_id="i2")
    assert h.payload("old") == JoinResult.failed("m2", E.FENCED_INSTANCE_ID)
    assert dict(h.group.awaiting_join) == {"m1": "l", "m2-new": "new"}
    assert not out.persist
    h.join("rj3", "m3", instance_id="i3")
    assert h.group.generation_id == 2
    assert h.payload("new") == JoinResult(E.NONE, 2, "consumer", "range", "m1", "m2-new", False, ())


def test_static_replacement_while_completing_fences_sync_and_rebalances():
    h = stable_harness(2, instance_ids=True)
    h.join("l", "m1", instance_id="i1")
    h.join("f", "m2", instance_id="i2")
    h.sync("s-old", "m2", instance_id="i2")
    out = h.join("new", new_member_id="m2-new", instance_id="i2")
    assert h.payload("s-old") == SyncResult(E.FENCED_INSTANCE_ID)
    assert h.group.state is S.PREPARING_REBALANCE and not out.persist
    assert dict(h.group.awaiting_join) == {"m2-new": "new"}


def test_dynamic_members_that_do_not_rejoin_are_dropped_at_rebalance_timeout():
    h = stable_harness(3)
    start = h.now
    h.join("l", "m1")
    assert h.timers["join"] == start + 30_000
    keep_alive(h, ["m2", "m3"], start + 30_000)  # alive, but never rejoin
    assert list(h.group.members) == ["m1"] and h.group.generation_id == 2
    assert h.payload("l").members == (JoinMember("m1", None, b"meta"),)


def test_static_members_survive_join_phase_without_rejoining():
    h = stable_harness(2, instance_ids=True)
    start = h.now
    h.join("l", "m1", instance_id="i1")
    keep_alive(h, ["m2"], start + 30_000)
    assert list(h.group.members) == ["m1", "m2"] and h.group.generation_id == 2
    assert [m.member_id for m in h.payload("l").members] == ["m1", "m2"]
    assert h.group.pending_sync == {"m1", "m2"}


def test_join_timer_rearmed_when_only_unjoined_static_members_remain():
    h = stable_harness(2, instance_ids=True)
    start = h.now
    h.leave("lv", ("m1", "i1"))
    assert h.group.state is S.PREPARING_REBALANCE and h.timers["join"] == start + 30_000
    keep_alive(h, ["m2"], start + 30_000)
    assert h.group.state is S.PREPARING_REBALANCE and h.group.generation_id == 1
    assert h.timers["join"] == start + 60_000
    h.join("back", "m2", instance_id="i2")
    assert h.group.generation_id == 2 and h.payload("back").error is E.NONE


def test_admin_leave_by_instance_id():
    h = stable_harness(2, instance_ids=True)
    out = h.leave("l", ("", "i2"), ("", "i9"))
    assert h.payload("l") == LeaveResult(E.NONE, (
        LeaveMemberResult("", "i2", E.NONE), LeaveMemberResult("", "i9", E.UNKNOWN_MEMBER_ID)))
    assert list(h.group.members) == ["m1"] and dict(h.group.static_members) == {"i1": "m1"}
    assert h.group.state is S.PREPARING_REBALANCE and not out.persist


def test_leave_with_wrong_instance_id_is_fenced():
    h = stable_harness(2, instance_ids=True)
    h.leave("l", ("m2", "i1"))
    assert h.payload("l").members == (LeaveMemberResult("m2", "i1", E.FENCED_INSTANCE_ID),)
    assert h.group.state is S.STABLE


def test_pending_sync_moves_to_replacement_member_id():
    h = Harness()
    h.join("a", new_member_id="m1", instance_id="i1")
    h.join("b", new_member_id="m2", instance_id="i2")
    h.advance(6000)
    assert h.timers["sync"] == 36_000
    h.sync("s1", "m1", assignments={"m1": b"1", "m2": b"2"})
    assert h.group.state is S.STABLE and h.group.pending_sync == {"m2"}
    h.join("r", new_member_id="m2-new", instance_id="i2", skip=True)
    assert h.group.pending_sync == {"m2-new"}
    out = h.sync("s2", "m2-new")
    assert out.timer("sync") == Cancel("sync") and h.payload("s2").assignment == b"2"
    stable = h.group
    h.now = 36_000
    assert h.fire("sync").group is stable  # a late, cancelled timer changes nothing


def test_static_member_session_expiry_removes_it():
    h = stable_harness(2, instance_ids=True)
    h.heartbeat("hb", "m1", instance_id="i1")
    h.now = h.timers["session:m2"]
    h.fire("session:m2")
    assert list(h.group.members) == ["m1"] and dict(h.group.static_members) == {"i1": "m1"}
    assert h.group.state is S.PREPARING_REBALANCE
