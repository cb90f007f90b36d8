"""Issue 16, znodes and group ids, on real ZooKeeper, daemons and Kafka:
lookups of group ids nobody uses leave nothing in ZooKeeper, a group that
holds nothing is removed with its znodes, and a group id that is no znode
name (an emoji) is served to a stock client and listed by `zkcoord groups`."""

from __future__ import annotations

import asyncio

import pytest
from kafka import KafkaConsumer
from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest, LeaveGroupRequest, OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.structs import TopicPartition as KafkaTP

from tests.integration.test_daemon_protocol import (
    E_MEMBER_ID_REQUIRED, E_NONE, E_NOT_COORDINATOR, E_UNKNOWN_MEMBER_ID, Cluster, join,
)
from tests.integration.test_gateway_clients import (
    consume_all_with,
    create_topic,
    gateways,
    log_ends,
    produce_python,
)
from tests.integration.test_inspect import run_json
from tests.support.daemons import gateway_fleet
from tests.support.placement import placed_name

pytestmark = pytest.mark.integration
EMOJI = "billing-\U0001F9FE-\U0001F642"
E_OFFSET_METADATA_TOO_LARGE, E_GROUP_ID_NOT_FOUND = 12, 69


def coordinator_names(zk) -> list[str]:
    return zk.get_children("/coordinators") if zk.exists("/coordinators") else []


async def listed(client) -> list[str]:
    answer = await client.call(ListGroupsRequest(version=2))
    assert answer.error_code == E_NONE
    return sorted(g[0] for g in answer.groups)


def test_unused_lookups_leave_no_znodes(zk_hosts, zk):
    async def scenario():
        async with Cluster(zk_hosts, 2) as cluster:
            first, second = await cluster.client(0), await cluster.client(1)
            named = {}
            for i in range(200):
                group = f"unused-{i}"
                a = await first.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
                b = await second.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
                assert a.error_code == b.error_code == E_NONE, (a, b)
                assert a.node_id == b.node_id  # both daemons name the same one
                named[group] = a.node_id
            assert set(named.values()) == {1, 2}  # spread over the live daemons
            assert coordinator_names(zk) == []
            assert await listed(first) == [] and await listed(second) == []

            # The daemon named contends when the group's first request arrives.
            group = "unused-7"
            index = named[group] - 1
            member = await cluster.client(index)
            first = await member.call(join(group))
            joined = await member.call(join(group, member_id=first.member_id))
            assert joined.error_code == E_NONE
            assert zk.exists(f"/coordinators/{group}/state") or zk.get_children(f"/coordinators/{group}/owner")
            # ...and the other daemon, asked now, names the owner, and refuses the group's requests.
            found = await second.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
            assert found.node_id == named[group]
            other = await cluster.client(1 - index)
            refused = await other.call(join(group))
            assert refused.error_code == E_NOT_COORDINATOR

    asyncio.run(scenario())


def test_a_daemon_that_answered_a_lookup_names_the_owner_another_daemon_became(zk_hosts, zk, unique_name):
    group = placed_name(unique_name, "g", ([1, 2], 1))

    async def scenario():
        async with Cluster(zk_hosts, 2) as cluster:
            first, second = await cluster.client(0), await cluster.client(1)
            for client in (first, second):  # nobody owns it: both name daemon 1, nobody contends
                found = await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
                assert (found.error_code, found.node_id) == (E_NONE, 1)
            assert coordinator_names(zk) == []
            # The group's first request goes to daemon 2 (a client with an old answer, say): it wins.
            taken = await second.call(join(group))
            assert taken.error_code == E_MEMBER_ID_REQUIRED
            # Daemon 1, asked before, names the owner now and refuses the group's requests.
            for client in (first, second):
                found = await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
                assert (found.error_code, found.node_id) == (E_NONE, 2)
            refused = await first.call(join(group))
            assert refused.error_code == E_NOT_COORDINATOR

    asyncio.run(scenario())


def commit(group: str, metadata: str = "") -> OffsetCommitRequest:
    """A simple-consumer commit of offset 42 on t-0."""
    return OffsetCommitRequest(
        version=7, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=42, committed_leader_epoch=-1, committed_metadata=metadata)])])


