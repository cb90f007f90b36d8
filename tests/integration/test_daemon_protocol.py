"""Two coordinator daemons on real ZooKeeper, driven with Kafka protocol
requests framed by kafka-python: discovery, a full rebalance of two members,
offsets in the legacy layout, describe/list/leave/delete, fencing."""

from __future__ import annotations

import asyncio
import json

import pytest
from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

from tests.support.wire import WireClient
from zkcoord.config import DaemonConfig
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration
E_NONE, E_NOT_COORDINATOR, E_ILLEGAL_GENERATION = 0, 16, 22
E_INVALID_GROUP_ID, E_REBALANCE_IN_PROGRESS, E_MEMBER_ID_REQUIRED = 24, 27, 79
E_UNKNOWN_MEMBER_ID, E_NON_EMPTY_GROUP = 25, 68


def daemon_config(zk_hosts: str, node_id: int) -> DaemonConfig:
    return DaemonConfig(zookeeper=zk_hosts, listen="127.0.0.1:0", node_id=node_id,
                        group_initial_rebalance_delay_ms=0, zk_session_timeout_ms=6000)


class Cluster:
    """Daemons started in this event loop, and clients to them."""

    def __init__(self, zk_hosts: str, count: int):
        self.daemons = [Daemon(daemon_config(zk_hosts, i + 1)) for i in range(count)]
        self.running = []
        self.clients: list[WireClient] = []

    async def __aenter__(self):
        for daemon in self.daemons:
            self.running.append(await daemon.start())
        return self

    async def __aexit__(self, *exc):
        for client in self.clients:
            await client.close()
        for daemon in self.daemons:
            await daemon.stop()

    async def client(self, index: int, client_id: str = "c") -> WireClient:
        host, port = self.running[index].advertised
        client = await WireClient.connect(host, port, client_id)
        self.clients.append(client)
        return client

    async def coordinator_client(self, group: str, client_id: str = "c") -> tuple[WireClient, int]:
        """FindCoordinator through daemon 0, then a connection to the owner."""
        finder = await self.client(0, client_id)
        found = await finder.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
        assert found.error_code == E_NONE, found
        index = [r.node_id for r in self.running].index(found.node_id)
        assert (found.host, found.port) == self.running[index].advertised
        return await self.client(index, client_id), index


def join(group, member_id="", protocols=(("range", b"meta"),), version=5, instance=None):
    return JoinGroupRequest(
        version=version, group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
        member_id=member_id, group_instance_id=instance, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols])


async def join_with_id(client, group):
    first = await client.call(join(group))
    assert first.error_code == E_MEMBER_ID_REQUIRED and first.member_id.startswith("c-")
    return first.member_id


