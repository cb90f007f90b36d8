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


def as_version_1(zk, group: str) -> None:
    """Rewrite a stopped group's records as a zkcoord before version 3 of the
    consumer group record left them: each member's target in its member
    record (``tg``, ``te``), no target record."""
    import json

    from zkcoord.core.consumer.record import TARGET_KEY, from_records, to_group_record, to_member_record
    from zkcoord.zk import paths

    state = json.loads(zk.get(paths.state(group))[0])
    members = [json.loads(zk.get(paths.member(group, m))[0]) for m in zk.get_children(paths.members_dir(group))]
    loaded, cut = from_records(group, {**state, "members": members,
                                       TARGET_KEY: json.loads(zk.get(paths.target(group))[0])})
    assert state["v"] == 3 and not cut
    transaction = zk.transaction()
    for member_id, member in loaded.members.items():
        record = to_member_record(member, loaded.target(member_id), loaded.assignment_epoch)
        transaction.set_data(paths.member(group, member_id), json.dumps(record).encode())
    transaction.delete(paths.target(group))
    transaction.set_data(paths.state(group), json.dumps({**to_group_record(loaded), "v": 1}).encode())
    results = transaction.commit()
    assert not any(isinstance(result, Exception) for result in results), results


def test_a_group_stored_by_an_earlier_zkcoord_mid_reconciliation_is_taken_over(services, fleet, unique_name, zk):
    """A consumer group whose records an earlier zkcoord wrote (targets in the
    member records, version 1) is loaded by this one with the same targets,
    written again as version 3 at once (a target record, member records
    without targets), and its reconciliation goes on: a partition on its way
    from one member to another is given only after it was released."""
    import json

    from zkcoord.zk import paths

    topic, group = unique_name("t"), unique_name("g")
    admin = KafkaAdminClient(bootstrap_servers=services.bootstrap_servers)
    admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=1)])
    admin.close()
    first = fleet.start(1)
    address = "%s:%d" % first.address

    async def scenario():
        a = ConsumerMember(address, group, [topic])
        b = ConsumerMember(address, group, [topic])
        try:
            await until(a.heartbeat, lambda: len(a.partitions()) == 6, "a owns the six partitions")
            await b.heartbeat()  # b's target: three of a's partitions, which a still owns
            assert b.partitions() == set()
            held_by_a = set(a.partitions())
            first.kill()
            await asyncio.to_thread(lambda: until_sync(lambda: fleet.session_gone(1), "the session of node 1 gone"))
            as_version_1(zk, group)
            second = fleet.start(2)
            a.addresses = b.addresses = "%s:%d" % second.address  # they find it on their next heartbeat
            for _ in range(3):
                await b.heartbeat()
                no_partition_twice([a, b])
                assert not (b.partitions() & held_by_a)
            state = json.loads(zk.get(paths.state(group))[0])
            assert state["v"] == 3 and zk.exists(paths.target(group)) is not None
            assert not any("tg" in json.loads(zk.get(paths.member(group, m))[0])
                           for m in zk.get_children(paths.members_dir(group)))
            await a.heartbeat()
            assert len(a.partitions()) == 3, a.owned
            await a.heartbeat()  # reports the release
            await until(b.heartbeat, lambda: len(b.partitions()) == 3, "b owns three partitions")
            no_partition_twice([a, b])
            assert a.partitions() | b.partitions() == held_by_a
        finally:
            await a.close()
            await b.close()

    asyncio.run(scenario())


def until_sync(condition, what: str) -> None:
    import time

    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)
