"""The persisted record (round trip, compactness) and fail-over loading."""

from __future__ import annotations

import base64
import json

import pytest
from test_group_support import GROUP_ID, Harness, stable_harness

from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import (
    GroupConfig,
    GroupState,
    HeartbeatResult,
    Schedule,
    SyncResult,
    from_record,
    handle_delete,
    load_group,
    new_group,
    to_record,
)
from zkcoord.errors import StateError

S = GroupState
E = ErrorCode
CFG = GroupConfig()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def roundtrip(group):
    return from_record(group.group_id, json.loads(json.dumps(to_record(group))))


# -- record format ---------------------------------------------------------------

def test_stable_record_is_exact_and_compact():
    g = stable_harness(2, instance_ids=True).group
    assert to_record(g) == {
        "v": 1, "s": "Stable", "g": 1, "gr": 100, "os": "zookeeper", "pt": "consumer", "pn": "range",
        "l": "m1",
        "m": [
            {"id": "m1", "c": "client", "h": "/10.0.0.1", "st": 10_000, "rt": 30_000,
             "p": [["range", b64(b"meta")]], "i": "i1", "a": b64(b"a-m1")},
            {"id": "m2", "c": "client", "h": "/10.0.0.1", "st": 10_000, "rt": 30_000,
             "p": [["range", b64(b"meta")]], "i": "i2", "a": b64(b"a-m2")},
        ],
    }


def test_stable_round_trip_restores_persisted_part_only():
    g = stable_harness(2, instance_ids=True).group
    back = roundtrip(g)
    assert (back.group_id, back.state, back.generation_id, back.protocol_type,
            back.protocol_name, back.leader_id, back.offset_storage) == (
        GROUP_ID, S.STABLE, 1, "consumer", "range", "m1", "zookeeper")
    assert back.members == g.members and back.static_members == {"i1": "m1", "i2": "m2"}
    assert dict(back.session_deadlines) == {} and back.pending_sync == frozenset()
    assert back.sync_deadline_ms is None and dict(back.awaiting_join) == {}


def test_only_selected_protocol_metadata_is_kept():
    g = stable_harness(2, protocols=(("range", b"r"), ("rr", b"x" * 100))).group
    rec = to_record(g)
    assert [m["p"] for m in rec["m"]] == [[["range", b64(b"r")]]] * 2
    assert roundtrip(g).members["m1"].protocols == (("range", b"r"),)


def test_completing_record_has_no_assignments():
    h = stable_harness(2)
    h.join("l", "m1")
    h.join("f", "m2")
    rec = to_record(h.group)
    assert rec["s"] == "CompletingRebalance" and rec["g"] == 2
    assert all("a" not in m for m in rec["m"])
    assert roundtrip(h.group).state is S.COMPLETING_REBALANCE


def test_preparing_generation_zero_keeps_all_protocols():
    h = Harness()
    h.join("a", new_member_id="m1", protocols=(("range", b"1"), ("rr", b"2")))
    rec = to_record(h.group)
    assert rec["m"][0]["p"] == [["range", b64(b"1")], ["rr", b64(b"2")]] and "pn" not in rec
    assert roundtrip(h.group).members == h.group.members


def test_empty_and_dead_records():
    h = stable_harness(1)
    h.leave("l", ("m1", None))
    assert h.records[-1] == {"v": 1, "s": "Empty", "g": 2, "gr": 100, "os": "zookeeper", "pt": "consumer"}
    back = roundtrip(h.group)
    assert back.state is S.EMPTY and back.generation_id == 2 and back.size == 0
    dead = handle_delete(back).group
    assert to_record(dead)["s"] == "Dead" and roundtrip(dead).state is S.DEAD


@pytest.mark.parametrize("storage", ["zookeeper", "dual", "kafka"])
def test_offset_storage_is_carried_untouched(storage):
    g = new_group(GROUP_ID, storage)
    assert to_record(g) == {"v": 1, "s": "Empty", "g": 0, "os": storage}
    assert roundtrip(g) == g


def _good():
    return to_record(stable_harness(2, instance_ids=True).group)


