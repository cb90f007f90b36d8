"""States, the transition table, config, error codes, describe, delete, Dead."""

from __future__ import annotations

import pytest
from test_group_support import GROUP_ID, Harness, join_req, stable_harness

from zkcoord.core.errors import ErrorCode, validate_group_id
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.group import (
    VALID_PREVIOUS,
    Cancel,
    DeleteResult,
    Group,
    GroupConfig,
    GroupState,
    HeartbeatRequest,
    JoinResult,
    LeaveRequest,
    LeaveResult,
    Member,
    Schedule,
    SyncRequest,
    SyncResult,
    describe,
    describe_missing,
    handle_delete,
    handle_heartbeat,
    handle_join,
    handle_leave,
    handle_sync,
    handle_timer,
    handle_unload,
    new_group,
    validate_offset_commit,
)
from zkcoord.core.group_states import check_transition
from zkcoord.core.membership import select_protocol, supports_protocols
from zkcoord.errors import ConfigError, StateError

S = GroupState
E = ErrorCode
CFG = GroupConfig()


# -- the table -----------------------------------------------------------------

def test_valid_previous_is_kafkas_table():
    assert dict(VALID_PREVIOUS) == {
        S.EMPTY: {S.PREPARING_REBALANCE},
        S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
        S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
        S.STABLE: {S.COMPLETING_REBALANCE},
        S.DEAD: {S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD},
    }


@pytest.mark.parametrize("current", list(S))
@pytest.mark.parametrize("target", list(S))
def test_check_transition_enforces_table(current, target):
    if current in VALID_PREVIOUS[target]:
        check_transition(GROUP_ID, current, target)
    else:
        with pytest.raises(StateError, match=f"cannot move from {current.value} to {target.value}"):
            check_transition(GROUP_ID, current, target)