def test_full_rebalance_offsets_and_admin_apis(zk_hosts, zk, unique_name):
    group = unique_name("g")

    async def scenario():
        async with Cluster(zk_hosts, 2) as cluster:
            a, owner = await cluster.coordinator_client(group)
            other = await cluster.client(1 - owner)
            member_a = await join_with_id(a, group)
            joined = await a.call(join(group, member_a))
            assert (joined.error_code, joined.generation_id, joined.leader, joined.member_id) == \
                (E_NONE, 1, member_a, member_a)
            assert [m.member_id for m in joined.members] == [member_a]

            # The other daemon is not the coordinator.
            assert (await other.call(join(group, member_a))).error_code == E_NOT_COORDINATOR

            synced = await a.call(SyncGroupRequest(version=3, group_id=group, generation_id=1, member_id=member_a,
                                                   group_instance_id=None, assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=member_a, assignment=b"all")]))
            assert (synced.error_code, synced.assignment) == (E_NONE, b"all")
            state = json.loads(zk.get(f"/coordinators/{group}/state")[0])
            assert state_summary(state) == ("Stable", 1)

            # Offsets go to the legacy layout as plain decimal strings.
            commit = await a.call(OffsetCommitRequest(version=7, group_id=group, generation_id_or_member_epoch=1,
                                                      member_id=member_a, group_instance_id=None, topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name="orders", partitions=[
                    OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                        committed_metadata="m0")])]))
            assert commit.topics[0].partitions[0].error_code == E_NONE
            assert zk.get(f"/consumers/{group}/offsets/orders/0")[0] == b"42"
            fetched = await a.call(OffsetFetchRequest(version=5, group_id=group, topics=None))
            assert [(t.name, p.partition_index, p.committed_offset, p.metadata)
                    for t in fetched.topics for p in t.partitions] == [("orders", 0, 42, "m0")]

            # A second member joins: the first learns of it by heartbeat.
            b = await cluster.client(owner, "c")
            member_b = await join_with_id(b, group)
            b_join = asyncio.ensure_future(b.call(join(group, member_b)))
            for _ in range(100):  # until b's join has reached the daemon
                hb = await a.call(HeartbeatRequest(version=3, group_id=group, generation_id=1, member_id=member_a,
                                                   group_instance_id=None))
                if hb.error_code != E_NONE:
                    break
                await asyncio.sleep(0.05)
            assert hb.error_code == E_REBALANCE_IN_PROGRESS
            a_join = await a.call(join(group, member_a))
            b_joined = await b_join
            assert a_join.generation_id == b_joined.generation_id == 2
            assert a_join.leader == member_a and sorted(m.member_id for m in a_join.members) == \
                sorted([member_a, member_b])
            stale = await a.call(HeartbeatRequest(version=3, group_id=group, generation_id=1, member_id=member_a,
                                                  group_instance_id=None))
            assert stale.error_code == E_ILLEGAL_GENERATION
            b_sync = asyncio.ensure_future(b.call(SyncGroupRequest(
                version=3, group_id=group, generation_id=2, member_id=member_b, group_instance_id=None,
                assignments=[])))
            a_sync = await a.call(SyncGroupRequest(version=3, group_id=group, generation_id=2, member_id=member_a,
                                                   group_instance_id=None, assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=member_a, assignment=b"p0"),
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=member_b, assignment=b"p1")]))
            assert (a_sync.assignment, (await b_sync).assignment) == (b"p0", b"p1")

            described = await a.call(DescribeGroupsRequest(version=4, groups=[group],
                                                           include_authorized_operations=False))
            d = described.groups[0]
            assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == \
                (E_NONE, "Stable", "consumer", "range")
            assert sorted((m.member_id, m.member_assignment) for m in d.members) == \
                sorted([(member_a, b"p0"), (member_b, b"p1")])
            listed = await a.call(ListGroupsRequest(version=4, states_filter=["Stable"]))
            assert (group, "Stable") in [(g.group_id, g.group_state) for g in listed.groups]

            not_empty = await a.call(DeleteGroupsRequest(version=2, groups_names=[group]))
            assert not_empty.results[0].error_code == E_NON_EMPTY_GROUP
            left = await a.call(LeaveGroupRequest(version=3, group_id=group, members=[
                LeaveGroupRequest.MemberIdentity(member_id=member_a, group_instance_id=None),
                LeaveGroupRequest.MemberIdentity(member_id=member_b, group_instance_id=None)]))
            assert left.error_code == E_NONE and [m.error_code for m in left.members] == [E_NONE, E_NONE]
            assert state_summary(json.loads(zk.get(f"/coordinators/{group}/state")[0]))[0] == "Empty"
            deleted = await a.call(DeleteGroupsRequest(version=2, groups_names=[group]))
            assert deleted.results[0].error_code == E_NONE
            assert zk.exists(f"/coordinators/{group}/state") is None

    asyncio.run(scenario())


def state_summary(record: dict) -> tuple[str, int]:
    """(state name, generation) from the stored JSON, whatever its key names."""
    from zkcoord.core.group import from_record

    group = from_record("g", record)
    return group.state.value, group.generation_id


def test_invalid_group_ids_never_touch_zookeeper(zk_hosts, zk):
    async def scenario():
        async with Cluster(zk_hosts, 1) as cluster:
            client = await cluster.client(0)
            # Kafka refuses only the empty id, and only in JoinGroup and the like; zkcoord
            # also ids longer than 249 characters (zkcoord.core.errors.validate_group_id).
            found = await client.call(FindCoordinatorRequest(version=3, key="x" * 250, key_type=0))
            assert found.error_code == E_INVALID_GROUP_ID
            for bad in ["", "x" * 250]:
                joined = await client.call(join(bad))
                assert joined.error_code == E_INVALID_GROUP_ID, bad
            assert zk.exists("/coordinators") is None or zk.get_children("/coordinators") == []

    asyncio.run(scenario())
