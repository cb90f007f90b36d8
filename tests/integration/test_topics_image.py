"""The daemon's topics image (what KIP-848's consumer groups assign from)
follows the cluster: a created topic appears with the id Kafka gave it, an
added partition shows in its count, a deleted topic goes, and a topic
created again under the same name comes back with its new id. From both
sources: ZooKeeper's /brokers/topics, and Kafka's Metadata API."""

from __future__ import annotations

import asyncio
from uuid import UUID

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions, NewTopic

from zkcoord.config import DaemonConfig
from zkcoord.server.daemon import Daemon
from zkcoord.topic_ids import topic_id_text

pytestmark = pytest.mark.integration
WAIT_S = 60.0


async def image_shows(daemon, condition, what: str):
    """Wait for the daemon's image to satisfy ``condition`` (the image changes
    when ZooKeeper's watch or the next metadata poll delivers)."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while not condition(daemon.topics.image):
        assert asyncio.get_running_loop().time() < deadline, f"the topics image never showed {what}"
        await asyncio.sleep(0.05)
    return daemon.topics.image


def kafka_id(admin, topic: str) -> str:
    [described] = admin.describe_topics([topic])
    return topic_id_text(UUID(str(described["topic_id"])))


def follow_the_cluster(services, config, topic: str) -> str:
    admin = KafkaAdminClient(bootstrap_servers=services.bootstrap_servers)

    async def scenario():
        daemon = Daemon(config)
        await daemon.start()
        try:
            await asyncio.to_thread(admin.create_topics, [NewTopic(topic, num_partitions=2, replication_factor=1)])
            first = await asyncio.to_thread(kafka_id, admin, topic)
            image = await image_shows(daemon, lambda i: i.id_of(topic) == first, f"{topic} created")
            assert image.partitions_of(first) == 2 and image.name_of(first) == topic
            assert daemon.manager.group_config.image is image  # the handlers see it

            # A group subscribing to the topic makes the daemon watch it (ZooKeeper: a data watch; an
            # unwatched topic's count is read again at the next full read, every ZK_RESYNC_S).
            await daemon.topics.track("g", frozenset({topic}))
            await asyncio.to_thread(admin.create_partitions, {topic: NewPartitions(total_count=5)})
            await image_shows(daemon, lambda i: i.partitions_of(first) == 5, f"{topic} with 5 partitions")

            await asyncio.to_thread(admin.delete_topics, [topic])
            gone = await image_shows(daemon, lambda i: i.id_of(topic) is None, f"{topic} deleted")

            await asyncio.to_thread(_create_again, admin, topic)
            second = await asyncio.to_thread(kafka_id, admin, topic)
            assert second != first
            image = await image_shows(daemon, lambda i: i.id_of(topic) == second, f"{topic} created again")
            assert image.partitions_of(second) == 1 and image.name_of(first) is None
            assert image.added_version > gone.added_version  # expressions are resolved again
            return daemon.topics.source
        finally:
            await daemon.stop()

    try:
        return asyncio.run(scenario())
    finally:
        admin.close()


def _create_again(admin, topic: str) -> None:
    """A deleted topic's name is free once Kafka has finished deleting it."""
    import time

    from kafka.errors import TopicAlreadyExistsError

    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
            return
        except TopicAlreadyExistsError:  # marked for deletion, not gone yet
            assert time.monotonic() < deadline, f"{topic} could not be created again"
            time.sleep(0.2)


def test_image_follows_zookeeper(services, unique_name):
    # No chroot: the daemon sees the brokers' /brokers/topics.
    config = DaemonConfig(zookeeper=services.zookeeper, listen="127.0.0.1:0", node_id=-1)
    assert follow_the_cluster(services, config, unique_name("t")) == "zookeeper"


def test_image_follows_kafka_metadata(services, zk_hosts, unique_name):
    config = DaemonConfig(zookeeper=zk_hosts, listen="127.0.0.1:0", node_id=1,
                          bootstrap_servers=services.bootstrap_servers, topic_metadata_refresh_ms=200)
    assert follow_the_cluster(services, config, unique_name("t")) == "kafka"
