"""Differential test: zkcoord answers classic-group requests as Kafka 3.9 does.

Each scenario sends one request sequence, at fixed API versions, to the
sandbox's real Kafka 3.9 broker (ZooKeeper mode, ``group.initial.rebalance.
delay.ms=0``, default session limits 6000 / 1800000 ms) and then to an
in-process zkcoord daemon configured the same way, each reached through
FindCoordinator. The two transcripts (see :mod:`tests.support.differential`:
error codes, generations, protocol names, leader and member structure with
member ids replaced by aliases, group states) must be equal, and the facts a
scenario relies on (``run.expect``) must hold on Kafka.

Where zkcoord differs from Kafka on purpose (``zkcoord.core.group``, "Where
this differs from Kafka") no scenario here can observe it: protocol ties are
avoided, no JoinGroup/SyncGroup is superseded while parked, every static
replacement happens with no SyncGroup pending, and fail-over is not part of
these sequences. Differences that remain are marked ``xfail(strict=True)``
with their cause (all in ``zkcoord.server``, none in the core), so they
turn into failures the day they are fixed.

Two things that look like differences but are not tested as such:

* Member metadata of protocol type ``"consumer"`` is a real
  ConsumerProtocolSubscription here. Kafka 3.9 parses it when a join phase
  ends and, on bytes it cannot parse, never ends the join phase (the parse
  error escapes ``onCompleteJoin``); zkcoord answers. No scenario sends such
  metadata, as it would only hang the Kafka half.
* Commits go to partitions that exist, except in the one scenario about
  them: Kafka answers UNKNOWN_TOPIC_OR_PARTITION per missing partition.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.differential import (
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NON_EMPTY_GROUP,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    SUBSCRIPTION,
    SUBSCRIPTION_2,
    RANGE,
    Run,
    commit,
    delete,
    describe,
    diff,
    fetch,
    heartbeat,
    join,
    join_new_member,
    leave,
    stable_group,
    sync,
    until_rebalancing,
)
from tests.support.wire import parse_address
from zkcoord.config import DaemonConfig
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration

KAFKA_MIN_SESSION_MS, KAFKA_MAX_SESSION_MS = 6000, 1_800_000
SCENARIOS = []


class ZkcoordDiffers(AssertionError):
    """zkcoord's transcript is not Kafka's (an xfail expects only this)."""


def scenario(*params, xfail: str | None = None):
    """Register ``fn(run, *params)`` as a scenario (one test per params);
    ``xfail`` names the known cause of a difference."""
    def register(fn):
        name = fn.__name__ + "".join(f"-{p}" for p in params)
        marks = [pytest.mark.xfail(strict=True, raises=ZkcoordDiffers, reason=xfail)] if xfail else []
        SCENARIOS.append(pytest.param(fn, params, id=name, marks=marks))
        return fn
    return register


# -- JoinGroup -----------------------------------------------------------------------

@scenario(9)
@scenario(5)
@scenario(4)
async def member_id_required_then_rejoin(run: Run, version: int) -> None:
    g = run.group
    a = await run.client()
    pending = await join_new_member(run, a, "a", version=version)
    joined = await run.wait("a joins with its id", pending)
    run.expect("a leads generation 1", (joined.generation_id, joined.leader), (1, joined.member_id))
    await run.call("a syncs", a, sync(g, joined.member_id, 1, {joined.member_id: b"all"}))
    await run.call("describe", a, describe(g))
    # A second MEMBER_ID_REQUIRED id that is never used does not disturb the group.
    b = await run.client(client_id="b")
    await run.call("b join without id", b, join(g, version=version), expect=MEMBER_ID_REQUIRED)
    await run.call("a heartbeat", a, heartbeat(g, joined.member_id, 1))
    await run.call("describe", a, describe(g))


@scenario(3)
@scenario(2)
@scenario(1)
@scenario(0)
async def old_join_without_member_id(run: Run, version: int) -> None:
    g = run.group
    sync_version, hb_version = min(version, 2), min(version, 2)
    a = await run.client(client_id="a")
    first = await run.call("a joins", a, join(g, version=version))
    run.expect("no MEMBER_ID_REQUIRED before v4", first.error_code, NONE)
    a_id = first.member_id
    b = await run.client(client_id="b")
    pending = run.send(b, join(g, version=version))
    await until_rebalancing(run, "a heartbeat", a, a_id, 1, version=hb_version)
    await run.call("describe while preparing", a, describe(g, version=0))
    rejoined = await run.call("a rejoins", a, join(g, a_id, version=version))
    b_joined = await run.wait("b joined", pending)
    run.expect("generation 2", (rejoined.generation_id, b_joined.generation_id), (2, 2))
    await run.call("describe while completing", a, describe(g, version=0))
    b_sync = run.send(b, sync(g, b_joined.member_id, 2, version=sync_version))
    await run.call("a syncs", a, sync(g, a_id, 2, {a_id: b"a", b_joined.member_id: b"b"}, version=sync_version))
    await run.wait("b synced", b_sync)
    await run.call("b leaves", b, leave(g, (b_joined.member_id, None), version=min(version, 2)))
    await run.call("b leaves again", b, leave(g, (b_joined.member_id, None), version=min(version, 2)),
                   expect=UNKNOWN_MEMBER_ID)
    await run.call("a heartbeat", a, heartbeat(g, a_id, 2, version=hb_version))


@scenario()
async def inconsistent_protocols(run: Run) -> None:
    g = run.group
    a = await run.client()
    await run.call("empty protocol type", a, join(g, protocol_type=""), expect=INCONSISTENT_GROUP_PROTOCOL)
    await run.call("no protocols", a, join(g, protocols=()), expect=INCONSISTENT_GROUP_PROTOCOL)
    joined = await run.wait("a joins", await join_new_member(run, a, "a"))
    a_id = joined.member_id
    b = await run.client(client_id="b")
    refused = INCONSISTENT_GROUP_PROTOCOL
    roundrobin = ("roundrobin", SUBSCRIPTION)
    await run.call("other protocol type", b, join(g, protocol_type="connect"), expect=refused)
    await run.call("no common protocol", b, join(g, protocols=(roundrobin,)), expect=refused)
    await run.call("one common protocol", b, join(g, protocols=(roundrobin, RANGE[0])), expect=MEMBER_ID_REQUIRED)
    await run.call("a rejoins with another protocol", a, join(g, a_id, protocols=(roundrobin,)), expect=refused)
    await run.call("sync with another protocol type", a, sync(g, a_id, 1, protocol_type="connect"), expect=refused)
    await run.call("sync with another protocol name", a, sync(g, a_id, 1, protocol_name="roundrobin"),
                   expect=refused)
    await run.call("sync with the group's protocol", a, sync(
        g, a_id, 1, {a_id: b"x"}, protocol_type="consumer", protocol_name="range"))


@scenario()
async def session_timeout_limits(run: Run) -> None:
    g = run.group
    a = await run.client()
    for version in (0, 5):
        await run.call(f"v{version} below min", a, join(g, version=version, session_ms=KAFKA_MIN_SESSION_MS - 1),
                       expect=INVALID_SESSION_TIMEOUT)
        await run.call(f"v{version} above max", a, join(g, version=version, session_ms=KAFKA_MAX_SESSION_MS + 1),
                       expect=INVALID_SESSION_TIMEOUT)
    await run.call("known id below min", a, join(g, "ghost", session_ms=1), expect=INVALID_SESSION_TIMEOUT)
    joined = await run.wait("at the min", await join_new_member(run, a, "a", session_ms=KAFKA_MIN_SESSION_MS))
    await run.call("member rejoins above max", a, join(g, joined.member_id, session_ms=KAFKA_MAX_SESSION_MS + 1),
                   expect=INVALID_SESSION_TIMEOUT)
    await run.call("describe", a, describe(g))


# -- SyncGroup, Heartbeat --------------------------------------------------------------

@scenario()
async def sync_and_heartbeat_errors(run: Run) -> None:
    g = run.group
    a = await run.client()
    await run.call("sync, unknown group", a, sync(g, "ghost", 1))
    await run.call("heartbeat, unknown group", a, heartbeat(g, "ghost", 1))
    joined = await run.wait("a joins", await join_new_member(run, a, "a"))
    a_id = joined.member_id
    await run.call("heartbeat while completing", a, heartbeat(g, a_id, 1))
    await run.call("sync, wrong generation", a, sync(g, a_id, 2), expect=ILLEGAL_GENERATION)
    await run.call("sync, unknown member", a, sync(g, "ghost", 1), expect=UNKNOWN_MEMBER_ID)
    await run.call("sync", a, sync(g, a_id, 1, {a_id: b"x"}))
    await run.call("sync again when stable", a, sync(g, a_id, 1))
    await run.call("heartbeat, unknown member", a, heartbeat(g, "ghost", 1), expect=UNKNOWN_MEMBER_ID)
    await run.call("heartbeat, stale generation", a, heartbeat(g, a_id, 0), expect=ILLEGAL_GENERATION)
    await run.call("heartbeat, future generation", a, heartbeat(g, a_id, 2))
    await run.call("heartbeat, unknown instance", a, heartbeat(g, a_id, 1, instance="nobody"))
    await run.call("heartbeat", a, heartbeat(g, a_id, 1))
    await run.call("a leaves", a, leave(g, (a_id, None)))
    await run.call("heartbeat after leaving", a, heartbeat(g, a_id, 2))
    await run.call("sync after leaving", a, sync(g, a_id, 2))
    await run.call("rejoin with the old id", a, join(g, a_id))


@scenario()
async def sync_v5_without_protocol(run: Run) -> None:
    g = run.group
    a = await run.client()
    await run.call("sync, unknown group", a, sync(g, "ghost", 1, protocol_type=None, protocol_name=None))
    joined = await run.wait("a joins", await join_new_member(run, a, "a"))
    a_id = joined.member_id
    await run.call("sync without protocol type", a, sync(g, a_id, 1, {a_id: b"x"}, protocol_type=None))
    await run.call("sync without protocol name", a, sync(g, a_id, 1, {a_id: b"x"}, protocol_name=None))
    await run.call("sync v4 needs neither", a, sync(g, a_id, 1, {a_id: b"x"}, version=4))


@scenario()
async def two_member_rebalance(run: Run) -> None:
    g = run.group
    (a, a_id), (b, b_id) = await stable_group(run, 2)
    await run.call("describe", a, describe(g))
    await run.call("a heartbeat", a, heartbeat(g, a_id, 2))
    await run.call("b heartbeat", b, heartbeat(g, b_id, 2))
    await run.call("b stale heartbeat", b, heartbeat(g, b_id, 1))
    await run.call("b stale sync", b, sync(g, b_id, 1))
    await run.call("b follower rejoin, same metadata", b, join(g, b_id))
    await run.call("a heartbeat still stable", a, heartbeat(g, a_id, 2))
    # The leader's JoinGroup is how a client asks for a rebalance.
    a_rejoin = run.send(a, join(g, a_id))
    hb = await until_rebalancing(run, "b heartbeat sees the leader's join", b, b_id, 2)
    run.expect("a rebalance", hb.error_code, REBALANCE_IN_PROGRESS)
    await run.call("b commits while preparing", b, commit(g, run.topic, {0: 4}, member_id=b_id, generation=2))
    b_rejoined = await run.call("b rejoins", b, join(g, b_id, protocols=(("range", SUBSCRIPTION_2),)))
    await run.wait("a rejoined", a_rejoin)
    run.expect("generation 3", b_rejoined.generation_id, 3)
    b_sync = run.send(b, sync(g, b_id, 3))
    await run.call("a syncs", a, sync(g, a_id, 3, {b_id: b"only-b"}))
    await run.wait("b synced", b_sync)
    await run.call("describe", a, describe(g, version=4))


@scenario()
async def rebalance_corner_cases(run: Run) -> None:
    """A pending MEMBER_ID_REQUIRED id holds the join phase open; repeated
    and changed JoinGroups during CompletingRebalance; the leader leaving."""
    g = run.group
    (a, a_id), (b, b_id) = await stable_group(run, 2)
    c = await run.client(client_id="c3")
    c_id = (await run.call("c join without id", c, join(g))).member_id
    await run.call("pending c heartbeat", c, heartbeat(g, c_id, 2))
    await run.call("pending c commit", c, commit(g, run.topic, {0: 1}, member_id=c_id, generation=2))
    a_join = run.send(a, join(g, a_id))
    await until_rebalancing(run, "b heartbeat sees the leader's join", b, b_id, 2)
    b_join = run.send(b, join(g, b_id))
    await run.call("pending c heartbeat while preparing", c, heartbeat(g, c_id, 2))
    await run.call("describe while c is pending", c, describe(g))
    run.expect("the join phase waits for pending c", (a_join.done(), b_join.done()), (False, False))
    await run.call("pending c leaves", c, leave(g, (c_id, None)))
    await run.wait("a joined", a_join)
    await run.wait("b joined", b_join)
    b_sync = run.send(b, sync(g, b_id, 3))
    b2 = await run.client(client_id="c2")
    await run.call("a rejoins unchanged while completing", a, join(g, a_id))
    await run.call("b rejoins unchanged while completing", b2, join(g, b_id))
    b_changed = run.send(b2, join(g, b_id, protocols=(("range", SUBSCRIPTION_2),)))
    await run.wait("b's parked sync", b_sync)
    await until_rebalancing(run, "a heartbeat sees b's change", a, a_id, 3)
    await run.call("a rejoins", a, join(g, a_id))
    await run.wait("b joined", b_changed)
    b_sync = run.send(b2, sync(g, b_id, 4))
    await run.call("the leader leaves while completing", a, leave(g, (a_id, None)))
    await run.wait("b's parked sync", b_sync)
    await run.call("b heartbeat", b, heartbeat(g, b_id, 4))
    await run.call("b rejoins alone", b, join(g, b_id, protocols=(("range", SUBSCRIPTION_2),)))
    await run.call("b syncs", b, sync(g, b_id, 5, {b_id: b"all"}))
    await run.call("describe", b, describe(g))


@scenario()
async def expirations(run: Run) -> None:
    """Kafka's timers: the join phase, the pending SyncGroup, the session."""
    g = run.group
    short = {"rebalance_ms": 1000, "session_ms": KAFKA_MIN_SESSION_MS}
    (a, a_id), (b, b_id) = await stable_group(run, 2, **short)
    # a does not rejoin: after the rebalance timeout the join phase ends without it.
    await run.call("b rejoins with a new subscription", b, join(g, b_id, protocols=(("range", SUBSCRIPTION_2),),
                                                                **short))
    await run.call("a heartbeat, removed", a, heartbeat(g, a_id, 2))
    await run.call("b syncs", b, sync(g, b_id, 3, {b_id: b"all"}))
    # a joins again but never sends SyncGroup: removed after the rebalance timeout.
    a_join = await join_new_member(run, a, "a again", **short)
    await until_rebalancing(run, "b heartbeat sees a", b, b_id, 3)
    await run.call("b rejoins", b, join(g, b_id, protocols=(("range", SUBSCRIPTION_2),), **short))
    a_id = (await run.wait("a joined", a_join)).member_id
    await run.call("b syncs alone", b, sync(g, b_id, 4, {b_id: b"b", a_id: b"a"}))
    await until_rebalancing(run, "b heartbeat after a's sync deadline", b, b_id, 4)
    await run.call("a heartbeat, removed", a, heartbeat(g, a_id, 4))
    await run.call("b rejoins alone", b, join(g, b_id, protocols=(("range", SUBSCRIPTION_2),), **short))
    await run.call("b syncs", b, sync(g, b_id, 5, {b_id: b"all"}))
    # a joins, syncs, then stops heartbeating: its session ends.
    a_join = await join_new_member(run, a, "a once more", **short)
    await until_rebalancing(run, "b heartbeat sees a again", b, b_id, 5)
    await run.call("b rejoins", b, join(g, b_id, protocols=(("range", SUBSCRIPTION_2),), **short))
    a_id = (await run.wait("a joined", a_join)).member_id
    a_sync = run.send(a, sync(g, a_id, 6))
    await run.call("b syncs", b, sync(g, b_id, 6, {b_id: b"b", a_id: b"a"}))
    await run.wait("a synced", a_sync)
    await until_rebalancing(run, "b heartbeat after a's session", b, b_id, 6, limit_s=30)
    await run.call("a heartbeat, expired", a, heartbeat(g, a_id, 6))
    await run.call("describe", b, describe(g))


