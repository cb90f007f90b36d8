"""The gateway when things fail: a daemon killed under running stock
clients, a broker that goes away, and hostile frames.

kill -9 of the group's owner with a Java consumer and a librdkafka consumer
bootstrapped from both gateways: they go on through the other gateway, the
other daemon takes the group over, every record is consumed and no
committed offset goes back. A broker killed under the gateway: its clients'
connections close (what they would see without the gateway) while the
gateway goes on answering the group's heartbeats and commits.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from kafka.protocol.admin.groups import DescribeGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest, JoinGroupRequest, OffsetCommitRequest, SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from tests.integration.test_gateway_clients import (
    WAIT_S, PythonMember, create_topic, gateways, log_ends, produce_python, zk_offsets,
)
from tests.support import java_tools as jt
from tests.support.daemons import gateway_fleet, wait_for
from tests.support.placement import placed_name
from tests.support.wire import WireClient

pytestmark = pytest.mark.integration


@pytest.fixture
def fleet(services, zk_hosts, zk, tmp_path):
    with gateway_fleet(zk_hosts, zk, tmp_path / "logs", services.bootstrap_servers, 1, 2) as fleet:
        yield fleet


def test_kill_9_of_the_owner_leaves_stock_clients_running(services, fleet, zk, unique_name):
    bootstrap = gateways(fleet)
    topic, group = unique_name("t"), unique_name("g")
    create_topic(bootstrap, topic, 4)
    first = produce_python(services.bootstrap_servers, topic, 100, 4, tag="a")
    java = jt.ConsoleConsumerProcess(bootstrap, topic, group=group, client_id="java-m", consumer_properties={
        "session.timeout.ms": 10000, "heartbeat.interval.ms": 500, "auto.commit.interval.ms": 200,
        "partition.assignment.strategy": "org.apache.kafka.clients.consumer.RangeAssignor"}).start()
    rdkafka = PythonMember("librdkafka", bootstrap, group, topic).start()
    try:
        def consumed() -> set[str]:
            return {r.value for r in java.records()} | rdkafka.values()

        wait_for(lambda: consumed() >= first, WAIT_S, "the first 100 records consumed")
        ends = log_ends(services.bootstrap_servers, topic, 4)
        wait_for(lambda: zk_offsets(zk, group, topic) == ends, WAIT_S, "their offsets committed")
        committed_before = zk_offsets(zk, group, topic)

        owner = fleet.daemons[fleet.contenders(group)[0]]
        survivor = next(d for d in fleet.daemons.values() if d is not owner)
        owner.kill()
        second = produce_python(services.bootstrap_servers, topic, 100, 4, tag="b")
        wait_for(lambda: consumed() >= first | second, WAIT_S, "the next 100 records consumed after the kill")
        # The consumers fetch their partitions while no coordinator answers them: the records can all be
        # consumed before the survivor has proved the owner dead and taken the group over.
        wait_for(lambda: fleet.contenders(group)[:1] == [survivor.node_id], WAIT_S, "the survivor owns the group")
        ends = log_ends(services.bootstrap_servers, topic, 4)
        wait_for(lambda: zk_offsets(zk, group, topic) == ends, WAIT_S, "the new offsets committed")
        assert all(zk_offsets(zk, group, topic)[p] >= o for p, o in committed_before.items())
        assert java.alive()
    finally:
        rdkafka.close()
        java.stop()


def _join(group: str, member_id: str = "") -> JoinGroupRequest:
    return JoinGroupRequest(version=5, group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                            member_id=member_id, group_instance_id=None, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])


async def _raw_member(gateway: tuple[str, int], group: str):
    """A member joined through a gateway: (its coordinator connection, member id, generation)."""
    lookup = await WireClient.connect(*gateway)
    found = await lookup.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
    await lookup.close()
    assert found.error_code == 0 and found.node_id >= 2**30, found
    client = await WireClient.connect(found.host, found.port)
    first = await client.call(_join(group))
    joined = await client.call(_join(group, first.member_id))
    assert joined.error_code == 0, joined
    synced = await client.call(SyncGroupRequest(
        version=3, group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
        group_instance_id=None, assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
            member_id=joined.member_id, assignment=b"")]))
    assert synced.error_code == 0, synced
    return client, joined.member_id, joined.generation_id


async def _closed_after(address: tuple[str, int], request) -> bool:
    """Whether a new connection that sends ``request`` is closed by the gateway (no answer)."""
    client = await WireClient.connect(*address)
    try:
        await client.call(request, timeout_s=30)
        return False
    except (ConnectionError, asyncio.IncompleteReadError):
        return True
    finally:
        await client.close()


def test_a_broker_that_goes_away_closes_its_connections_and_groups_go_on(services, fleet, sandbox, unique_name):
    # Lookups through either gateway name daemon 1's, so the member's requests and the describe below meet there.
    group, topic = placed_name(unique_name, "g", ([1, 2], 1)), unique_name("t")
    create_topic(services.bootstrap_servers, topic, 1)
    daemon = fleet.daemons[1]
    metadata = MetadataRequest(version=4, topics=None, allow_auto_topic_creation=False)

    async def scenario():
        client, member_id, generation = await _raw_member(daemon.gateway, group)
        found = await (await WireClient.connect(*daemon.gateway)).call(metadata)
        broker_port = next(b.port for b in found.brokers if b.node_id < 2**30)
        sandbox.stop_server("kafka-0", kill=True)
        try:
            for _ in range(3):  # the group goes on: heartbeats and (ZooKeeper) commits are answered
                beat = await client.call(HeartbeatRequest(version=3, group_id=group, generation_id=generation,
                                                          member_id=member_id, group_instance_id=None))
                assert beat.error_code == 0
            committed = await client.call(OffsetCommitRequest(
                version=7, group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                group_instance_id=None, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                    name=topic, partitions=[OffsetCommitRequest.OffsetCommitRequestTopic
                                            .OffsetCommitRequestPartition(partition_index=0, committed_offset=3,
                                                                          committed_metadata="")])]))
            assert committed.topics[0].partitions[0].error_code in (0, 3)  # 3: the topic's metadata is gone
            # A connection to the dead broker's port, and a forwarded request on the gateway's own port,
            # are closed, as a client talking to the broker directly would see it.
            assert await _closed_after(("127.0.0.1", broker_port), metadata)
            assert await _closed_after(daemon.gateway, metadata)
            described = await (await WireClient.connect(*daemon.gateway)).call(
                DescribeGroupsRequest(version=3, groups=[group], include_authorized_operations=False))
            assert described.groups[0].group_state == "Stable"
        finally:
            await client.close()
            await asyncio.to_thread(sandbox.start_server, "kafka-0")
        deadline = time.monotonic() + WAIT_S
        while True:  # and once the broker is back, forwarding works again
            try:
                back = await (await WireClient.connect(*daemon.gateway)).call(metadata, timeout_s=10)
                if any(b.node_id == 0 for b in back.brokers):
                    break
            except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
                pass
            assert time.monotonic() < deadline, "the gateway did not forward again after the broker came back"
            await asyncio.sleep(0.5)

    asyncio.run(scenario())


def test_hostile_frames_close_only_their_connection(services, fleet, unique_name):
    daemon = fleet.daemons[1]
    group = unique_name("g")

    async def scenario():
        client, member_id, generation = await _raw_member(daemon.gateway, group)
        for bad in (b"\x7f\xff\xff\xff", b"\x00\x00\x00\x0c\x27\x0f\x00\x00\x00\x00\x00\x01\xff\xff\x00\x00",
                    b"\x00\x00\x00\x0a\x00\x1c\x00\x03\x00\x00\x00\x01\xff\xff"):  # huge, unknown api, TxnOffsetCommit
            with socket.create_connection(daemon.gateway, timeout=30) as raw:
                raw.sendall(bad)
                assert raw.recv(1) == b""  # closed by the gateway
        beat = await client.call(HeartbeatRequest(version=3, group_id=group, generation_id=generation,
                                                  member_id=member_id, group_instance_id=None))
        assert beat.error_code == 0  # the member on another connection did not notice
        await client.close()

    asyncio.run(scenario())
