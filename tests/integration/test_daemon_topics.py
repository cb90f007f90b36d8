"""A partition added to a topic a group subscribes to starts a rebalance:
the daemon learns the new count from ZooKeeper (/brokers/topics, when it
shares the brokers' chroot) or from Kafka's Metadata API, and members hear
REBALANCE_IN_PROGRESS on their next heartbeat."""

from __future__ import annotations

import asyncio

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions, NewTopic
from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.support.wire import WireClient
from zkcoord.config import DaemonConfig
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration
REBALANCE_IN_PROGRESS = 27


def subscription(topic: str) -> bytes:
    return bytes(ConsumerProtocolSubscription(version=0, topics=[topic], user_data=None).encode())


async def stable_member(daemon_address, group: str, topic: str):
    client = await WireClient.connect(*daemon_address)
    found = await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
    assert found.error_code == 0
    def join(member_id):
        return JoinGroupRequest(version=5, group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                                member_id=member_id, group_instance_id=None, protocol_type="consumer",
                                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                                    name="range", metadata=subscription(topic))])
    member_id = (await client.call(join(""))).member_id
    joined = await client.call(join(member_id))
    assert joined.error_code == 0
    synced = await client.call(SyncGroupRequest(
        version=3, group_id=group, generation_id=joined.generation_id, member_id=member_id,
        group_instance_id=None, assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
            member_id=member_id, assignment=b"a")]))
    assert synced.error_code == 0
    return client, member_id, joined.generation_id


async def heartbeat_until_rebalance(client, group, member_id, generation, polls=300):
    codes = []
    for _ in range(polls):
        response = await client.call(HeartbeatRequest(version=3, group_id=group, generation_id=generation,
                                                      member_id=member_id, group_instance_id=None))
        codes.append(response.error_code)
        if response.error_code == REBALANCE_IN_PROGRESS:
            return codes
        await asyncio.sleep(0.1)
    return codes


def add_partition_and_expect_rebalance(services, config, group, topic):
    admin = KafkaAdminClient(bootstrap_servers=services.bootstrap_servers)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])

    async def scenario():
        daemon = Daemon(config)
        running = await daemon.start()
        try:
            client, member_id, generation = await stable_member(running.advertised, group, topic)
            # Unchanged metadata: heartbeats stay fine.
            quiet = await heartbeat_until_rebalance(client, group, member_id, generation, polls=5)
            assert quiet == [0] * 5
            await asyncio.to_thread(admin.create_partitions, {topic: NewPartitions(total_count=3)})
            codes = await heartbeat_until_rebalance(client, group, member_id, generation)
            assert codes[-1] == REBALANCE_IN_PROGRESS and set(codes[:-1]) <= {0}
            await client.close()
            return daemon.topics.source
        finally:
            await daemon.stop()

    try:
        return asyncio.run(scenario())
    finally:
        admin.close()


def test_partition_added_rebalances_via_kafka_metadata(services, zk_hosts, unique_name):
    config = DaemonConfig(zookeeper=zk_hosts, listen="127.0.0.1:0", node_id=1, group_initial_rebalance_delay_ms=0,
                          bootstrap_servers=services.bootstrap_servers, topic_metadata_refresh_ms=200)
    source = add_partition_and_expect_rebalance(services, config, unique_name("g"), unique_name("t"))
    assert source == "kafka"  # the per-test chroot hides /brokers/topics


def test_partition_added_rebalances_via_zookeeper_watch(services, unique_name):
    # No chroot: the daemon sees the brokers' /brokers/topics (unique group
    # names and an allocated node id keep this test apart from the others).
    config = DaemonConfig(zookeeper=services.zookeeper, listen="127.0.0.1:0", node_id=-1,
                          group_initial_rebalance_delay_ms=0)
    source = add_partition_and_expect_rebalance(services, config, unique_name("g"), unique_name("t"))
    assert source == "zookeeper"