# -- static membership -----------------------------------------------------------------

@scenario(9)
@scenario(5)
async def static_member_replacement(run: Run, version: int) -> None:
    g = run.group
    a = await run.client()
    first = await run.call("i1 joins", a, join(g, version=version, instance="i1"))
    run.expect("static members need no MEMBER_ID_REQUIRED", first.error_code, NONE)
    old = first.member_id
    await run.call("i1 syncs", a, sync(g, old, 1, {old: b"p0"}, instance="i1"))
    restarted = await run.client(client_id="c2")
    second = await run.call("i1 restarts with a new member id", restarted, join(g, version=version, instance="i1"))
    run.expect("same generation, new id", (second.generation_id, second.member_id != old), (1, True))
    new = second.member_id
    fenced = FENCED_INSTANCE_ID
    await run.call("old id heartbeat", a, heartbeat(g, old, 1, instance="i1"), expect=fenced)
    await run.call("old id sync", a, sync(g, old, 1, instance="i1"), expect=fenced)
    await run.call("old id join", a, join(g, old, version=version, instance="i1"), expect=fenced)
    await run.call("old id commit", a, commit(g, run.topic, {0: 1}, member_id=old, generation=1, instance="i1"),
                   expect=fenced)
    await run.call("old id leave", a, leave(g, (old, "i1")))
    await run.call("new id heartbeat", restarted, heartbeat(g, new, 1, instance="i1"), expect=NONE)
    await run.call("new id sync gets the assignment", restarted, sync(g, new, 1, instance="i1"))
    await run.call("new id heartbeat, no instance id", restarted, heartbeat(g, new, 1))
    await run.call("describe", restarted, describe(g))
    await run.call("unknown instance, unknown id", restarted, join(g, "ghost", version=version, instance="i9"))
    await run.call("leave by instance id", restarted, leave(g, ("", "i1"), ("", "i2")))
    await run.call("describe after leaving", restarted, describe(g))


