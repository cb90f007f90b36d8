"""Hostile and oversized input on a real daemon and ZooKeeper
(:mod:`zkcoord.core.limits`): each limit is answered with Kafka's error code
or a closed connection, nothing is written for what is refused, and other
clients are served meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import pytest
from kafka.protocol.admin.groups import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest, OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.parser import KafkaProtocol

from tests.integration.test_daemon_protocol import E_NONE, daemon_config, join, join_with_id
from tests.support.wire import WireClient
from zkcoord.core.errors import ErrorCode
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration
Topic = OffsetCommitRequest.OffsetCommitRequestTopic
Partition = Topic.OffsetCommitRequestPartition
WAIT_S = 60.0


def commit(group: str, metadata_by_partition: dict[int, str], topic: str = "orders") -> OffsetCommitRequest:
    """A simple-consumer OffsetCommit (generation -1): offset 10 + p per partition."""
    return OffsetCommitRequest(
        version=8, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[Topic(name=topic, partitions=[
            Partition(partition_index=p, committed_offset=10 + p, committed_leader_epoch=-1, committed_metadata=m)
            for p, m in metadata_by_partition.items()])])


def frame_of(request, client_id: str = "hostile") -> bytes:
    protocol = KafkaProtocol(client_id=client_id)
    protocol.send_request(request)
    return protocol.send_bytes()


async def running_daemon(zk_hosts: str, **settings):
    daemon = Daemon(dataclasses.replace(daemon_config(zk_hosts, 1), **settings))
    return daemon, await daemon.start()


async def closed_by_daemon(reader: asyncio.StreamReader) -> bool:
    """True once the daemon closes the connection (EOF or reset)."""
    try:
        while await asyncio.wait_for(reader.read(65536), WAIT_S):
            pass
    except ConnectionError:
        pass
    return True


def test_offset_metadata_over_the_limit_is_refused_per_partition(zk_hosts, zk, unique_name):
    group = unique_name("g")

    async def scenario():
        daemon, running = await running_daemon(zk_hosts)
        client = await WireClient.connect(*running.advertised, "c")
        try:
            assert (await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))).error_code == E_NONE
            answer = await client.call(commit(group, {
                0: "x" * 4097,  # one over offset.metadata.max.bytes
                1: "ok",
                2: "y" * (2 << 20),  # the 2 MB: over ZooKeeper's packet limit by itself
                3: "\U0001F600" * 2049,  # 2,049 code points, 4,098 UTF-16 units: Kafka counts the units
                4: "z" * 4096,  # exactly the limit
            }))
            codes = {p.partition_index: p.error_code for t in answer.topics for p in t.partitions}
            too_large = ErrorCode.OFFSET_METADATA_TOO_LARGE
            assert codes == {0: too_large, 1: E_NONE, 2: too_large, 3: too_large, 4: E_NONE}
            assert sorted(zk.get_children(f"/consumers/{group}/offsets/orders")) == ["1", "4"]
            assert zk.get(f"/consumers/{group}/offsets/orders/1")[0] == b"11"
            # The daemon's session survived: a later commit of another group lands.
            other = unique_name("g")
            assert (await client.call(FindCoordinatorRequest(version=3, key=other, key_type=0))).error_code == E_NONE
            later = await client.call(commit(other, {0: "fine"}))
            assert later.topics[0].partitions[0].error_code == E_NONE
            assert zk.get(f"/consumers/{other}/offsets/orders/0")[0] == b"10"
        finally:
            await client.close()
            await daemon.stop()

    asyncio.run(scenario())


def test_a_request_over_its_api_limit_closes_that_connection_only(zk_hosts, zk, unique_name):
    async def scenario():
        daemon, running = await running_daemon(zk_hosts, group_admin_request_max_bytes=4096)
        reader, writer = await asyncio.open_connection(*running.advertised)
        bystander = await WireClient.connect(*running.advertised, "c")
        try:
            describe = DescribeGroupsRequest(version=5, groups=["g"] * 3000, include_authorized_operations=False)
            writer.write(frame_of(describe)[:8192])  # the size and api key are enough to refuse it
            await writer.drain()
            assert await closed_by_daemon(reader)
            small = await bystander.call(DescribeGroupsRequest(version=5, groups=["g"],
                                                               include_authorized_operations=False))
            assert small.groups[0].group_id == "g"
        finally:
            writer.close()
            await bystander.close()
            await daemon.stop()

    asyncio.run(scenario())


def test_idle_and_half_frame_connections_are_closed(zk_hosts, zk):
    async def scenario():
        daemon, running = await running_daemon(zk_hosts, connections_max_idle_ms=300)
        idle_reader, idle_writer = await asyncio.open_connection(*running.advertised)
        half_reader, half_writer = await asyncio.open_connection(*running.advertised)
        try:
            whole = frame_of(DescribeGroupsRequest(version=5, groups=["g"], include_authorized_operations=False))
            half_writer.write(whole[:len(whole) // 2])
            await half_writer.drain()
            assert await closed_by_daemon(half_reader)
            assert await closed_by_daemon(idle_reader)
            # A client that keeps talking is not idle.
            client = await WireClient.connect(*running.advertised, "c")
            for _ in range(5):
                answer = await client.call(DescribeGroupsRequest(version=5, groups=["g"],
                                                                 include_authorized_operations=False))
                assert answer.groups[0].group_id == "g"
            await client.close()
        finally:
            idle_writer.close()
            half_writer.close()
            await daemon.stop()

    asyncio.run(scenario())


def test_unanswered_bytes_over_the_cap_close_the_newest_offender(zk_hosts, zk, unique_name):
    group = unique_name("g")

    async def scenario():
        daemon, running = await running_daemon(zk_hosts, partial_requests_max_bytes=100_000)
        first_reader, first_writer = await asyncio.open_connection(*running.advertised)
        second_reader, second_writer = await asyncio.open_connection(*running.advertised)
        finder = await WireClient.connect(*running.advertised, "c")
        try:
            assert (await finder.call(FindCoordinatorRequest(version=3, key=group, key_type=0))).error_code == E_NONE
            big = frame_of(commit(group, {p: "m" * 200 for p in range(400)}))  # about 90 KB
            assert 60_000 < len(big) < 100_000
            first_writer.write(big[:60_000])
            await first_writer.drain()
            second_writer.write(big[:60_000])  # 120 KB unanswered together: this one is over
            await second_writer.drain()
            assert await closed_by_daemon(second_reader)
            first_writer.write(big[60_000:])  # the first finishes its request and is answered
            await first_writer.drain()
            size = int.from_bytes(await asyncio.wait_for(first_reader.readexactly(4), WAIT_S), "big")
            assert size > 0
            assert len(zk.get_children(f"/consumers/{group}/offsets/orders")) == 400
        finally:
            first_writer.close()
            second_writer.close()
            await finder.close()
            await daemon.stop()

    asyncio.run(scenario())


# Just under group_admin_request_max_bytes (1 MiB): about 500,000 empty group ids, 300,000 lookups of one key.
HUGE_ADMIN_REQUESTS = {
    "describe": lambda: DescribeGroupsRequest(version=5, groups=[""] * 500_000, include_authorized_operations=False),
    "find-same": lambda: FindCoordinatorRequest(version=4, key_type=0, coordinator_keys=["nobody"] * 120_000),
    "find-distinct": lambda: FindCoordinatorRequest(version=4, key_type=0,
                                                    coordinator_keys=[f"n{i}" for i in range(100_000)]),
}


@pytest.mark.parametrize("kind", sorted(HUGE_ADMIN_REQUESTS))
def test_heartbeats_of_another_group_are_answered_while_a_huge_request_is_served(zk_hosts, zk, unique_name, kind):
    """With metrics on, as every sandbox daemon has them: counting the answer's errors walked
    every entry of it on the event loop (2.35 s for a DescribeGroups of 300,000 ids)."""
    group = unique_name("g")

    async def scenario():
        daemon, running = await running_daemon(zk_hosts, metrics_listen="127.0.0.1:0")
        member = await WireClient.connect(*running.advertised, "c")
        reader, writer = await asyncio.open_connection(*running.advertised)
        try:
            assert (await member.call(FindCoordinatorRequest(version=3, key=group, key_type=0))).error_code == E_NONE
            member_id = await join_with_id(member, group)
            joined = await member.call(join(group, member_id))
            synced = await member.call(SyncGroupRequest(
                version=3, group_id=group, generation_id=joined.generation_id, member_id=member_id,
                group_instance_id=None, assignments=[]))
            assert (joined.error_code, synced.error_code) == (E_NONE, E_NONE)
            heartbeat = HeartbeatRequest(version=3, group_id=group, generation_id=joined.generation_id,
                                         member_id=member_id, group_instance_id=None)
            huge = frame_of(HUGE_ADMIN_REQUESTS[kind]())
            assert len(huge) < 1 << 20
            writer.write(huge)
            await writer.drain()
            answer_started = asyncio.ensure_future(reader.readexactly(4))
            answered_meanwhile = 0
            while not answer_started.done():
                assert (await member.call(heartbeat)).error_code == E_NONE
                if not answer_started.done():
                    answered_meanwhile += 1
            await reader.readexactly(int.from_bytes(await answer_started, "big"))
            assert answered_meanwhile >= 20
            api = "DescribeGroups" if kind == "describe" else "FindCoordinator"
            counted = daemon.metrics.registry.get_sample_value("zkcoord_requests_total", {"api": api, "error": "NONE"})
            return counted
        finally:
            writer.close()
            await member.close()
            await daemon.stop()

    assert asyncio.run(scenario()) == (1 if kind == "describe" else 2)  # + the member's own lookup


def test_find_coordinator_looks_each_distinct_key_up_once_and_unknown_groups_together(zk_hosts, zk, unique_name):
    """FindCoordinator v4 with 300,000 copies of one key made one ZooKeeper read per copy (270 s);
    keys of groups nobody owns are now listed together in multiReads, and a repeated key once."""
    group = unique_name("g")
    unknown = [f"u{i}" for i in range(20_000)]  # this test's chroot holds none of them
    keys = [group, *unknown, *[""] * 100_000, "x" * 250, group, unknown[3]]

    async def scenario():
        daemon, running = await running_daemon(zk_hosts)
        client = await WireClient.connect(*running.advertised, "c")
        try:
            assert (await client.call(commit(group, {0: ""}))).topics[0].partitions[0].error_code == E_NONE
            before = packets_received(zk)
            found = await client.call(FindCoordinatorRequest(version=4, key_type=0, coordinator_keys=keys), 120)
            reads = packets_received(zk) - before
            same = await client.call(FindCoordinatorRequest(version=4, key_type=0,
                                                            coordinator_keys=["z"] * 300_000), 120)
            return found, same, reads, packets_received(zk) - before - reads, running.advertised
        finally:
            await client.close()
            await daemon.stop()

    found, same, reads, same_reads, (host, port) = asyncio.run(scenario())
    # ZooKeeper counts every client's packets (pings of the broker and of this test's client too): the bounds
    # leave room for those, far below one read per key (120,000 and 300,000).
    assert reads < 500, reads
    assert same_reads < 200, same_reads
    assert [c.key for c in found.coordinators] == keys
    answers = {(c.error_code, c.node_id, c.host, c.port) for c in found.coordinators if c.key != "x" * 250}
    assert answers == {(E_NONE, 1, host, port)}
    assert [c.error_code for c in found.coordinators if c.key == "x" * 250] == [ErrorCode.INVALID_GROUP_ID]
    assert len(same.coordinators) == 300_000
    assert {(c.key, c.error_code, c.node_id) for c in same.coordinators} == {("z", E_NONE, 1)}
    assert zk.exists("/coordinators/z") is None  # a lookup writes nothing


def packets_received(zk) -> int:
    """ZooKeeper's count of packets received (its ``mntr`` four-letter word)."""
    stats = dict(line.split("\t", 1) for line in zk.command(b"mntr").splitlines() if "\t" in line)
    return int(stats["zk_packets_received"])


