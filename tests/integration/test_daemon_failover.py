"""Fail-over between real ``zkcoord run`` processes on real ZooKeeper.

Each test starts daemon subprocesses in its own chroot (tests/support/
daemons.py) and drives consumer-group members over the Kafka protocol
(tests/support/members.py), then injects one fault: kill -9 of a group's
owner (in a Stable group and in each rebalance phase), SIGSTOP past the
ZooKeeper session time-out, a ZooKeeper restart, SIGTERM, a node id in use,
a corrupt state znode. Outcomes are checked exactly: who owns the group,
its stored state and generation, what the members were told, which offsets
are stored. Waits are bounded waits for a condition, never sleeps for time
to pass. Every daemon is killed at teardown, pass or fail.

A lookup of a group nobody owns names a live daemon (rendezvous hashing,
``zkcoord.core.placement``) and makes nobody contend; the group's first
group request makes the daemon that gets it contend. When a daemon's
session ends (or it stops), the daemon the placement names among the
survivors takes each of its groups over at once, without a client asking
(``zkcoord.server.takeover``). Tests about one daemon's groups so draw group
ids that lookups send to it, and after a kill to the daemon that should take
over (``tests/support/placement.py``).

What the design promises (the 0.9 consumer rewrite design, "Co-ordinator
failure during rebalance"): a new owner loads the group from ZooKeeper and
restarts failure detection for its members; members that carry on with the
loaded generation keep going; a rebalance interrupted by the fail-over is
redone with a generation number never handed out before: an owner may hand
out the generations it has reserved in the stored record (the first 100) without
writing them, so a new owner starts above the reservation (generation 101).
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from kafka.protocol.admin.groups import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest
from kazoo.exceptions import NoNodeError

from tests.support.daemons import DaemonProcess, logged_fleet, wait_for
from tests.support.members import Ledger, Member, close_all, converge
from tests.support.placement import placed_name
from tests.support.ports import foreign_listener
from tests.support.wire import WireClient
from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import from_record

pytestmark = pytest.mark.integration
E = ErrorCode
ZK_SESSION_TIMEOUT_MS = 4000  # short, so a dead daemon's groups are free within seconds
WAIT_S = 60.0  # bound of every wait for a condition


@pytest.fixture
def fleet(zk_hosts, zk, tmp_path):
    with logged_fleet(zk_hosts, zk, tmp_path / "logs",
                      zk_session_timeout_ms=ZK_SESSION_TIMEOUT_MS, group_initial_rebalance_delay_ms=0) as fleet:
        yield fleet


# -- helpers ----------------------------------------------------------------------

async def call(daemon: DaemonProcess, request, client_id: str = "test"):
    """One request on a fresh connection to ``daemon``."""
    client = await WireClient.connect(*daemon.address, client_id)
    try:
        return await client.call(request)
    finally:
        await client.close()


async def find(daemon: DaemonProcess, group: str):
    return await call(daemon, FindCoordinatorRequest(version=3, key=group, key_type=0))


async def find_until(daemon: DaemonProcess, group: str, wanted, what: str, timeout_s: float = WAIT_S):
    """FindCoordinator on ``daemon`` until ``wanted(response)``; that response."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = await find(daemon, group)
        if wanted(found):
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}; last answer {found}")
        await asyncio.sleep(0.1)


def owner_of(found) -> tuple[int, int, str, int]:
    return found.error_code, found.node_id, found.host, found.port


def owned_by(daemon: DaemonProcess) -> tuple[int, int, str, int]:
    return E.NONE, daemon.node_id, daemon.host, daemon.port


async def describe(daemon: DaemonProcess, group: str):
    response = await call(daemon, DescribeGroupsRequest(version=4, groups=[group],
                                                        include_authorized_operations=False))
    return response.groups[0]