@scenario(5)
async def static_replacement_during_rebalance(run: Run, version: int) -> None:
    g = run.group
    i1 = await run.client(client_id="i1-old")
    old1 = (await run.call("i1 joins", i1, join(g, version=version, instance="i1"))).member_id
    await run.call("i1 syncs", i1, sync(g, old1, 1, {old1: b"p0"}, instance="i1"))
    i2 = await run.client(client_id="i2-old")
    i2_join = run.send(i2, join(g, version=version, instance="i2"))
    await until_rebalancing(run, "i1 heartbeat sees i2", i1, old1, 1, instance="i1")
    # i1 restarts instead of rejoining: the new id takes its place in the join phase.
    i1_new = await run.client(client_id="i1-new")
    new1 = await run.call("i1 restarts while preparing", i1_new, join(g, version=version, instance="i1"))
    old2 = (await run.wait("i2 joined", i2_join)).member_id
    run.expect("the restarted i1 leads generation 2", (new1.generation_id, new1.leader), (2, new1.member_id))
    await run.call("old i1 heartbeat", i1, heartbeat(g, old1, 2, instance="i1"), expect=FENCED_INSTANCE_ID)
    # i2 restarts before anyone synced: the assignment may name its old id, so rebalance.
    i2_new = await run.client(client_id="i2-new")
    i2_rejoin = run.send(i2_new, join(g, version=version, instance="i2"))
    await until_rebalancing(run, "i1 heartbeat sees i2's restart", i1_new, new1.member_id, 2, instance="i1")
    await run.call("old i2 sync", i2, sync(g, old2, 2, instance="i2"), expect=FENCED_INSTANCE_ID)
    await run.call("i1 rejoins", i1_new, join(g, new1.member_id, version=version, instance="i1"))
    new2 = await run.wait("restarted i2 joined", i2_rejoin)
    run.expect("generation 3", new2.generation_id, 3)
    await run.call("describe", i1_new, describe(g))