def test_requests_about_a_group_that_exists_nowhere_create_nothing(zk_hosts, zk):
    """Reads, and requests of members a group does not have, are answered as
    Kafka answers them for a group it never heard of, and no daemon contends:
    ZooKeeper holds nothing afterwards (before: every one of them left the
    group's election znodes behind until the next cleanup)."""
    async def scenario():
        async with Cluster(zk_hosts, 2) as cluster:
            client = await cluster.client(0)
            described = await client.call(DescribeGroupsRequest(version=0, groups=["never", "never-2"]))
            assert [(g.error_code, g.group_id, g.group_state) for g in described.groups] == [
                (E_NONE, "never", "Dead"), (E_NONE, "never-2", "Dead")]
            fetched = await client.call(OffsetFetchRequest(version=5, group_id="never", topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])]))
            assert fetched.error_code == E_NONE
            assert [(p.partition_index, p.committed_offset, p.error_code) for p in fetched.topics[0].partitions] \
                == [(0, -1, E_NONE), (1, -1, E_NONE)]
            every = await client.call(OffsetFetchRequest(version=5, group_id="never", topics=None))
            assert (every.error_code, every.topics) == (E_NONE, [])
            beat = await client.call(HeartbeatRequest(version=3, group_id="never", generation_id=1, member_id="m",
                                                      group_instance_id=None))
            assert beat.error_code == E_UNKNOWN_MEMBER_ID
            synced = await client.call(SyncGroupRequest(version=3, group_id="never", generation_id=1, member_id="m",
                                                        group_instance_id=None, assignments=[]))
            assert synced.error_code == E_UNKNOWN_MEMBER_ID
            left = await client.call(LeaveGroupRequest(version=3, group_id="never", members=[
                LeaveGroupRequest.MemberIdentity(member_id="m", group_instance_id=None)]))
            assert (left.error_code, [m.error_code for m in left.members]) == (E_NONE, [E_UNKNOWN_MEMBER_ID])
            deleted = await client.call(DeleteGroupsRequest(version=1, groups_names=["never"]))
            assert deleted.results[0].error_code == E_GROUP_ID_NOT_FOUND
            assert coordinator_names(zk) == [] and not zk.exists("/consumers/never")
            assert await listed(client) == []
            # A group's first JoinGroup still makes the daemon contend, and the group is served.
            first = await client.call(join("never"))
            assert first.error_code in (E_MEMBER_ID_REQUIRED, E_NOT_COORDINATOR)
            assert coordinator_names(zk) == ["never"]

    asyncio.run(scenario())


def test_groups_that_hold_nothing_are_removed_with_their_znodes(zk_hosts, zk):
    async def scenario():
        async with Cluster(zk_hosts, 1) as cluster:
            client = await cluster.client(0)
            manager = cluster.running[0].manager
            # A commit the group refuses whole makes the daemon contend and stores nothing: the
            # election's znodes appear.
            refused = await client.call(commit("ghost", metadata="m" * 5000))
            assert refused.topics[0].partitions[0].error_code == E_OFFSET_METADATA_TOO_LARGE
            # A group whose member joins and leaves without committing: Empty, no offsets.
            first = await client.call(join("left"))
            joined = await client.call(join("left", member_id=first.member_id))
            assert joined.error_code == E_NONE
            left = await client.call(LeaveGroupRequest(version=1, group_id="left", member_id=first.member_id))
            assert left.error_code == E_NONE
            # A group with a committed offset is kept.
            committed = await client.call(commit("kept"))
            assert committed.topics[0].partitions[0].error_code == E_NONE
            assert sorted(coordinator_names(zk)) == ["ghost", "kept", "left"]
            assert await listed(client) == ["left"]  # "ghost" holds nothing; "kept" has no state

            removed = await manager.admin.cleanup_empty_groups()

            assert sorted(removed) == ["ghost", "left"]
            assert coordinator_names(zk) == ["kept"]
            assert zk.get("/consumers/kept/offsets/t/0")[0] == b"42"
            assert await listed(client) == []
            # The group is served again on its next request.
            fetched = await client.call(OffsetFetchRequest(version=5, group_id="kept", topics=None))
            assert [(t.name, p.partition_index, p.committed_offset)
                    for t in fetched.topics for p in t.partitions] == [("t", 0, 42)]
            again = await client.call(join("left"))
            assert again.error_code == 79  # MEMBER_ID_REQUIRED: a new group, served

    asyncio.run(scenario())


@pytest.fixture
def fleet(services, zk_hosts, zk, tmp_path):
    with gateway_fleet(zk_hosts, zk, tmp_path / "logs", services.bootstrap_servers, 1, 2) as fleet:
        yield fleet


def test_an_emoji_group_id_is_served_and_listed(services, fleet, zk, zk_hosts, unique_name):
    bootstrap = gateways(fleet)
    topic = unique_name("t")
    create_topic(bootstrap, topic, 2)
    expected = produce_python(bootstrap, topic, 20, 2)
    consume_all_with("kafka-python", bootstrap, EMOJI, topic, expected)  # joins, syncs, commits

    ends = log_ends(services.bootstrap_servers, topic, 2)
    name = "%%billing-%F0%9F%A7%BE-%F0%9F%99%82"  # zkcoord.zk.paths.group_name(EMOJI)
    assert {int(p): int(zk.get(f"/consumers/{name}/offsets/{topic}/{p}")[0])
            for p in zk.get_children(f"/consumers/{name}/offsets/{topic}")} == ends
    assert zk.exists(f"/coordinators/{name}/state")

    fetcher = KafkaConsumer(bootstrap_servers=bootstrap, group_id=EMOJI, enable_auto_commit=False)
    try:  # OffsetFetch through the gateway
        assert {p: fetcher.committed(KafkaTP(topic, p)) for p in range(2)} == ends
    finally:
        fetcher.close()

    doc = run_json("groups", "--zookeeper", zk_hosts)
    assert EMOJI in [g["group"] for g in doc["groups"]]