async def describe_loaded(daemon: DaemonProcess, group: str, timeout_s: float = WAIT_S):
    """:func:`describe`, asked again while the group loads (a takeover won its
    election before loading its state: COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while (described := await describe(daemon, group)).error_code == E.COORDINATOR_LOAD_IN_PROGRESS:
        assert time.monotonic() < deadline, f"group {group} still loading on daemon {daemon.node_id}"
        await asyncio.sleep(0.05)
    return described


async def take(daemon: DaemonProcess, group: str) -> int:
    """A request that makes a daemon contend for a group and stores nothing:
    a first JoinGroup (v4+), MEMBER_ID_REQUIRED from the owner. Its error code.
    (A read, such as DescribeGroups, of a group that exists nowhere contends
    for nothing.)"""
    return (await call(daemon, join_request(group, "", "taker"))).error_code


def stored(zk, group: str) -> tuple[str, int, set[str]]:
    """(state, generation, member ids) of the group's state znode."""
    data, _ = zk.get(f"/coordinators/{group}/state")
    record = from_record(group, json.loads(data))
    return record.state.value, record.generation_id, set(record.members)


def stored_offset(zk, group: str, partition: int, topic: str = "orders") -> int | None:
    try:
        return int(zk.get(f"/consumers/{group}/offsets/{topic}/{partition}")[0])
    except NoNodeError:
        return None


def join_request(group: str, member_id: str, client_id: str, timeout_ms: int = 10_000) -> JoinGroupRequest:
    return JoinGroupRequest(
        version=5, group_id=group, session_timeout_ms=timeout_ms, rebalance_timeout_ms=timeout_ms,
        member_id=member_id, group_instance_id=None, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=client_id.encode())])


def commit_request(group: str, generation: int, member_id: str, offsets: dict[int, int]) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        version=7, group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
        group_instance_id=None, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="orders", partitions=[
            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
            for p, o in sorted(offsets.items())])])


def members_of(ledger: Ledger, generation: int) -> set[str]:
    return set(ledger.synced.get(generation, {}))


def bootstrap_of(*daemons: DaemonProcess):
    return lambda: [d.address for d in daemons]


# -- 1. groups spread over three daemons ---------------------------------------------

def test_three_daemons_spread_groups_and_agree_on_every_owner(fleet, unique_name):
    daemons = fleet.start_many(1, 2, 3)
    live = [d.node_id for d in daemons]
    groups = [placed_name(unique_name, "g", (live, daemons[i % 3].node_id)) for i in range(9)]
    raced = [unique_name("race") for _ in range(6)]

    async def scenario():
        # Nobody owns a new group: every daemon names the same live daemon
        # (the placement's choice), and a lookup alone makes nobody contend.
        for i, group in enumerate(groups):
            for daemon in daemons:
                assert owner_of(await find(daemon, group)) == owned_by(daemons[i % 3]), (group, daemon.node_id)
        assert {g: fleet.contenders(g) for g in groups} == {g: [] for g in groups}
        # A member bootstrapped from all three is sent there and joins: that daemon contends and wins.
        members = [Member("m", group, bootstrap_of(*daemons), Ledger()) for group in groups]
        for member in members:
            assert await converge([member]) == 1
        assert [m.coordinator_id for m in members] == [daemons[i % 3].node_id for i in range(9)]
        await close_all(members)
        # Every daemon names the same owner for every group.
        for i, group in enumerate(groups):
            for daemon in daemons:
                assert owner_of(await find(daemon, group)) == owned_by(daemons[i % 3]), (group, daemon.node_id)
        # Each daemon lists exactly the groups it owns.
        for i, daemon in enumerate(daemons):
            listed = await call(daemon, ListGroupsRequest(version=4, states_filter=[]))
            assert sorted(g.group_id for g in listed.groups) == sorted(groups[i::3])
        # Three daemons racing for a fresh group (each gets a group request
        # for it at once) agree on one winner; the others answer NOT_COORDINATOR.
        winners = {}
        for group in raced:
            codes = list(await asyncio.gather(*(take(d, group) for d in daemons)))
            assert sorted(codes) == sorted([E.MEMBER_ID_REQUIRED, E.NOT_COORDINATOR, E.NOT_COORDINATOR]), codes
            winner = daemons[codes.index(E.MEMBER_ID_REQUIRED)]
            for daemon in daemons:
                assert owner_of(await find(daemon, group)) == owned_by(winner), (group, daemon.node_id)
            winners[group] = winner.node_id
        return winners

    winners = asyncio.run(scenario())
    # One election znode per group, the owner's; losers withdrew theirs.
    assert {g: fleet.contenders(g) for g in groups} == {g: [daemons[i % 3].node_id] for i, g in enumerate(groups)}
    assert {g: fleet.contenders(g) for g in raced} == {g: [winners[g]] for g in raced}
    assert all(d.alive() for d in daemons)


