"""KIP-848 groups across an owner's death: kill -9 of the daemon that owns a
consumer group while a partition is on its way from one member to another.
The new owner resumes epochs and assignments from ZooKeeper and gives the
moving partitions to their new member only after the old one has said it
released them (a heartbeat reporting it no longer owns them): at no step does a partition have two owners."""

from __future__ import annotations

import asyncio

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.support.consumer_members import ConsumerMember, no_partition_twice
from tests.support.daemons import DaemonFleet
from tests.support.wire import find_coordinator

pytestmark = pytest.mark.integration
ZK_SESSION_TIMEOUT_MS = 4000
WAIT_S = 60.0


@pytest.fixture
def fleet(zk_hosts, zk, tmp_path, services):
    with DaemonFleet(zk_hosts, zk, tmp_path / "logs", options={
            "zk_session_timeout_ms": ZK_SESSION_TIMEOUT_MS, "bootstrap_servers": services.bootstrap_servers,
            "topic_metadata_refresh_ms": 200, "group_consumer_assignment_interval_ms": 0}) as fleet:
        try:
            yield fleet
        finally:
            for daemon in fleet.daemons.values():
                print(f"---- daemon {daemon.node_id} (pid {daemon.pid}), {daemon.log_path}:\n{daemon.log(40)}")


async def until(step, condition, what: str):
    """Run ``step()`` until ``condition()`` holds (bounded)."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        await step()
        if condition():
            return
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.1)


def test_kill_the_owner_mid_reconciliation(services, fleet, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    admin = KafkaAdminClient(bootstrap_servers=services.bootstrap_servers)
    admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=1)])
    admin.close()
    daemons = fleet.start_many(1, 2)
    addresses = ",".join(f"{h}:{p}" for h, p in (d.address for d in daemons))

    async def scenario():
        a = ConsumerMember(addresses, group, [topic])
        b = ConsumerMember(addresses, group, [topic])
        try:
            # a alone: all six partitions (the topics image may need a poll to know the topic).
            await until(a.heartbeat, lambda: len(a.partitions()) == 6, "a owns the six partitions")
            # b joins: its target is three of a's partitions, which a still owns: b gets nothing yet.
            await b.heartbeat()
            no_partition_twice([a, b])
            assert b.partitions() == set()
            held_by_a = set(a.partitions())

            # The owner dies before a heard about the revocation.
            host, port = await find_coordinator(addresses, group)
            owner = next(d for d in daemons if d.address == (host, port))
            owner.kill()
            survivor = next(d for d in daemons if d is not owner)
            assert survivor.alive

            # b, on the new owner, still gets nothing a holds; a's heartbeat (still owning all six,
            # it has not heard yet) is told to give three up.
            for _ in range(3):
                await b.heartbeat()
                no_partition_twice([a, b])
                assert not (b.partitions() & held_by_a)
            await a.heartbeat()
            no_partition_twice([a, b])
            assert len(a.partitions()) == 3, a.owned

            # Until a says it released them, b still gets none of them.
            await b.heartbeat()
            assert not (b.partitions() & held_by_a)
            # a's next heartbeat reports the release (what a Java consumer sends once its revocation
            # callback returned): then b gets the three.
            await a.heartbeat()
            no_partition_twice([a, b])
            await until(b.heartbeat, lambda: len(b.partitions()) == 3, "b owns three partitions")
            no_partition_twice([a, b])
            assert a.partitions() | b.partitions() == held_by_a
            assert await find_coordinator(addresses, group) == survivor.address
            assert a.epoch == b.epoch > 0
        finally:
            await a.close()
            await b.close()

    asyncio.run(scenario())