@pytest.mark.parametrize("mutate", [
    lambda r: r.update(v=2),
    lambda r: r.pop("s"),
    lambda r: r.update(s="Weird"),
    lambda r: r.pop("g"),
    lambda r: r["m"][0].update(a="***not base64***"),
    lambda r: r["m"][0].pop("st"),
    lambda r: r.update(os="s3"),
    lambda r: r.update(l="nobody"),
    lambda r: r["m"][1].update(i="i1"),
    lambda r: r.update(m=[1, 2]),
])
def test_malformed_records_raise_state_error(mutate):
    rec = _good()
    mutate(rec)
    with pytest.raises(StateError, match="stored record of group 'g'"):
        from_record(GROUP_ID, rec)


# -- how many writes ----------------------------------------------------------------

def test_rebalance_of_fifty_members_costs_at_most_two_writes():
    h = Harness()
    for i in range(50):
        h.join(f"j{i}", new_member_id=f"m{i}")
    # The first join reserved generations 1 to 100; the others wrote nothing.
    assert len(h.records) == 1 and h.records[0]["s"] == "PreparingRebalance" and h.records[0]["gr"] == 100
    h.advance(6000)
    assert len(h.records) == 1 and h.group.size == 50 and h.group.state is S.COMPLETING_REBALANCE
    for i in range(1, 50):
        h.sync(f"s{i}", f"m{i}")
        h.heartbeat(f"h{i}", f"m{i}")
    assert len(h.records) == 1
    h.sync("s0", "m0", assignments={f"m{i}": b"x" for i in range(50)})
    assert len(h.records) == 2 and h.records[-1]["s"] == "Stable"
    start = h.now
    # a second rebalance (leader rejoins, everybody follows): one write, its end
    for i in range(50):
        h.join(f"r{i}", f"m{i}")
    assert len(h.records) == 2 and h.group.generation_id == 2
    for i in range(50):
        h.sync(f"t{i}", f"m{i}", assignments={} if i else {"m1": b"y"})
    assert len(h.records) == 3 and h.records[-1]["g"] == 2 and h.now == start


# -- fail-over ------------------------------------------------------------------------

def test_load_stable_group_keeps_generation_and_arms_sessions():
    record = to_record(stable_harness(2).group)
    out = load_group(from_record(GROUP_ID, record), 100_000, CFG)
    g = out.group
    assert g.state is S.STABLE and g.generation_id == 1 and not out.persist
    assert out.timers == (Schedule("session:m1", 110_000), Schedule("session:m2", 110_000))
    assert out.replies == ()
    h = Harness(group=g, now=100_000, timers={"session:m1": 110_000, "session:m2": 110_000})
    h.heartbeat("hb", "m2", generation=1)
    h.sync("s", "m1", generation=1)
    assert h.payload("hb") == HeartbeatResult(E.NONE)
    assert h.payload("s") == SyncResult(E.NONE, "consumer", "range", b"a-m1")


def test_load_after_an_unwritten_generation_refuses_it_and_never_reuses_its_number():
    old = stable_harness(2)
    old.join("l", "m1")
    old.join("f", "m2")  # generation 2 handed out unwritten (reserved), then the owner dies
    assert old.group.generation_id == 2 and old.payload("f").generation_id == 2
    record = old.records[-1]
    assert (record["s"], record["g"], record["gr"]) == ("Stable", 1, 100)
    out = load_group(from_record(GROUP_ID, record), 500_000, CFG)
    g = out.group
    assert g.state is S.STABLE and g.generation_id == 1 and not out.persist
    h = Harness(group=g, now=500_000, timers={t.key: t.deadline_ms for t in out.timers})
    h.heartbeat("hb-new", "m2", generation=2)  # got generation 2 from the dead owner
    h.sync("s-new", "m2", generation=2)
    h.heartbeat("hb-old", "m1", generation=1)
    assert h.payload("hb-new") == HeartbeatResult(E.ILLEGAL_GENERATION)
    assert h.payload("s-new") == SyncResult(E.ILLEGAL_GENERATION)
    assert h.payload("hb-old") == HeartbeatResult(E.NONE)
    # The follower rejoins with unchanged metadata: it gets generation 1 back (stored, so
    # still everybody's); the leader rejoins: the next generation is above the reservation.
    h.join("rf", "m2")
    assert h.payload("rf").generation_id == 1 and h.group.state is S.STABLE
    out = h.join("rl", "m1")
    assert out.persist and h.records[-1]["gr"] == 200  # a new block, written as the rebalance starts
    h.join("rf2", "m2")
    assert h.group.generation_id == 101 and h.payload("rf2").generation_id == 101