# -- LeaveGroup --------------------------------------------------------------------------

@scenario()
async def batched_leave(run: Run) -> None:
    g = run.group
    (a, a_id), (b, b_id) = await stable_group(run, 2)
    await run.call("leave a, a ghost and an unknown instance", a, leave(
        g, (a_id, None), ("ghost", None), ("", "nobody"), (b_id, "not-b")))
    await until_rebalancing(run, "b heartbeat", b, b_id, 2)
    await run.call("describe while preparing", b, describe(g))
    await run.call("b rejoins alone", b, join(g, b_id))
    await run.call("b syncs", b, sync(g, b_id, 3, {b_id: b"all"}))
    await run.call("leave b twice in one batch", b, leave(g, (b_id, None), (b_id, None)))
    await run.call("describe when empty", b, describe(g))
    other = run.group + "-none"
    await run.call("leave, unknown group", await run.client(other), leave(other, ("ghost", None)))
    await run.call("leave v1, unknown member", b, leave(g, ("ghost", None), version=1))


# -- offsets -----------------------------------------------------------------------------

@scenario()
async def commit_without_generation(run: Run) -> None:
    g, t = run.group, run.topic
    a = await run.client()
    await run.call("standalone commit, new group", a, commit(g, t, {0: 5, 1: 7}), expect=NONE)
    await run.call("fetch", a, fetch(g, t, [0, 1]))
    joined = await run.wait("a joins", await join_new_member(run, a, "a"))
    await run.call("a syncs", a, sync(g, joined.member_id, 1, {joined.member_id: b"x"}))
    await run.call("standalone commit, non-empty group", a, commit(g, t, {0: 6}), expect=UNKNOWN_MEMBER_ID)
    await run.call("member commit", a, commit(g, t, {0: 8}, member_id=joined.member_id, generation=1))
    await run.call("a leaves", a, leave(g, (joined.member_id, None)))
    await run.call("standalone commit, empty group", a, commit(g, t, {1: 9}, version=2), expect=NONE)
    await run.call("commit with a generation, empty group", a, commit(g, t, {1: 10}, generation=2))
    await run.call("fetch all", a, fetch(g, None))
    await run.call("describe", a, describe(g))