def test_an_offset_fetch_naming_many_partitions_reads_only_the_committed_ones(zk_hosts, zk, unique_name):
    """An 8 MiB OffsetFetch names two million partitions; the daemon answers
    every one but reads only those with a znode (before: two reads per
    partition asked, 600,000 ZooKeeper requests for this one)."""
    group = unique_name("g")
    asked = [*range(300_000), 5]  # a duplicate is answered twice, as asked
    Wanted = OffsetFetchRequest.OffsetFetchRequestTopic

    async def scenario():
        daemon, running = await running_daemon(zk_hosts)
        client = await WireClient.connect(*running.advertised, "c")
        try:
            assert (await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))).error_code == 0
            committed = await client.call(commit(group, {5: "five", 150_000: ""}))
            assert [p.error_code for t in committed.topics for p in t.partitions] == [E_NONE, E_NONE]
            zk.create(f"/consumers/{group}/offsets/orders/7", b"not a number")
            before = packets_received(zk)
            single = await client.call(OffsetFetchRequest(version=5, group_id=group, topics=[
                Wanted(name="orders", partition_indexes=asked), Wanted(name="absent", partition_indexes=[0, 1])]))
            reads = packets_received(zk) - before
            grouped = await client.call(OffsetFetchRequest(version=8, groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=[
                    OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                        name="orders", partition_indexes=asked)])], require_stable=False))
            return single, reads, grouped
        finally:
            await client.close()
            await daemon.stop()

    single, reads, grouped = asyncio.run(scenario())
    assert reads < 1_000, reads
    expected = {5: (15, "five", E_NONE), 150_000: (150_010, "", E_NONE), 7: (-1, "", ErrorCode.UNKNOWN_SERVER_ERROR)}
    for topics in (single.topics, grouped.groups[0].topics):
        orders = topics[0]
        assert orders.name == "orders" and [p.partition_index for p in orders.partitions] == asked
        answered = {p.partition_index: (p.committed_offset, p.metadata, p.error_code) for p in orders.partitions
                    if p.committed_offset != -1 or p.error_code != E_NONE}
        assert answered == expected
    assert single.error_code == E_NONE and grouped.groups[0].error_code == E_NONE
    assert [(p.partition_index, p.committed_offset) for p in single.topics[1].partitions] == [(0, -1), (1, -1)]