def test_load_completing_group_makes_members_rejoin():
    old = stable_harness(2)
    old.join("l", "m1")
    old.join("f", "m2")
    record = to_record(old.group)  # a generation written at its start (a fresh reservation)
    assert (record["s"], record["g"], record["gr"]) == ("CompletingRebalance", 2, 100)
    out = load_group(from_record(GROUP_ID, record), 500_000, CFG)
    g = out.group
    assert g.state is S.PREPARING_REBALANCE and g.generation_id == 2
    assert out.persist and g.generation_reserved == 200  # above the previous owner's numbers
    assert out.timers == (Schedule("join", 530_000), Schedule("session:m1", 510_000),
                          Schedule("session:m2", 510_000))
    h = Harness(group=g, now=500_000, timers={t.key: t.deadline_ms for t in out.timers})
    h.heartbeat("hb-new", "m1", generation=2)  # got its JoinGroup response
    h.heartbeat("hb-old", "m2", generation=1)  # did not
    h.sync("s", "m1", generation=2)
    assert h.payload("hb-new") == HeartbeatResult(E.REBALANCE_IN_PROGRESS)
    assert h.payload("hb-old") == HeartbeatResult(E.ILLEGAL_GENERATION)
    assert h.payload("s") == SyncResult(E.REBALANCE_IN_PROGRESS)
    h.join("rl", "m1")
    h.join("rf", "m2")
    assert h.group.generation_id == 101 and h.payload("rf").error is E.NONE


def test_load_completing_group_drops_members_that_never_come_back():
    old = stable_harness(2)
    old.join("l", "m1")
    old.join("f", "m2")
    out = load_group(from_record(GROUP_ID, to_record(old.group)), 0, CFG)
    h = Harness(group=out.group, timers={t.key: t.deadline_ms for t in out.timers})
    h.join("rl", "m1")
    h.advance(9_999)
    assert h.group.state is S.PREPARING_REBALANCE
    h.advance(10_000)  # m2 never reaches the new owner: its session lapses
    assert list(h.group.members) == ["m1"] and h.group.generation_id == 101
    assert h.group.state is S.COMPLETING_REBALANCE and h.payload("rl").error is E.NONE


def test_load_empty_and_dead_groups_arm_nothing():
    empty = from_record(GROUP_ID, {"v": 1, "s": "Empty", "g": 4, "os": "dual", "pt": "consumer"})
    out = load_group(empty, 7, CFG)
    assert out.group == empty and out.timers == () and not out.persist
    dead = from_record(GROUP_ID, {"v": 1, "s": "Dead", "g": 4, "os": "zookeeper"})
    assert load_group(dead, 7, CFG).timers == ()


def test_load_oversized_group_rebalances():
    record = to_record(stable_harness(3).group)
    out = load_group(from_record(GROUP_ID, record), 0, GroupConfig(max_group_size=2))
    assert out.group.state is S.PREPARING_REBALANCE and out.timer("join") == Schedule("join", 30_000)


def test_load_preparing_record_rearms_join_deadline():
    h = stable_harness(2)
    h.join("l", "m1")
    record = to_record(h.group)
    assert record["s"] == "PreparingRebalance"
    out = load_group(from_record(GROUP_ID, record), 1000, CFG)
    assert out.group.state is S.PREPARING_REBALANCE and out.timer("join") == Schedule("join", 31_000)
    assert dict(out.group.awaiting_join) == {}


def test_load_strips_in_memory_state():
    h = stable_harness(2)
    h.join("l", "m1")
    out = load_group(h.group, 0, CFG)
    assert dict(out.group.awaiting_join) == {} and out.group.new_members == frozenset()