@scenario()
async def commit_offsets_below_minus_one(run: Run) -> None:
    """Kafka stores any int64 as an offset and fetches it back; -1 too, which
    then reads as "no offset"."""
    g, t = run.group, run.topic
    a = await run.client()
    await run.call("commit -5 and -2^63", a, commit(g, t, {0: -5, 1: -2**63}), expect=NONE)
    await run.call("fetch them", a, fetch(g, t, [0, 1]))
    await run.call("commit -1 and -2", a, commit(g, t, {0: -1, 1: -2}), expect=NONE)
    await run.call("fetch those", a, fetch(g, t, [0, 1]))
    await run.call("commit 2^63-1 and 3", a, commit(g, t, {0: 2**63 - 1, 1: 3}), expect=NONE)
    await run.call("fetch all", a, fetch(g, None))
    await run.call("describe", a, describe(g))


@scenario()
async def commit_with_wrong_generation(run: Run) -> None:
    g, t = run.group, run.topic
    a = await run.client()
    joined = await run.wait("a joins", await join_new_member(run, a, "a"))
    a_id = joined.member_id
    await run.call("commit while completing", a, commit(g, t, {0: 1}, member_id=a_id, generation=1),
                   expect=REBALANCE_IN_PROGRESS)
    await run.call("a syncs", a, sync(g, a_id, 1, {a_id: b"x"}))
    await run.call("commit, next generation", a, commit(g, t, {0: 2}, member_id=a_id, generation=2),
                   expect=ILLEGAL_GENERATION)
    await run.call("commit, previous generation", a, commit(g, t, {0: 2}, member_id=a_id, generation=0),
                   expect=ILLEGAL_GENERATION)
    await run.call("commit, unknown member", a, commit(g, t, {0: 2}, member_id="ghost", generation=1),
                   expect=UNKNOWN_MEMBER_ID)
    await run.call("commit, no member id", a, commit(g, t, {0: 2}, generation=1))
    await run.call("commit", a, commit(g, t, {0: 3}, member_id=a_id, generation=1, version=8))
    await run.call("fetch", a, fetch(g, t, [0, 1], version=7))


