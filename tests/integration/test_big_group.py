"""A group whose state is larger than one znode may hold, between real
``zkcoord run`` processes: join, sync, a commit of every partition in one
OffsetCommit, kill -9 of the owner, the other daemon loading the packed state
and serving the group on, and a rebalance there rewriting it.

50 members over 20 topics x 1,000 partitions, dealt at random (the least
compressible assignment), in Kafka 3.9's Java consumer format; the daemons
run with ``--max-state-bytes 8192``, so the state, about 420 KB as one JSON
znode, is stored packed in several parts (the packed format's split path, at
a size CI affords: bench/bench_biggroup.py runs 1,000 x 100,000 at the
default settings). No topic exists in Kafka: a classic group's state does
not depend on where its partitions live, and a daemon whose chroot holds no
broker metadata checks no commit against it.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from kafka.protocol.admin.groups import DescribeGroupsRequest
from kafka.protocol.consumer.group import OffsetCommitRequest

from tests.support.daemons import DaemonProcess, logged_fleet, wait_for
from tests.support.java_members import JavaMember
from tests.support.members import Ledger, close_all, converge
from tests.support.placement import placed_name
from tests.support.wire import WireClient
from zkcoord.core import groups
from zkcoord.core.errors import ErrorCode
from zkcoord.core.packed_record import part_names, unpack
from zkcoord.zk import paths

pytestmark = pytest.mark.integration
E = ErrorCode
MEMBERS = 50
TOPICS = {f"topic-{i:02d}": 1000 for i in range(20)}
MAX_STATE_BYTES = 8192
WAIT_S = 120.0


@pytest.fixture
def fleet(zk_hosts, zk, tmp_path):
    with logged_fleet(zk_hosts, zk, tmp_path / "logs", zk_session_timeout_ms=4000,
                      group_initial_rebalance_delay_ms=3000, max_state_bytes=MAX_STATE_BYTES) as fleet:
        yield fleet


def stored(zk, group: str) -> tuple[dict, dict, dict[str, bytes]]:
    """(header, the record it packs, its parts by name), as ZooKeeper holds them."""
    header = json.loads(zk.get(paths.state(group))[0])
    assert header["v"] == 2, header
    parts = {name: zk.get(paths.state_part(group, name))[0] for name in zk.get_children(paths.state_parts_dir(group))}
    assert sorted(parts) == sorted(part_names(header))  # no part of another write is left
    return header, unpack(header, [parts[n] for n in part_names(header)]), parts


def commit_all(member: JavaMember, offset_of) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        version=7, group_id=member.group, generation_id_or_member_epoch=member.generation,
        member_id=member.member_id, group_instance_id=None, topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=offset_of(topic, p), committed_leader_epoch=-1,
                    committed_metadata="") for p in range(count)])
            for topic, count in TOPICS.items()])


async def describe(daemon: DaemonProcess, group: str):
    client = await WireClient.connect(*daemon.address, "test")
    try:
        return (await client.call(DescribeGroupsRequest(version=4, groups=[group],
                                                        include_authorized_operations=False))).groups[0]
    finally:
        await client.close()


def test_a_packed_group_joins_commits_every_partition_and_survives_kill_9_of_its_owner(fleet, zk, unique_name):
    d1, d2 = fleet.start_many(1, 2)
    group = placed_name(unique_name, "big", ([1, 2], 1), ([2], 2))
    ledger = Ledger()
    members = [JavaMember(f"m{i:02d}", group, lambda: [d.address for d in (d1, d2)], ledger, topics=TOPICS,
                          session_timeout_ms=30_000, rebalance_timeout_ms=60_000, call_timeout_s=60.0)
               for i in range(MEMBERS)]
    offset_of = {}

    async def scenario():
        generation = await converge(members, timeout_s=WAIT_S, heartbeat_interval_s=0.5)
        assert fleet.contenders(group) == [1]
        header, record, parts = stored(zk, group)
        # Packed: every znode within --max-state-bytes, the one-znode JSON far over it.
        assert len(json.dumps(record, separators=(",", ":"))) > 10 * MAX_STATE_BYTES
        assert len(parts) >= 2 and all(len(p) <= MAX_STATE_BYTES for p in parts.values())
        assert (header["s"], header["g"], header["mc"]) == ("Stable", generation, MEMBERS)
        loaded = groups.from_record(group, record)
        assert {m.member_id: m.assignment_bytes for m in members} == {
            mid: member.assignment for mid, member in loaded.members.items()}
        assert ledger.double_owned() == {}
        assert sorted(tp for m in members for tp in m.assignment) == sorted(
            (t, p) for t, n in TOPICS.items() for p in range(n))

        # One OffsetCommit of all 20,000 partitions.
        committer = members[0]
        deadline = time.monotonic() + WAIT_S
        offset_of.update({(t, p): 1000 + 7 * p for t, n in TOPICS.items() for p in range(n)})
        answer = await committer.call(commit_all(committer, lambda t, p: offset_of[t, p]), deadline)
        assert {p.error_code for t in answer.topics for p in t.partitions} == {E.NONE}
        assert sum(len(t.partitions) for t in answer.topics) == 20_000
        await close_all(members)

        d1.kill()
        wait_for(lambda: fleet.session_gone(1), WAIT_S, "daemon 1's ZooKeeper session expired")
        # The members carry on with their generation on daemon 2, which loads the packed state.
        deadline = time.monotonic() + WAIT_S
        for m in members:
            assert await m.heartbeat(deadline) is E.NONE
            assert (m.coordinator_id, m.generation) == (2, generation)
        assert fleet.contenders(group) == [2]
        described = await describe(d2, group)
        assert (described.group_state, len(described.members)) == ("Stable", MEMBERS)
        assert {m.member_id: bytes(m.member_assignment) for m in described.members} == {
            m.member_id: m.assignment_bytes for m in members}
        assert await members[1].fetch(deadline) == offset_of
        assert stored(zk, group)[1] == record  # loaded, not rewritten

        # A member leaves: daemon 2 rebalances and writes a new packed state, the old parts gone.
        await members[-1].leave(deadline)
        rest = members[:-1]
        assert await converge(rest, timeout_s=WAIT_S, heartbeat_interval_s=0.5) > generation
        header2, record2, parts2 = stored(zk, group)
        assert header2["mc"] == MEMBERS - 1 and not set(parts2) & set(parts)
        assert {m.member_id for m in rest} == {m["id"] for m in record2["m"]}
        await close_all(members)

    asyncio.run(scenario())
