"""Offsets of a KIP-848 consumer group on a real daemon: OffsetCommit and
OffsetFetch v10 name topics by id (resolved through the daemon's topics
image; an id it does not know is UNKNOWN_TOPIC_ID), OffsetFetch v9+ naming
a member checks it as Kafka 4.4's ``ConsumerGroup.validateOffsetFetch``
does, and OffsetCommit below v9 from a consumer-protocol member is refused
as Kafka refuses it."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetFetchRequest

from tests.support.consumer_members import ConsumerMember
from tests.support.wire import coordinator_client
from zkcoord.config import DaemonConfig
from zkcoord.server.daemon import Daemon
from zkcoord.topic_ids import topic_id_uuid

pytestmark = pytest.mark.integration
NONE, UNSUPPORTED_VERSION, UNKNOWN_MEMBER_ID, UNKNOWN_TOPIC_ID, STALE_MEMBER_EPOCH = 0, 35, 25, 100, 113
WAIT_S = 60.0

Topic = OffsetCommitRequest.OffsetCommitRequestTopic
Partition = Topic.OffsetCommitRequestPartition
FetchGroup = OffsetFetchRequest.OffsetFetchRequestGroup
FetchTopics = FetchGroup.OffsetFetchRequestTopics


def commit(version, group, member, epoch, topic_name=None, topic_id=None, partitions=(0,), offset=42):
    return OffsetCommitRequest(
        version=version, group_id=group, generation_id_or_member_epoch=epoch, member_id=member,
        group_instance_id=None, retention_time_ms=-1,
        topics=[Topic(version=version, name=topic_name or "", topic_id=topic_id, partitions=[
            Partition(version=version, partition_index=p, committed_offset=offset + p, committed_leader_epoch=-1,
                      committed_metadata="m") for p in partitions])])


def fetch(version, group, member=None, epoch=-1, topics=None):
    return OffsetFetchRequest(version=version, require_stable=False, groups=[
        FetchGroup(version=version, group_id=group, member_id=member, member_epoch=epoch, topics=topics)])


def test_offsets_by_topic_id_and_member_epochs(services, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    admin = KafkaAdminClient(bootstrap_servers=services.bootstrap_servers)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    admin.close()

    async def scenario():
        daemon = Daemon(DaemonConfig(zookeeper=services.zookeeper, listen="127.0.0.1:0", node_id=-1))
        running = await daemon.start()
        address = "%s:%d" % running.advertised
        member = ConsumerMember(address, group, [topic])
        client = None
        try:
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while len(member.partitions()) < 2:  # the image learns the topic from ZooKeeper's watch
                await member.heartbeat()
                assert asyncio.get_running_loop().time() < deadline, "the member never got both partitions"
                await asyncio.sleep(0.05)
            [topic_id] = member.owned
            wire_id = topic_id_uuid(topic_id)
            client = await coordinator_client(address, group)

            # v10: by id; an unknown id is UNKNOWN_TOPIC_ID; v9 by name still works.
            answer = await client.call(commit(10, group, member.member_id, member.epoch, topic_id=wire_id,
                                              partitions=(0, 1)))
            assert [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions])
                    for t in answer.topics] == [(wire_id, [(0, NONE), (1, NONE)])]
            stranger = uuid.UUID(int=12345)
            answer = await client.call(commit(10, group, member.member_id, member.epoch, topic_id=stranger))
            assert [(t.topic_id, t.partitions[0].error_code) for t in answer.topics] == [(stranger, UNKNOWN_TOPIC_ID)]
            answer = await client.call(commit(9, group, member.member_id, member.epoch, topic_name=topic,
                                              partitions=(1,), offset=100))
            assert answer.topics[0].partitions[0].error_code == NONE

            # Below v9 a consumer-protocol member may not commit (Kafka 4.4: UNSUPPORTED_VERSION).
            answer = await client.call(commit(8, group, member.member_id, member.epoch, topic_name=topic))
            assert answer.topics[0].partitions[0].error_code == UNSUPPORTED_VERSION

            # OffsetFetch v10 by id, and all topics: ids in the answer.
            answer = await client.call(fetch(10, group, member.member_id, member.epoch, [
                FetchTopics(version=10, topic_id=wire_id, partition_indexes=[0, 1]),
                FetchTopics(version=10, topic_id=stranger, partition_indexes=[0])]))
            [g] = answer.groups
            assert g.error_code == NONE
            assert [(t.topic_id, [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions])
                    for t in g.topics] == [(wire_id, [(0, 42, NONE), (1, 101, NONE)]),
                                           (stranger, [(0, -1, UNKNOWN_TOPIC_ID)])]
            [g] = (await client.call(fetch(10, group))).groups
            assert [(t.topic_id, sorted(p.partition_index for p in t.partitions)) for t in g.topics] == [
                (wire_id, [0, 1])]

            # OffsetFetch v9 naming the member: it must be one, at its epoch.
            [g] = (await client.call(fetch(9, group, "nobody-AAAAAAAAAAAAAAA", 1))).groups
            assert g.error_code == UNKNOWN_MEMBER_ID and g.topics == []
            [g] = (await client.call(fetch(9, group, member.member_id, member.epoch + 1))).groups
            assert g.error_code == STALE_MEMBER_EPOCH
            [g] = (await client.call(fetch(9, group, member.member_id, member.epoch, [
                FetchTopics(version=9, name=topic, partition_indexes=[1])]))).groups
            assert g.error_code == NONE and g.topics[0].partitions[0].committed_offset == 101
        finally:
            if client is not None:
                await client.close()
            await member.leave()
            await daemon.stop()

    asyncio.run(scenario())