@scenario()
async def commit_with_generation_to_unknown_group(run: Run) -> None:
    a = await run.client()
    request = commit(run.group, run.topic, {0: 1}, member_id="m", generation=1)
    await run.call("commit with generation 1", a, request, expect=ILLEGAL_GENERATION)


@scenario()
async def commit_to_unknown_topic_or_partition(run: Run) -> None:
    g, t = run.group, run.topic
    a = await run.client()
    await run.call("commit, unknown topic", a, commit(g, t + "-none", {0: 1}), expect=UNKNOWN_TOPIC_OR_PARTITION)
    await run.call("commit, one unknown partition", a, commit(g, t, {0: 1, 99: 1}))
    await run.call("fetch", a, fetch(g, None))


@scenario()
async def fetch_unknown_group(run: Run) -> None:
    g, t = run.group, run.topic
    a = await run.client()
    await run.call("fetch v1 partitions", a, fetch(g, t, [0, 1], version=1))
    await run.call("fetch v5 partitions", a, fetch(g, t, [0], version=5))
    await run.call("fetch v5 all", a, fetch(g, None, version=5))


@scenario()
async def offsets_only_group(run: Run) -> None:
    g, t = run.group, run.topic
    a = await run.client()
    await run.call("standalone commit", a, commit(g, t, {0: 5}))
    described = await run.call("describe", a, describe(g))
    run.expect("the commit made a group", described.groups[0].group_state, "Empty")
    await run.call("delete", a, delete(g), expect=NONE)
    await run.call("fetch after delete", a, fetch(g, t, [0]))