# -- 2. kill -9 of the owner of a Stable group ---------------------------------------

def test_kill_9_of_stable_owner_new_owner_loads_group_members_and_offsets(fleet, zk, unique_name):
    d1, d2, d3 = fleet.start_many(1, 2, 3)
    # Lookups name daemon 1 while it lives, then daemon 2.
    group = placed_name(unique_name, "g", ([1, 2, 3], 1), ([2, 3], 2))
    ledger = Ledger()
    a = Member("a", group, bootstrap_of(d1, d2, d3), ledger, session_timeout_ms=6000)
    b = Member("b", group, bootstrap_of(d1, d2, d3), ledger, session_timeout_ms=6000)

    async def scenario():
        assert owner_of(await find(d1, group)) == owned_by(d1)
        assert await converge([a]) == 1
        assert await converge([a, b]) == 2
        assert fleet.contenders(group) == [1]
        assert stored(zk, group) == ("Stable", 2, {a.member_id, b.member_id})
        deadline = time.monotonic() + WAIT_S
        for m in (a, b):
            assert await m.commit({p: 100 + p for p in m.assignment}, deadline) == [E.NONE] * len(m.assignment)
        assert {p: stored_offset(zk, group, p) for p in range(6)} == {p: 100 + p for p in range(6)}
        await close_all([a, b])

        d1.kill()
        wait_for(lambda: fleet.session_gone(1), WAIT_S, "daemon 1's ZooKeeper session expired")
        # Daemon 2, the one the placement names among the survivors, takes the group over at once,
        # without any client asking (zkcoord.server.takeover); both survivors name it.
        wait_for(lambda: fleet.contenders(group) == [2], WAIT_S, "daemon 2 took the group over")
        for daemon in (d2, d3):
            found = await find_until(daemon, group, lambda f: f.error_code == E.NONE and f.node_id != 1,
                                     f"daemon {daemon.node_id} names a live daemon")
            assert owner_of(found) == owned_by(d2)

        # Loaded as stored: same generation, members and assignments.
        described = await describe_loaded(d2, group)
        assert fleet.contenders(group) == [2]
        assert owner_of(await find(d3, group)) == owned_by(d2)
        assert (described.error_code, described.group_state, described.protocol_data) == (E.NONE, "Stable", "range")
        assert {m.member_id: tuple(json.loads(m.member_assignment)) for m in described.members} == ledger.synced[2]
        # The members carry on with generation 2 on the new owner.
        a.bootstrap = b.bootstrap = bootstrap_of(d2, d3)
        for m in (a, b):
            assert await m.heartbeat(deadline) is E.NONE
            assert (m.coordinator_id, m.generation) == (2, 2)
        assert await a.fetch(deadline) == {("orders", p): 100 + p for p in range(6)}
        assert stored(zk, group) == ("Stable", 2, {a.member_id, b.member_id})

        # Failure detection restarted on load: b falls silent and is removed
        # after its session time-out; a is told to rejoin and gets generation 101,
        # above the generations daemon 1 had reserved.
        deadline = time.monotonic() + WAIT_S
        while await a.heartbeat(deadline) is E.NONE:
            await asyncio.sleep(0.2)
        assert await converge([a]) == 101
        assert stored(zk, group) == ("Stable", 101, {a.member_id})
        stale = await call(d2, b.heartbeat_request(generation=2))
        assert stale.error_code == E.UNKNOWN_MEMBER_ID
        await close_all([a, b])

    asyncio.run(scenario())
    assert ledger.double_owned() == {}
    assert {g: members_of(ledger, g) for g in (1, 2, 3, 101)} == {
        1: {a.member_id}, 2: {a.member_id, b.member_id}, 3: set(), 101: {a.member_id}}