def test_a_list_groups_filter_holding_a_null_is_answered(zk_hosts, zk, unique_name):
    """Found by the fuzzer (bench/fuzz_daemon.py): a null in ListGroups'
    states filter (a non-nullable array of strings) failed the handler and
    closed the connection."""
    group = unique_name("g")

    async def scenario():
        daemon, running = await running_daemon(zk_hosts)
        client = await WireClient.connect(*running.advertised, "c")
        try:
            joined = await client.call(join(group, await join_with_id(client, group)))  # listed: filtered
            assert joined.error_code == E_NONE
            stable = await client.call(ListGroupsRequest(version=4, states_filter=[None, "completingrebalance"]))
            typed = await client.call(ListGroupsRequest(version=5, states_filter=[], types_filter=[None, "Classic"]))
            return stable, typed
        finally:
            await client.close()
            await daemon.stop()

    stable, typed = asyncio.run(scenario())
    assert stable.error_code == E_NONE and [g.group_id for g in stable.groups] == [group]
    assert typed.error_code == E_NONE and [g.group_id for g in typed.groups] == [group]


def test_a_fetch_of_every_offset_is_answered_with_the_collector_paused_throughout(zk_hosts, zk, unique_name,
                                                                                  monkeypatch):
    """A fetch of every offset (a small request, an answer of 100,000 partitions
    for the largest group) holds the cyclic collector's pause from its first
    read to its encoded answer, so its objects are freed before the collector
    runs again (zkcoord.wire.bulk_work); its big answer is encoded in a worker
    thread and still right."""
    import gc

    from zkcoord.server import apis
    from zkcoord.wire import bulk_work

    group = unique_name("g")
    partitions = {p: "" for p in range(apis.BIG_ANSWER_ITEMS + 500)}  # a big answer: encoded off the loop
    holds = []

    @contextlib.contextmanager
    def watched():
        with bulk_work.collector_paused():
            holds.append(["open", gc.isenabled()])
            yield
            holds[-1][0] = "closed"

    monkeypatch.setattr(apis, "collector_paused", watched)

    async def scenario():
        daemon, running = await running_daemon(zk_hosts)
        client = await WireClient.connect(*running.advertised, "c")
        try:
            assert (await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))).error_code == 0
            committed = await client.call(commit(group, partitions))
            assert {p.error_code for t in committed.topics for p in t.partitions} == {E_NONE}
            named = await client.call(OffsetFetchRequest(version=5, group_id=group, topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name="orders", partition_indexes=[0, 1])]))
            held_by_named = len(holds)
            every = await client.call(OffsetFetchRequest(version=5, group_id=group, topics=None))
            grouped = await client.call(OffsetFetchRequest(version=8, groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)], require_stable=False))
            return named, held_by_named, every, grouped
        finally:
            await client.close()
            await daemon.stop()

    was = gc.isenabled()
    gc.enable()
    try:
        named, held_by_named, every, grouped = asyncio.run(scenario())
        assert gc.isenabled()  # the pause ended with the fetches
    finally:
        (gc.enable if was else gc.disable)()
    assert held_by_named == 0  # partitions named: no hold
    assert holds == [["closed", False], ["closed", False]]  # each fetch of every offset held it
    expected = [(p, p + 10) for p in partitions]
    for topics in (every.topics, grouped.groups[0].topics):
        assert [t.name for t in topics] == ["orders"]
        assert [(p.partition_index, p.committed_offset) for p in topics[0].partitions] == expected
    assert [p.committed_offset for p in named.topics[0].partitions] == [10, 11]