@scenario()
async def delete_removes_offsets(run: Run) -> None:
    g, t = run.group, run.topic
    a = await run.client()
    joined = await run.wait("a joins", await join_new_member(run, a, "a"))
    await run.call("a syncs", a, sync(g, joined.member_id, 1, {joined.member_id: b"x"}))
    await run.call("a commits", a, commit(g, t, {0: 5}, member_id=joined.member_id, generation=1))
    await run.call("a leaves", a, leave(g, (joined.member_id, None)))
    await run.call("delete", a, delete(g), expect=NONE)
    await run.call("fetch after delete", a, fetch(g, t, [0]))


# -- DescribeGroups, DeleteGroups ----------------------------------------------------------

@scenario()
async def describe_unknown_group(run: Run) -> None:
    a = await run.client()
    for version in (0, 5):
        described = await run.call(f"describe v{version}", a, describe(run.group, version=version), expect=NONE)
        run.expect("an unknown group is Dead", described.groups[0].group_state, "Dead")


@scenario()
async def delete_groups(run: Run) -> None:
    g = run.group
    a = await run.client()
    await run.call("delete, unknown group", a, delete(g), expect=GROUP_ID_NOT_FOUND)
    joined = await run.wait("a joins", await join_new_member(run, a, "a"))
    await run.call("delete while completing", a, delete(g, version=0), expect=NON_EMPTY_GROUP)
    await run.call("a syncs", a, sync(g, joined.member_id, 1, {joined.member_id: b"x"}))
    await run.call("delete while stable", a, delete(g), expect=NON_EMPTY_GROUP)
    await run.call("a leaves", a, leave(g, (joined.member_id, None)))
    await run.call("describe before deleting", a, describe(g))
    await run.call("delete when empty", a, delete(g, version=1), expect=NONE)
    await run.call("delete again", a, delete(g), expect=GROUP_ID_NOT_FOUND)
    again = await run.wait("a joins the deleted group", await join_new_member(run, a, "a again"))
    run.expect("a new group starts at generation 1", again.generation_id, 1)