# -- 3. kill -9 of the owner in each rebalance phase -----------------------------------

@pytest.mark.parametrize("phase", ["some-joins", "sync-parked", "before-sync"])
def test_kill_9_of_owner_during_rebalance_ends_stable_in_a_new_generation(fleet, zk, unique_name, phase):
    """some-joins: PreparingRebalance, a rejoined and c asked for an id, b not
    yet (nothing of the new round is stored). sync-parked: the join phase
    completed (generation 3 handed out; it was reserved, so nothing of it is
    stored either), the follower's SyncGroup waits for the leader's.
    before-sync: the same, but no SyncGroup was sent."""
    d1, d2 = fleet.start_many(1, 2)
    group = placed_name(unique_name, "g", ([1, 2], 1))
    ledger = Ledger()
    a, b, c = (Member(n, group, bootstrap_of(d1, d2), ledger) for n in "abc")

    async def scenario():
        assert owner_of(await find(d1, group)) == owned_by(d1)
        assert await converge([a]) == 1
        assert await converge([a, b]) == 2
        assert fleet.contenders(group) == [1]
        await close_all([a, b])
        parked: list[asyncio.Task] = []
        clients = [await WireClient.connect(*d1.address, n) for n in "abc"]
        ca, cb, cc = clients

        if phase == "some-joins":
            parked.append(asyncio.ensure_future(ca.call(join_request(group, a.member_id, "a"))))
            await wait_state(d1, group, "PreparingRebalance")
            first = await cc.call(join_request(group, "", "c"))
            assert first.error_code == E.MEMBER_ID_REQUIRED
            c.member_id = first.member_id
            parked.append(asyncio.ensure_future(cc.call(join_request(group, c.member_id, "c"))))
            assert stored(zk, group) == ("Stable", 2, {a.member_id, b.member_id})
            a.needs_join = c.needs_join = True
        else:
            first = await cc.call(join_request(group, "", "c"))
            c.member_id = first.member_id
            joins = [asyncio.ensure_future(client.call(join_request(group, m.member_id, m.name)))
                     for client, m in ((cc, c), (ca, a), (cb, b))]
            answers = await asyncio.gather(*joins)
            assert {(r.error_code, r.generation_id) for r in answers} == {(E.NONE, 3)}
            for r in answers:
                ledger.joined.setdefault(3, set()).add(r.member_id)
            assert stored(zk, group) == ("Stable", 2, {a.member_id, b.member_id})
            leader = answers[0].leader
            if phase == "sync-parked":
                follower, client = next((m, cl) for m, cl in ((a, ca), (b, cb), (c, cc)) if m.member_id != leader)
                parked.append(asyncio.ensure_future(client.call(follower.sync_request(3, {}))))
            for m in (a, b, c):
                m.generation, m.needs_join = 3, False  # a client goes on to SyncGroup generation 3
        # Give the parked requests a moment to reach the daemon; what follows
        # holds whether or not they did.
        await asyncio.sleep(0.2)
        before = ledger.max_generation()

        d1.kill()
        for task in parked:  # the owner died before answering them
            with pytest.raises((ConnectionError, OSError)):
                await task
        for client in clients:
            await client.close()

        if phase != "some-joins":
            # The new owner loaded generation 2 (Stable) and knows that numbers
            # up to the reservation may be in use: generation 3's SyncGroup and
            # Heartbeat are refused, which makes the clients rejoin.
            # A SyncGroup that reaches it while it is still loading the group gets REBALANCE_IN_PROGRESS
            # (as Kafka answers while loading): sent again until the group is served.
            deadline = time.monotonic() + WAIT_S
            while (synced := await a.call(a.sync_request(3, {}), deadline)).error_code == E.REBALANCE_IN_PROGRESS:
                await asyncio.sleep(0.1)
            assert (synced.error_code, a.coordinator_id) == (E.ILLEGAL_GENERATION, 2)
            assert await b.heartbeat(deadline) is E.ILLEGAL_GENERATION
            a.needs_join = True
        final = await converge([a, b, c])
        await close_all([a, b, c])
        return before, final

    before, final = asyncio.run(scenario())
    assert final > before and final > 100  # never a number daemon 1 may have handed out
    assert stored(zk, group) == ("Stable", final, {a.member_id, b.member_id, c.member_id})
    assert members_of(ledger, final) == {a.member_id, b.member_id, c.member_id}
    assert sorted(p for parts in ledger.synced[final].values() for p in parts) == list(range(6))
    assert ledger.double_owned() == {}
    assert fleet.contenders(group) == [2]


