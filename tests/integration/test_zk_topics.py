"""Partition counts from /brokers/topics/<topic>, written here by hand in the
test's chroot the way Kafka writes them, read and watched."""

from __future__ import annotations

import asyncio
import json

import pytest
from test_zk_support import connection, eventually

from zkcoord.errors import StateError
from zkcoord.zk.topics import TopicRegistry

pytestmark = pytest.mark.integration


def registration(partitions: int) -> bytes:
    return json.dumps({"version": 2, "partitions": {str(p): [0] for p in range(partitions)},
                       "adding_replicas": {}, "removing_replicas": {}}).encode()


def test_partition_count(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            topics = TopicRegistry(conn)
            assert await topics.partition_count("t") is None
            zk.create("/brokers/topics/t", registration(3), makepath=True)
            assert await topics.partition_count("t") == 3
            zk.create("/brokers/topics/broken", b'{"version":2}')
            with pytest.raises(StateError, match=r"/brokers/topics/broken has no \"partitions\""):
                await topics.partition_count("broken")
    asyncio.run(scenario())


def test_watch_reports_changes_of_the_partition_count(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            topics = TopicRegistry(conn)
            seen = []
            watch = await topics.watch("t", seen.append)
            await eventually(lambda: seen == [None], "the first call (no topic yet)")
            zk.create("/brokers/topics/t", registration(2), makepath=True)
            await eventually(lambda: seen == [None, 2], "creation")
            zk.set("/brokers/topics/t", registration(2))  # same count: not reported
            zk.set("/brokers/topics/t", b"not json")  # unreadable: last count kept
            zk.set("/brokers/topics/t", registration(5))
            await eventually(lambda: seen == [None, 2, 5], "partitions added")
            zk.delete("/brokers/topics/t")
            await eventually(lambda: seen == [None, 2, 5, None], "deletion")
            watch.stop()
            zk.create("/brokers/topics/t", registration(1))
            await asyncio.sleep(0.3)  # nothing may arrive after stop(); give it the chance
            assert seen == [None, 2, 5, None]
    asyncio.run(scenario())