@scenario()
async def delete_duplicate_names(run: Run) -> None:
    g = run.group
    a = await run.client()
    joined = await run.wait("a joins", await join_new_member(run, a, "a"))
    await run.call("a leaves", a, leave(g, (joined.member_id, None)))
    await run.call("delete the group named twice", a, delete(g, g))


# -- the test --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kafka_topic(services):
    """A real topic: Kafka answers commits to unknown topics with UNKNOWN_TOPIC_OR_PARTITION."""
    import uuid

    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    name = f"differential-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=services.bootstrap_servers, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])
        deadline = time.monotonic() + 60
        while len(admin.describe_topics([name])[0]["partitions"]) < 2:  # until the broker knows it
            assert time.monotonic() < deadline, f"topic {name} has no metadata after 60 s"
            time.sleep(0.2)
    finally:
        admin.close()
    return name


def _daemon_config(zk_hosts: str, bootstrap_servers: str) -> DaemonConfig:
    return DaemonConfig(
        zookeeper=zk_hosts, listen="127.0.0.1:0", node_id=1, zk_session_timeout_ms=6000,
        group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=KAFKA_MIN_SESSION_MS,
        group_max_session_timeout_ms=KAFKA_MAX_SESSION_MS, bootstrap_servers=bootstrap_servers,
        topic_metadata_refresh_ms=500)


async def _run(target: str, bootstrap: tuple[str, int], fn, params, group: str, topic: str) -> Run:
    run = Run(target, bootstrap, group, topic)
    try:
        await asyncio.wait_for(fn(run, *params), 120)
    except Exception as exc:
        steps = "\n".join(f"  {label}: {view}" for label, view in run.steps)
        raise AssertionError(f"{target}: {exc!r} after the steps:\n{steps}") from exc
    finally:
        await run.close()
    return run


@pytest.mark.parametrize("fn, params", SCENARIOS)
def test_zkcoord_answers_as_kafka(fn, params, services, zk_hosts, unique_name, kafka_topic):
    group = unique_name("g")

    async def both() -> tuple[Run, Run]:
        kafka = await _run("kafka", parse_address(services.bootstrap_servers.split(",")[0]),
                           fn, params, group, kafka_topic)
        daemon = Daemon(_daemon_config(zk_hosts, services.bootstrap_servers))
        running = await daemon.start()
        try:
            ours = await _run("zkcoord", running.advertised, fn, params, group, kafka_topic)
        finally:
            await daemon.stop()
        return kafka, ours

    kafka, ours = asyncio.run(both())
    assert kafka.surprises == [], "Kafka did not behave as the scenario assumes"
    if ours.steps != kafka.steps or ours.surprises:
        raise ZkcoordDiffers("zkcoord differs from Kafka:\n" + diff(kafka.steps, ours.steps)
                             + "".join(f"\n{s}" for s in ours.surprises))