async def wait_state(daemon: DaemonProcess, group: str, state: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while (described := await describe(daemon, group)).group_state != state:
        if time.monotonic() > deadline:
            raise AssertionError(f"group {group} not {state} within {WAIT_S:g} s: {described}")
        await asyncio.sleep(0.05)


# -- 4. SIGSTOP of the owner past its session time-out -----------------------------------

def test_paused_owner_is_fenced_and_steps_down_after_another_daemon_moved_on(fleet, zk, unique_name):
    d1, d2 = fleet.start_many(1, 2)
    group = placed_name(unique_name, "g", ([1, 2], 1))
    ledger = Ledger()
    # Long member sessions: the paused daemon's own member timers must not be
    # what ends its reign when it continues.
    a, b, c = (Member(n, group, bootstrap_of(d1, d2), ledger, session_timeout_ms=60_000) for n in "abc")

    async def scenario():
        assert owner_of(await find(d1, group)) == owned_by(d1)
        assert await converge([a]) == 1
        assert await converge([a, b]) == 2
        assert fleet.contenders(group) == [1]
        old_a, old_b = a.member_id, b.member_id
        await close_all([a, b])

        d1.pause()
        wait_for(lambda: fleet.session_gone(1), WAIT_S, "paused daemon 1's ZooKeeper session expired")
        # Daemon 2 takes the group over at once (zkcoord.server.takeover), no client asking.
        wait_for(lambda: fleet.contenders(group) == [2], WAIT_S, "daemon 2 took the group over")
        for m in (a, b, c):
            m.bootstrap = bootstrap_of(d2)
        found = await find_until(d2, group, lambda f: f.error_code == E.NONE and f.node_id != 1,
                                 "daemon 2 names itself")
        assert owner_of(found) == owned_by(d2)
        # Daemon 2 moves the group on: c joins, generation 101 (above daemon 1's reservation).
        assert await converge([a, b, c]) == 101
        assert fleet.contenders(group) == [2]
        assert stored(zk, group) == ("Stable", 101, {old_a, old_b, c.member_id})
        deadline = time.monotonic() + WAIT_S
        owner0 = next(m for m in (a, b, c) if 0 in m.assignment)
        assert await owner0.commit({0: 300}, deadline) == [E.NONE]
        await close_all([a, b, c])

        # Requests wait in the paused daemon's listen queue; it answers them
        # from its stale view once continued. Both would write: a LeaveGroup of
        # every member ends a generation (a state write), an OffsetCommit of
        # generation 2 writes offsets. Both fences must hold.
        leave = asyncio.ensure_future(call(d1, LeaveGroupRequest(version=3, group_id=group, members=[
            LeaveGroupRequest.MemberIdentity(member_id=old_a, group_instance_id=None),
            LeaveGroupRequest.MemberIdentity(member_id=old_b, group_instance_id=None)])))
        commit = asyncio.ensure_future(call(d1, commit_request(group, 2, old_a, {0: 999})))
        await asyncio.sleep(0.2)  # let both connect and send while the daemon is paused
        assert not leave.done() and not commit.done()
        d1.resume()
        left, committed = await leave, await commit
        # Refused. (Until the daemon has heard from ZooKeeper that its session
        # is gone, it may only know the connection is SUSPENDED, and answers
        # the retriable COORDINATOR_LOAD_IN_PROGRESS instead.)
        refused = {E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS}
        assert left.error_code in refused
        assert [p.error_code in refused for t in committed.topics for p in t.partitions] == [True]

        # It stepped down: every request for the group is refused, the group
        # is left as daemon 2 wrote it.
        deadline = time.monotonic() + WAIT_S
        while (fetched := await call(d1, OffsetFetchRequest(version=5, group_id=group, topics=None))).error_code \
                == E.COORDINATOR_LOAD_IN_PROGRESS:
            assert time.monotonic() < deadline, "daemon 1 stays suspended"
            await asyncio.sleep(0.05)
        assert fetched.error_code == E.NOT_COORDINATOR
        heartbeat = await call(d1, HeartbeatRequest(version=3, group_id=group, generation_id=2, member_id=old_a,
                                                    group_instance_id=None))
        assert heartbeat.error_code == E.NOT_COORDINATOR
        joined = await call(d1, join_request(group, old_b, "b"))
        assert joined.error_code == E.NOT_COORDINATOR
        committed = await call(d1, commit_request(group, 2, old_a, {0: 998}))
        assert [p.error_code for t in committed.topics for p in t.partitions] == [E.NOT_COORDINATOR]
        assert stored(zk, group) == ("Stable", 101, {old_a, old_b, c.member_id})
        assert stored_offset(zk, group, 0) == 300
        assert fleet.contenders(group) == [2]

        # Daemon 1 is back in service with a new session, pointing at daemon 2.
        wait_for(lambda: (fleet.registration(1) or {}).get("pid") == d1.pid, WAIT_S, "daemon 1 registered again")
        found = await find_until(d1, group, lambda f: f.error_code == E.NONE, "daemon 1 names the owner")
        assert owner_of(found) == owned_by(d2)
        for m in (a, b, c):
            assert await m.heartbeat(time.monotonic() + WAIT_S) is E.NONE
            assert (m.coordinator_id, m.generation) == (2, 101)
        await close_all([a, b, c])

    asyncio.run(scenario())
    assert ledger.double_owned() == {}


# -- 5. ZooKeeper restarted under the daemons ---------------------------------------------

def test_daemons_recover_from_a_zookeeper_restart(fleet, zk, sandbox, unique_name):
    d1, d2 = fleet.start_many(1, 2)
    group = placed_name(unique_name, "g", ([1, 2], 1))
    ledger = Ledger()
    # Member sessions outlast the restart: the group itself must not change.
    a, b = (Member(n, group, bootstrap_of(d1, d2), ledger, session_timeout_ms=60_000) for n in "ab")

    async def scenario():
        assert owner_of(await find(d1, group)) == owned_by(d1)
        assert await converge([a]) == 1
        assert await converge([a, b]) == 2
        assert fleet.contenders(group) == [1]
        deadline = time.monotonic() + WAIT_S
        leader = next(m for m in (a, b) if 0 in m.assignment)
        assert await leader.commit({0: 10}, deadline) == [E.NONE]
        await close_all([a, b])

        await asyncio.to_thread(sandbox.restart_server, "zookeeper")

        for node_id, daemon in ((1, d1), (2, d2)):
            wait_for(lambda: (fleet.registration(node_id) or {}).get("pid") == daemon.pid, WAIT_S,
                     f"daemon {node_id} registered after the restart")
        # The group goes on in its generation, and both daemons name its owner. A restart that outlasts
        # the sessions (4 s; a loaded machine) ends them: the daemons register again one after the other,
        # and the first may take the group over before the second is back (a lookup meanwhile names the
        # placement's choice, or COORDINATOR_NOT_AVAILABLE while still reconnecting): so who owns it is
        # read once the members are back, and the daemons are asked until they agree.
        assert await converge([a, b]) == 2
        deadline = time.monotonic() + WAIT_S
        while True:
            owner, other = await find(d1, group), await find(d2, group)
            owners = fleet.contenders(group)
            if owner.error_code == E.NONE and owner_of(other) == owner_of(owner) and owners == [owner.node_id]:
                break
            assert time.monotonic() < deadline, f"the daemons name {owner_of(owner)} and {owner_of(other)}, " \
                                                f"the election {owners}"
            await asyncio.sleep(0.1)
        leader = next(m for m in (a, b) if 0 in m.assignment)
        assert await leader.commit({0: 20}, time.monotonic() + WAIT_S) == [E.NONE]
        assert await leader.fetch(time.monotonic() + WAIT_S) == {("orders", 0): 20}
        await close_all([a, b])

    asyncio.run(scenario())
    assert stored_offset(zk, group, 0) == 20
    assert stored(zk, group) == ("Stable", 2, {a.member_id, b.member_id})
    assert ledger.double_owned() == {}


# -- 6. SIGTERM: graceful hand-over ---------------------------------------------------------

def test_sigterm_releases_groups_at_once_for_another_daemon(fleet, zk, unique_name):
    # A long session: a take-over that waited for it would miss the bound below.
    d1, d2 = fleet.start_many(1, 2, zk_session_timeout_ms=30_000)
    busy, idle = (placed_name(unique_name, prefix, ([1, 2], 1)) for prefix in ("busy", "idle"))
    ledger = Ledger()
    a, b = (Member(n, busy, bootstrap_of(d1, d2), ledger) for n in "ab")

    async def scenario():
        for group in (busy, idle):
            assert owner_of(await find(d1, group)) == owned_by(d1)
        # Daemon 1 takes idle on a request that stores nothing, busy on its members' requests.
        assert await take(d1, idle) == E.MEMBER_ID_REQUIRED
        assert await converge([a]) == 1
        assert await converge([a, b]) == 2
        deadline = time.monotonic() + WAIT_S
        for m in (a, b):
            assert await m.commit({p: 7 for p in m.assignment}, deadline) == [E.NONE] * len(m.assignment)
        await close_all([a, b])
        assert (fleet.contenders(busy), fleet.contenders(idle)) == ([1], [1])

        assert d1.terminate(timeout_s=10) == 0
        # Gone at once, not after a session time-out: daemon 1 unregistered and released both groups, and
        # daemon 2 took them over as they went, without any client asking (zkcoord.server.takeover).
        assert fleet.registration(1) is None
        wait_for(lambda: (fleet.contenders(busy), fleet.contenders(idle)) == ([2], [2]), 10,
                 "daemon 2 took both groups over")
        for group in (busy, idle):
            found = await find_until(d2, group, lambda f: f.error_code == E.NONE and f.node_id != 1,
                                     f"daemon 2 names itself for {group}", timeout_s=10)
            assert owner_of(found) == owned_by(d2)
        assert (await describe_loaded(d2, idle)).error_code == E.NONE
        a.bootstrap = b.bootstrap = bootstrap_of(d2)
        for m in (a, b):
            assert await m.heartbeat(deadline) is E.NONE
            assert (m.coordinator_id, m.generation) == (2, 2)
        assert await a.fetch(deadline) == {("orders", p): 7 for p in range(6)}
        await close_all([a, b])

    asyncio.run(scenario())
    assert stored(zk, busy) == ("Stable", 2, {a.member_id, b.member_id})
    assert (fleet.contenders(busy), fleet.contenders(idle)) == ([2], [2])
    assert "Traceback" not in d1.log(400)


# -- 7. a node id already in use -------------------------------------------------------------

def test_node_id_in_use_is_one_clear_error_line(fleet):
    d1 = fleet.start(1)
    error = _the_one_error_line(fleet.run_to_exit(1))
    assert error.startswith(f"error: node id 1 is in use by the daemon at 127.0.0.1:{d1.port} (pid {d1.pid}")
    assert "--node-id" in error
    assert d1.alive() and fleet.registration(1)["pid"] == d1.pid


@pytest.mark.parametrize("other_reuses_port", [False, True], ids=["plain", "reuse-port"])
def test_a_listen_port_another_process_holds_is_one_clear_error_line(fleet, other_reuses_port):
    # The listener binds several SO_REUSEPORT sockets (transport rule 8): a port another daemon's listener
    # holds must be refused, not joined (the kernel lets one user's reuse-port sockets share a port).
    with foreign_listener(other_reuses_port) as other:
        port = other.getsockname()[1]
        error = _the_one_error_line(fleet.run_to_exit(1, listen=f"127.0.0.1:{port}"))
    assert error.startswith(f"error: listen: cannot listen on 127.0.0.1:{port}: ")
    assert "address already in use" in error.lower()
    assert fleet.registration(1) is None


def _the_one_error_line(result) -> str:
    """A ``zkcoord run`` that refused to start: exit 2, no traceback, and one
    error line, the last (INFO lines of the start-up may precede it)."""
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.rstrip().splitlines()
    errors = [line for line in lines if line.startswith("error:") or " ERROR " in line or " CRITICAL " in line]
    assert errors == lines[-1:], result.stderr
    return errors[0]


# -- 8. a corrupt state znode ----------------------------------------------------------------

@pytest.mark.parametrize("corrupt, why", [
    (b"{not json", "/state of group {group!r} is not valid JSON"),
    (b'{"v":99,"s":"Stable"}', "/state of group {group!r} is not a valid group record: "
                               "unsupported record version 99"),
], ids=["bad-json", "not-a-record"])
def test_corrupt_state_fails_that_group_only(fleet, zk, unique_name, corrupt, why):
    d1 = fleet.start(1)
    bad, good = unique_name("bad"), unique_name("good")
    zk.create(f"/coordinators/{bad}/state", corrupt, makepath=True)
    ledger = Ledger()
    a, b = (Member(n, good, bootstrap_of(d1), ledger) for n in "ab")

    async def scenario():
        # A lookup alone reads nothing of the group: it names the daemon, which does not contend.
        assert owner_of(await find(d1, bad)) == owned_by(d1)
        assert fleet.contenders(bad) == []
        # The first group request makes the daemon contend, win and fail to load the state.
        assert (await call(d1, join_request(bad, "", "x"))).error_code == E.UNKNOWN_SERVER_ERROR
        assert fleet.contenders(bad) == [1]
        # Lookups now name the failure, with what is wrong.
        found = await find(d1, bad)
        assert found.error_code == E.UNKNOWN_SERVER_ERROR
        assert why.format(group=bad) in found.error_message
        assert (await call(d1, HeartbeatRequest(version=3, group_id=bad, generation_id=1, member_id="m",
                                                group_instance_id=None))).error_code == E.UNKNOWN_SERVER_ERROR
        assert (await call(d1, OffsetFetchRequest(version=5, group_id=bad, topics=None))).error_code == \
            E.UNKNOWN_SERVER_ERROR
        assert (await describe(d1, bad)).error_code == E.UNKNOWN_SERVER_ERROR

        # The same daemon serves another group throughout.
        assert await converge([a]) == 1
        assert await converge([a, b]) == 2
        deadline = time.monotonic() + WAIT_S
        assert await a.commit({p: 5 for p in a.assignment}, deadline) == [E.NONE] * len(a.assignment)
        assert (await find(d1, bad)).error_code == E.UNKNOWN_SERVER_ERROR
        assert zk.get(f"/coordinators/{bad}/state")[0] == corrupt  # never overwritten

        # Deleting the znode, as the error says, starts the group afresh.
        zk.delete(f"/coordinators/{bad}/state")
        assert owner_of(await find(d1, bad)) == owned_by(d1)
        fresh = Member("f", bad, bootstrap_of(d1), Ledger())
        assert await converge([fresh]) == 1
        await close_all([a, b, fresh])

    asyncio.run(scenario())
    assert stored(zk, good) == ("Stable", 2, {a.member_id, b.member_id})
    assert {p: stored_offset(zk, good, p) for p in a.assignment} == {p: 5 for p in a.assignment}
    assert d1.alive()