def test_state_names_and_actions():
    assert [s.value for s in S] == [
        "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    for state in S:
        assert len(state.action) > 40
    assert "REBALANCE_IN_PROGRESS" in S.PREPARING_REBALANCE.action
    assert "COORDINATOR_NOT_AVAILABLE" in S.DEAD.action


# -- config and model ------------------------------------------------------------

def test_group_config_defaults():
    assert CFG == GroupConfig(6000, 1_800_000, 3000, 2**31 - 1)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"min_session_timeout_ms": -1}, "negative"),
    ({"min_session_timeout_ms": 10, "max_session_timeout_ms": 5}, "below"),
    ({"initial_rebalance_delay_ms": -5}, "initial_rebalance_delay_ms"),
    ({"max_group_size": 0}, "at least 1"),
])
def test_group_config_validation(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        GroupConfig(**kwargs)


def test_new_group_is_empty_generation_zero():
    g = new_group("orders")
    assert (g.group_id, g.state, g.generation_id, g.protocol_type, g.protocol_name,
            g.leader_id, dict(g.members), g.offset_storage) == (
        "orders", S.EMPTY, 0, None, None, None, {}, "zookeeper")
    assert new_group("x", "dual").offset_storage == "dual"
    assert hash(g) == hash(new_group("orders"))


def _member(mid, iid=None):
    return Member(mid, iid, "c", "h", 10_000, 30_000, "consumer", (("range", b""),))


def test_group_invariants_are_checked():
    with pytest.raises(StateError, match="offset_storage"):
        Group("g", offset_storage="s3")
    with pytest.raises(StateError, match="static_members"):
        Group("g", members={"a": _member("a", "i")})
    with pytest.raises(StateError, match="leader"):
        Group("g", members={"a": _member("a")}, leader_id="b")
    with pytest.raises(StateError, match="awaiting_join"):
        Group("g", awaiting_join={"a": 1})
    ok = Group("g", members={"a": _member("a", "i")}, static_members={"i": "a"}, leader_id="a")
    assert isinstance(ok.members, FrozenMap) and ok.size == 1 and ok.is_leader("a")


def test_frozen_map():
    m = FrozenMap({"b": 1, "a": 2})
    assert list(m) == ["b", "a"] and m == {"a": 2, "b": 1} and len(m) == 2
    assert hash(m) == hash(FrozenMap([("a", 2), ("b", 1)]))
    assert m.thaw() == {"b": 1, "a": 2} and "a" in m and "z" not in m
    with pytest.raises(TypeError):
        m["c"] = 3  # type: ignore[index]


# -- protocol selection ------------------------------------------------------------

def _pm(mid, *names):
    return Member(mid, None, "c", "h", 1, 1, "consumer", tuple((n, n.encode()) for n in names))


def test_select_protocol_most_votes_among_common():
    members = {"a": _pm("a", "rr", "range", "sticky"), "b": _pm("b", "range", "rr"),
               "c": _pm("c", "range", "rr", "x")}
    assert select_protocol(members) == "range"


def test_select_protocol_tie_goes_to_earliest_vote():
    members = {"a": _pm("a", "rr", "range"), "b": _pm("b", "range", "rr")}
    assert select_protocol(members) == "rr"
    assert select_protocol(dict(reversed(list(members.items())))) == "range"
    with pytest.raises(StateError):
        select_protocol({})


def test_supports_protocols():
    empty = new_group("g")
    assert supports_protocols(empty, "consumer", frozenset({"x"}))
    assert not supports_protocols(empty, "", frozenset({"x"}))
    assert not supports_protocols(empty, "consumer", frozenset())
    h = stable_harness(2, protocols=(("range", b""), ("rr", b"")))
    assert supports_protocols(h.group, "consumer", frozenset({"rr", "zz"}))
    assert not supports_protocols(h.group, "consumer", frozenset({"zz"}))
    assert not supports_protocols(h.group, "connect", frozenset({"range"}))


# -- error codes -----------------------------------------------------------------

def test_error_codes_match_kafka_errors_java():
    expected = {
        "UNKNOWN_SERVER_ERROR": -1, "NONE": 0, "UNKNOWN_TOPIC_OR_PARTITION": 3,
        "OFFSET_METADATA_TOO_LARGE": 12, "COORDINATOR_LOAD_IN_PROGRESS": 14,
        "COORDINATOR_NOT_AVAILABLE": 15, "NOT_COORDINATOR": 16, "ILLEGAL_GENERATION": 22,
        "INCONSISTENT_GROUP_PROTOCOL": 23, "INVALID_GROUP_ID": 24, "UNKNOWN_MEMBER_ID": 25,
        "INVALID_SESSION_TIMEOUT": 26, "REBALANCE_IN_PROGRESS": 27,
        "INVALID_COMMIT_OFFSET_SIZE": 28, "GROUP_AUTHORIZATION_FAILED": 30,
        "UNSUPPORTED_VERSION": 35, "INVALID_REQUEST": 42, "NON_EMPTY_GROUP": 68,
        "GROUP_ID_NOT_FOUND": 69, "MEMBER_ID_REQUIRED": 79, "GROUP_MAX_SIZE_REACHED": 81,
        "FENCED_INSTANCE_ID": 82, "GROUP_SUBSCRIBED_TO_TOPIC": 86,
    }
    for name, code in expected.items():
        assert ErrorCode[name] == code


def test_retriable():
    assert E.NOT_COORDINATOR.retriable and E.COORDINATOR_NOT_AVAILABLE.retriable
    assert not E.REBALANCE_IN_PROGRESS.retriable and not E.UNKNOWN_MEMBER_ID.retriable


@pytest.mark.parametrize("group_id, ok", [
    ("payments", True), ("a.b-c_d", True), ("x" * 249, True), ("grüppe", True),
    ("", False), (None, False), ("x" * 250, False),
    # Kafka accepts these; zkcoord encodes them into znode names (zk/paths.group_name)
    (".", True), ("..", True), ("a/b", True), ("tab\there", True), ("nul\x00", True), ("del\x7f", True),
    ("c1\x85", True), ("priv\ue000", True), ("spec\ufff0", True), ("emoji\U0001F642", True),
])
def test_validate_group_id(group_id, ok):
    assert validate_group_id(group_id) == (E.NONE if ok else E.INVALID_GROUP_ID)


def test_empty_group_id_only_where_kafka_takes_it():
    assert validate_group_id("", allow_empty=True) is E.NONE
    assert validate_group_id(None, allow_empty=True) is E.INVALID_GROUP_ID


# -- describe ------------------------------------------------------------------------

def test_describe_stable_shows_protocol_metadata_and_assignment():
    h = stable_harness(2)
    d = describe(h.group)
    assert (d.group_id, d.error, d.state, d.protocol_type, d.protocol) == (
        GROUP_ID, E.NONE, "Stable", "consumer", "range")
    assert [(m.member_id, m.metadata, m.assignment) for m in d.members] == [
        ("m1", b"meta", b"a-m1"), ("m2", b"meta", b"a-m2")]
    assert d.members[0].client_host == "/10.0.0.1" and d.members[0].client_id == "client"


def test_describe_other_states_hide_metadata():
    h = Harness()
    assert describe(h.group).state == "Empty"
    h.join("j1", new_member_id="m1")
    d = describe(h.group)
    assert (d.state, d.protocol_type, d.protocol) == ("PreparingRebalance", "consumer", "")
    assert [(m.member_id, m.metadata, m.assignment) for m in d.members] == [("m1", b"", b"")]
    h.advance(3000)
    assert describe(h.group).state == "CompletingRebalance"
    assert describe(h.group).protocol == ""
    assert describe_missing("nope") == describe_missing("nope")
    assert (describe_missing("nope").state, describe_missing("nope").members) == ("Dead", ())


# -- delete ------------------------------------------------------------------------

def test_delete_empty_group_goes_dead_and_persists():
    g = new_group(GROUP_ID)
    out = handle_delete(g, "d")
    assert out.group.state is S.DEAD and out.persist
    assert out.reply_for("d").payload == DeleteResult(E.NONE)
    assert describe(out.group).state == "Dead"


def test_delete_missing_or_dead_group_is_not_found():
    out = handle_delete(new_group(GROUP_ID), "d", exists=False)
    assert out.reply_for("d").payload == DeleteResult(E.GROUP_ID_NOT_FOUND) and not out.persist
    dead = handle_delete(new_group(GROUP_ID)).group
    out = handle_delete(dead, "d2")
    assert out.reply_for("d2").payload == DeleteResult(E.GROUP_ID_NOT_FOUND)
    assert out.group is dead and not out.persist


def test_delete_non_empty_group_refused_in_every_active_state():
    h = Harness()
    h.join("j1", new_member_id="m1")
    assert handle_delete(h.group, "d").reply_for("d").payload.error is E.NON_EMPTY_GROUP
    h.advance(3000)
    assert h.group.state is S.COMPLETING_REBALANCE
    assert handle_delete(h.group, "d").reply_for("d").payload.error is E.NON_EMPTY_GROUP
    h.sync("s", "m1", assignments={"m1": b"x"})
    out = handle_delete(h.group, "d")
    assert out.reply_for("d").payload.error is E.NON_EMPTY_GROUP and out.group is h.group


def test_delete_empty_group_with_pending_member_cancels_its_timer():
    h = Harness()
    h.join("j1", new_member_id="p1", require_known=True)
    assert h.group.state is S.EMPTY and "pending:p1" in h.timers
    out = h.apply(handle_delete(h.group, "d"))
    assert out.timers == (Cancel("pending:p1"),) and h.timers == {}
    assert dict(h.group.pending_members) == {}


# -- Dead ------------------------------------------------------------------------

def test_dead_group_answers_coordinator_not_available():
    dead = handle_delete(new_group(GROUP_ID)).group
    for req in (join_req("a"), join_req("b", "m1")):
        out = handle_join(dead, req, 0, CFG)
        assert out.reply_for(req.token).payload.error is E.COORDINATOR_NOT_AVAILABLE
        assert out.group is dead
    assert handle_join(dead, join_req("a"), 0, CFG).reply_for("a").payload == JoinResult.failed(
        "", E.COORDINATOR_NOT_AVAILABLE)
    out = handle_sync(dead, SyncRequest("s", "m1", 0), 0, CFG)
    assert out.reply_for("s").payload == SyncResult(E.COORDINATOR_NOT_AVAILABLE)
    out = handle_heartbeat(dead, HeartbeatRequest("h", "m1", 0), 0, CFG)
    assert out.reply_for("h").payload.error is E.COORDINATOR_NOT_AVAILABLE
    out = handle_leave(dead, LeaveRequest("l", (("m1", None),)), 0, CFG)
    assert out.reply_for("l").payload == LeaveResult(E.COORDINATOR_NOT_AVAILABLE, ())
    assert handle_timer(dead, "join", 10**9, CFG).group is dead
    assert validate_offset_commit(dead, "", -1, None) is E.COORDINATOR_NOT_AVAILABLE


# -- unload ------------------------------------------------------------------------

def test_unload_preparing_answers_parked_joins_not_coordinator():
    h = Harness()
    h.join("j1", new_member_id="m1")
    h.join("j2", new_member_id="m2")
    out = h.apply(handle_unload(h.group))
    assert h.group.state is S.DEAD and not out.persist
    assert h.payload("j1") == JoinResult.failed("m1", E.NOT_COORDINATOR)
    assert h.payload("j2") == JoinResult.failed("m2", E.NOT_COORDINATOR)
    assert h.timers == {}


def test_unload_completing_answers_parked_syncs_not_coordinator():
    h = stable_harness(2)
    h.join("jx", "m1")
    h.join("jy", "m2")
    assert h.group.state is S.COMPLETING_REBALANCE
    h.sync("sy", "m2")
    out = h.apply(handle_unload(h.group))
    assert h.payload("sy") == SyncResult(E.NOT_COORDINATOR)
    assert h.group.state is S.DEAD and h.timers == {} and not out.persist
    assert all(isinstance(t, Cancel) for t in out.timers)


def test_unload_stable_cancels_sessions():
    h = stable_harness(2)
    assert {"session:m1", "session:m2"} <= set(h.timers)
    h.apply(handle_unload(h.group))
    assert h.timers == {} and h.group.state is S.DEAD
    assert dict(h.group.session_deadlines) == {}


def test_schedule_and_cancel_are_values():
    assert Schedule("join", 5) == Schedule("join", 5) and Cancel("x") != Cancel("y")
