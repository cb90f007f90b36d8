"""Eager takeover between real ``zkcoord run`` processes (zkcoord.server.takeover):
when a daemon's session ends (kill -9) or it stops (SIGTERM), the live
daemons the placement names take every one of its groups over at once, in
bulk, without any client asking; a graceful stop releases many groups
within its time-out.

Each test makes a few hundred Stable single-member groups owned by one
daemon (its first JoinGroup sent there: the daemon that gets a group's
first request contends), then checks ownership in ZooKeeper (each group's
contenders) while no client sends anything, and only then asks the new
owner to describe the groups: each is Stable with its member, as stored.
Waits are bounded waits for a condition, never sleeps for time to pass.
"""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.admin.groups import DescribeGroupsRequest
from kafka.protocol.consumer.group import JoinGroupRequest, SyncGroupRequest
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from tests.support.daemons import DaemonFleet, DaemonProcess, logged_fleet, wait_for
from tests.support.wire import WireClient
from zkcoord.core.errors import ErrorCode
from zkcoord.core.placement import choose_node

pytestmark = pytest.mark.integration
E = ErrorCode
GROUPS = 300  # per test: a few batches of the takeover's multis (500) would need thousands; this is modest
CONNECTIONS = 10  # groups are made over this many connections at once
WAIT_S = 120.0  # bound of every wait for a condition
SUBSCRIPTION = bytes(ConsumerProtocolSubscription(version=0, topics=["orders"], user_data=None).encode())


@pytest.fixture
def fleet(zk_hosts, zk, tmp_path):
    # A long stop time-out: the test checks that the release ends within it, whatever the machine's load.
    with logged_fleet(zk_hosts, zk, tmp_path / "logs", lines=30, zk_session_timeout_ms=4000,
                      group_initial_rebalance_delay_ms=0, shutdown_timeout_ms=60_000) as fleet:
        yield fleet


async def _stable(client: WireClient, group: str) -> str:
    """Join ``group`` as its only member and sync: Stable, its state stored. The member id."""
    def join(member_id: str) -> JoinGroupRequest:
        return JoinGroupRequest(
            version=5, group_id=group, session_timeout_ms=60_000, rebalance_timeout_ms=60_000, member_id=member_id,
            group_instance_id=None, protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION)])

    joined = await client.call(join(""))
    if joined.error_code == E.MEMBER_ID_REQUIRED:
        joined = await client.call(join(joined.member_id))
    assert joined.error_code == E.NONE, (group, joined)
    synced = await client.call(SyncGroupRequest(
        version=3, group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
        group_instance_id=None, assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
            member_id=joined.member_id, assignment=b"")]))
    assert synced.error_code == E.NONE, (group, synced)
    return joined.member_id


def make_groups(daemon: DaemonProcess, groups: list[str]) -> dict[str, str]:
    """Stable single-member groups owned by ``daemon`` (their first request sent
    there: it contends, and nobody else does); {group: its member id}."""
    async def make() -> dict[str, str]:
        members = {}

        async def over_one_connection(share: list[str]) -> None:
            client = await WireClient.connect(*daemon.address, "maker")
            try:
                for group in share:
                    members[group] = await _stable(client, group)
            finally:
                await client.close()

        await asyncio.gather(*(over_one_connection(groups[i::CONNECTIONS]) for i in range(CONNECTIONS)))
        return members
    return asyncio.run(make())


def owners(fleet: DaemonFleet, groups: list[str]) -> dict[str, list[int]]:
    """Each group's contenders (node ids, owner first), read in ZooKeeper."""
    return {g: fleet.contenders(g) for g in groups}


def wait_owned(fleet: DaemonFleet, wanted: dict[str, int], what: str) -> None:
    """Until each group's only contender is the wanted daemon's, no client asking meanwhile."""
    def done():
        found = owners(fleet, list(wanted))
        return found == {g: [n] for g, n in wanted.items()}
    wait_for(done, WAIT_S, what, interval_s=0.5)


def described(daemon: DaemonProcess, groups: list[str]) -> dict[str, tuple[int, str, list[str]]]:
    """DescribeGroups of ``groups`` at ``daemon``: {group: (error, state, member ids)}."""
    async def ask():
        client = await WireClient.connect(*daemon.address, "describer")
        try:
            response = await client.call(DescribeGroupsRequest(version=4, groups=groups,
                                                               include_authorized_operations=False))
        finally:
            await client.close()
        return {g.group_id: (g.error_code, g.group_state, [m.member_id for m in g.members]) for g in response.groups}
    return asyncio.run(ask())


def wait_served(daemon: DaemonProcess, members: dict[str, str]) -> None:
    """Until ``daemon`` describes each group as Stable with its member, as stored (the
    election is won before the state is loaded: a group still loading answers
    COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
    wanted = {g: (E.NONE, "Stable", [m]) for g, m in members.items()}
    wait_for(lambda: described(daemon, list(members)) == wanted, WAIT_S,
             f"daemon {daemon.node_id} serving {len(members)} groups as stored", interval_s=0.5)


def test_kill_9_the_survivor_takes_every_group_of_the_dead_daemon_without_a_client_asking(fleet, unique_name):
    one, two = fleet.start_many(1, 2)
    theirs = [unique_name("dead") for _ in range(GROUPS)]
    ours = [unique_name("kept") for _ in range(20)]
    members = make_groups(one, theirs)
    kept = make_groups(two, ours)
    assert owners(fleet, theirs) == {g: [1] for g in theirs}
    before = {g: fleet.zk.get_children(f"/coordinators/{g}/owner") for g in ours}

    one.kill()
    wait_owned(fleet, dict.fromkeys(theirs, 2), f"every one of the {GROUPS} groups of daemon 1 owned by daemon 2")
    # Its own groups were not touched: the same election znodes.
    assert {g: fleet.zk.get_children(f"/coordinators/{g}/owner") for g in ours} == before
    assert "took over" in two.log_path.read_text()
    # Served: loaded as stored, Stable with their member.
    wait_served(two, members)
    assert described(two, ours) == {g: (E.NONE, "Stable", [kept[g]]) for g in ours}


def test_three_daemons_the_placement_splits_the_dead_daemons_groups_between_the_survivors(fleet, unique_name):
    one, two, three = fleet.start_many(1, 2, 3)
    groups = [unique_name("g") for _ in range(GROUPS)]
    members = make_groups(one, groups)
    placed = {g: choose_node(g, [2, 3]) for g in groups}
    assert set(placed.values()) == {2, 3}  # 300 hashed ids: both survivors get some

    one.kill()
    wait_owned(fleet, placed, "each group of daemon 1 owned by the survivor the placement names")
    for daemon in (two, three):
        wait_served(daemon, {g: m for g, m in members.items() if placed[g] == daemon.node_id})


def test_sigterm_releases_many_groups_within_its_time_out_and_the_other_daemon_takes_them_at_once(
        fleet, unique_name):
    one, two = fleet.start_many(1, 2)
    groups = [unique_name("g") for _ in range(GROUPS)]
    members = make_groups(one, groups)

    assert one.terminate(timeout_s=WAIT_S) == 0
    log = one.log_path.read_text()
    assert f"released {GROUPS} groups" in log
    assert "shutdown: could not" not in log
    wait_owned(fleet, dict.fromkeys(groups, 2), f"every one of the {GROUPS} groups owned by daemon 2")
    wait_served(two, members)
