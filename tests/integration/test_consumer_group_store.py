"""A KIP-848 consumer group in ZooKeeper: its group record in the state
znode, one record per member and one for its target beside it, written in
fenced multis (split when one would be over ZooKeeper's limit, the state
znode last) and read back whole. Sized as the issues ask: 1,000 members over
10,000 partitions, and the target of 1,000 members over 100,000."""

from __future__ import annotations

import asyncio

import pytest
from test_zk_support import connection

from zkcoord.core.classic import CLASSIC
from zkcoord.core.consumer.kind import CONSUMER
from zkcoord.core.consumer.model import ConsumerMember, new_consumer_group, target_of
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.groups import from_record
from zkcoord.errors import NotOwnerError
from zkcoord.zk import paths
from zkcoord.zk.group_records import MULTI_MAX_BYTES
from zkcoord.zk.ownership import GroupOwnership
from zkcoord.zk.state_store import GroupStateStore

pytestmark = pytest.mark.integration

TOPIC = "AAAAAAAAAAAAAAAAAAAAAQ"  # a topic id, Kafka's text form


def big_group(group_id: str, members: int, partitions: int, epoch: int = 5, stride: int = 0,
              striped: bool = False):
    """``members`` stable members at ``epoch`` owning ``partitions`` evenly;
    with ``stride``, each member's target is its neighbour's partitions;
    ``striped``: every ``members``-th partition (no two in a row, the worst
    case for the records' folding) rather than a range."""
    group = new_consumer_group(group_id)
    each = partitions // members
    for m in range(members):
        owned = range(m * each, (m + 1) * each)
        n = (m + stride) % members
        target = range(n, partitions, members) if striped else range(n * each, (n + 1) * each)
        member = ConsumerMember(f"member-{m:04d}-AAAAAAAAAAAAA", member_epoch=epoch, previous_member_epoch=epoch - 1,
                                rebalance_timeout_ms=30_000, client_id=f"client-{m}", client_host="/10.0.0.1",
                                subscribed_topic_names=("orders",),
                                assigned=FrozenMap({TOPIC: FrozenMap((p, epoch) for p in owned)}))
        group = group.with_member(member).with_target(member.member_id, target_of({TOPIC: target}))
    from dataclasses import replace

    return replace(group, group_epoch=epoch).with_assignment_epoch(epoch, 1_700_000_000_000)


async def owner_of(conn, group_id):
    ownership = GroupOwnership(conn, 1)
    await ownership.start()
    assert await ownership.contend(group_id) == 1
    return ownership, GroupStateStore(conn, ownership)


def test_a_thousand_members_over_ten_thousand_partitions_round_trip(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, "big")
            group = big_group("big", 1000, 10_000)
            first = CONSUMER.writes(CLASSIC.new("big"), group)
            version = await store.write_changes("big", first, None)
            record, loaded_version = await store.load("big")
            assert loaded_version == version == 0
            assert from_record("big", record) == group
            assert len(zk.get_children(paths.members_dir("big"))) == 1000

            # A new target for everyone (the epoch moved) and every member's partitions at that epoch: every
            # member record changes, more than one multi's worth when the records are large enough; the target
            # record after them, the state znode last.
            moved = big_group("big", 1000, 10_000, epoch=6, stride=1)
            second = CONSUMER.writes(group, moved)
            assert len(second) == 1002 and [k for k, _, _ in second[-2:]] == ["target", ""]
            version = await store.write_changes("big", second, version)
            record, loaded_version = await store.load("big")
            assert loaded_version == version == 1
            assert from_record("big", record) == moved
            sizes = [len(zk.get(paths.member("big", m))[0]) for m in ("member-0000-AAAAAAAAAAAAA",)]
            assert sizes[0] < MULTI_MAX_BYTES

            # A new target alone (the members' partitions as they were): one record for all of it.
            retargeted = moved
            for m, member in moved.members.items():
                retargeted = retargeted.with_target(m, group.target(m))
            third = CONSUMER.writes(moved, retargeted)
            assert [k for k, _, _ in third] == ["target", ""]
            version = await store.write_changes("big", third, version)
            record, _ = await store.load("big")
            assert from_record("big", record) == retargeted
    asyncio.run(scenario())


def test_the_target_of_a_thousand_members_over_a_hundred_thousand_partitions_is_one_record(zk_hosts, zk):
    """Issue 27's largest group: its target is one record well under ZooKeeper's 1 MB (each member's
    partitions in its own order), written with the group and read back the same."""
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, "huge")
            group = big_group("huge", 1000, 100_000, stride=1, striped=True)
            version = await store.write_changes("huge", CONSUMER.writes(CLASSIC.new("huge"), group), None)
            size = len(zk.get(paths.target("huge"))[0])
            print(f"target record of 1,000 members over 100,000 partitions: {size} bytes")
            assert size < 300_000
            record, loaded_version = await store.load("huge")
            assert loaded_version == version and from_record("huge", record) == group
    asyncio.run(scenario())


def test_member_records_larger_than_one_multi_are_split_and_still_fenced(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            ownership, store = await owner_of(conn, "wide")
            # 40 members holding 2,500 partitions each: about 40 KB a record, 1.6 MB in all: two multis at least.
            group = big_group("wide", 40, 100_000)
            changes = CONSUMER.writes(CLASSIC.new("wide"), group)
            assert sum(len(str(r)) for _, r, _ in changes if r) > MULTI_MAX_BYTES
            version = await store.write_changes("wide", changes, None)
            record, _ = await store.load("wide")
            assert from_record("wide", record) == group

            # Deposed (our contender is gone): nothing of the next write lands, not even its first multi.
            zk.delete(ownership.fence("wide").path)
            moved = big_group("wide", 40, 100_000, epoch=6, stride=1)
            with pytest.raises(NotOwnerError):
                await store.write_changes("wide", CONSUMER.writes(group, moved), version)
            assert ownership.owned() == frozenset()
            async with connection(zk_hosts) as other:
                _, successor = await owner_of(other, "wide")
                record, still = await successor.load("wide")
                assert still == version and from_record("wide", record) == group
    asyncio.run(scenario())


def test_a_member_holding_a_hundred_thousand_partitions_is_stored_with_its_runs_folded(zk_hosts, zk):
    """The first member of a group over 100,000 partitions holds them all (its record as written before is
    1.6 MB); written folded under --max-state-bytes, loaded back as the same group."""
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, "one")
            group = big_group("one", 1, 100_000)
            version = await store.write_changes("one", CONSUMER.writes(CLASSIC.new("one"), group), None)
            data = zk.get(paths.member("one", "member-0000-AAAAAAAAAAAAA"))[0]
            assert len(data) < 1000 and b'"a":{"' + TOPIC.encode() + b'":[[0,5,100000]]}' in data
            record, loaded_version = await store.load("one")
            assert loaded_version == version and from_record("one", record) == group
    asyncio.run(scenario())
