"""Offset commits of many groups in one ZooKeeper multi, on real ``zkcoord run`` daemons.

A daemon writes the commits that arrive together, for any of its groups, in
one multi-op, each group's ops behind a check of that group's fence (its
contender znode). A multi lands whole or not at all, so when one group's
owner has been deposed its check refuses the whole multi: that group's
commits must be refused, and the other groups' commits in the same multi
must land all the same (``zkcoord.zk.commit_batch``, rule 2).

The deposition is made invisible to the daemon until it writes: the test
bumps the version of the daemon's contender znode (the fence checks version
0), which its exists-watch sees as a data change, not a deletion. So the
only thing that can tell the daemon is its fenced multi, and the commits
that share it are those read in one go: they are sent while the daemon is
stopped (SIGSTOP) and it reads them together when it continues. Meanwhile
both daemons' other groups commit back to back, before, during and after.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from kafka.protocol.consumer.group import OffsetCommitRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest
from kazoo.exceptions import NoNodeError

from tests.support.daemons import DaemonProcess, logged_fleet
from tests.support.placement import placed_name
from tests.support.wire import WireClient
from zkcoord.core.errors import ErrorCode

pytestmark = pytest.mark.integration
E = ErrorCode
WAIT_S = 60.0  # bound of every wait for a condition
TOPIC = "orders"


@pytest.fixture
def fleet(zk_hosts, zk, tmp_path):
    with logged_fleet(zk_hosts, zk, tmp_path / "logs", zk_session_timeout_ms=20_000) as fleet:
        yield fleet


def commit_request(group: str, offsets: dict[int, int]) -> OffsetCommitRequest:
    """A commit of a consumer outside any generation (as an admin tool's): no member, generation -1."""
    return OffsetCommitRequest(
        version=7, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=[
            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
            for p, o in sorted(offsets.items())])])


def codes(response) -> list[int]:
    return [p.error_code for t in response.topics for p in t.partitions]


async def call(daemon: DaemonProcess, request):
    client = await WireClient.connect(*daemon.address, "test")
    try:
        return await client.call(request)
    finally:
        await client.close()


async def owner(daemon: DaemonProcess, group: str) -> int:
    found = await call(daemon, FindCoordinatorRequest(version=3, key=group, key_type=0))
    assert found.error_code == E.NONE, found
    return found.node_id


async def until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S:g} s: {what}"
        await asyncio.sleep(0.05)


async def answer_of(client: WireClient):
    """The response to the request ``client`` sent last (sent without :meth:`WireClient.call`)."""
    while not client._received:
        data = await asyncio.wait_for(client.reader.read(65536), WAIT_S)
        if not data:
            raise ConnectionError("connection closed by the daemon")
        client._received.extend(client.protocol.receive_bytes(data))
    return client._received.pop(0)[1]


def stored(zk, group: str, partition: int) -> int | None:
    try:
        return int(zk.get(f"/consumers/{group}/offsets/{TOPIC}/{partition}")[0])
    except NoNodeError:
        return None


async def keep_committing(daemon: DaemonProcess, group: str, partition: int, stop: asyncio.Event,
                          acked: dict, errors: list) -> None:
    """Commit ``partition`` of ``group`` back to back, each offset one more, until ``stop``."""
    client = await WireClient.connect(*daemon.address, f"load-{group}-{partition}")
    try:
        offset = 0
        while not stop.is_set():
            offset += 1
            answer = codes(await client.call(commit_request(group, {partition: offset})))
            if answer != [E.NONE]:
                errors.append((group, partition, offset, answer))
                return
            acked[(group, partition)] = offset
    finally:
        await client.close()


def test_a_deposed_owners_commit_is_refused_in_a_shared_multi_while_the_others_land(fleet, zk, unique_name):
    d1, d2 = fleet.start_many(1, 2)
    # x and y are daemon 1's, z daemon 2's (lookups place them so while both live)
    x, y = (placed_name(unique_name, name, ([1, 2], 1)) for name in ("x", "y"))
    z = placed_name(unique_name, "z", ([1, 2], 2))

    async def scenario():
        daemon_of = {1: d1, 2: d2}
        for group in (x, y, z):  # the owner's first commit makes it contend and load the group
            assert codes(await call(daemon_of[await owner(d2, group)], commit_request(group, {0: 1}))) == [E.NONE]
        assert (fleet.contenders(x), fleet.contenders(y), fleet.contenders(z)) == ([1], [1], [2])

        stop, acked, errors = asyncio.Event(), {}, []
        load = [asyncio.ensure_future(keep_committing(d, g, p, stop, acked, errors))
                for d, g in ((d1, y), (d2, z)) for p in (10, 11, 12)]
        await until(lambda: len(acked) == 6 and min(acked.values()) >= 5, "both daemons' groups committing")

        # Daemon 1 is deposed for x, and does not know it: its fence (contender at version 0) no longer holds.
        [contender] = zk.get_children(f"/coordinators/{x}/owner")
        path = f"/coordinators/{x}/owner/{contender}"
        zk.set(path, zk.get(path)[0])
        assert zk.exists(path).version == 1

        # x's commit and y's commits reach daemon 1 together: one multi, x's check first. The connections
        # are open (accepted, read by the daemon) before it stops, and it continues only once its kernel has
        # every request: one poll of its loop finds all four, and queues the four commits before its batcher
        # takes the next multi (an accept, or a request still on its way, would split them).
        clients = [await WireClient.connect(*d1.address, f"together-{i}") for i in range(4)]
        for client in clients:  # answered: accepted, and read by the daemon's loop
            await client.call(ApiVersionsRequest(version=0))
        d1.pause()
        together = [commit_request(x, {0: 2}), commit_request(y, {1: 7}), commit_request(y, {2: 7}),
                    commit_request(y, {3: 7, 4: 7})]
        for client, request in zip(clients, together):
            client.protocol.send_request(request)
            client.writer.write(client.protocol.send_bytes())
            await client.writer.drain()
        await until(lambda: all(c.unacknowledged_bytes() == 0 for c in clients),
                    "the four requests in daemon 1's receive buffers")
        d1.resume()
        answers = [codes(await answer_of(client)) for client in clients]
        for client in clients:
            await client.close()
        assert answers == [[E.NOT_COORDINATOR], [E.NONE], [E.NONE], [E.NONE, E.NONE]]
        log = d1.log(400)
        assert "an offset commit of group " + repr(x) + " was refused" in log
        [shared] = re.findall(r"a multi of (\d+) commits was refused by the fence of group " + re.escape(repr(x))
                              + r"; the (\d+) commits of other groups in it are sent again", log)
        assert int(shared[1]) >= 3 and int(shared[0]) == int(shared[1]) + 1  # y's three, and any of the load's

        stop.set()
        await asyncio.gather(*load)
        assert errors == []  # neither daemon's other commits saw anything of it

        assert stored(zk, x, 0) == 1  # the deposed owner's commit did not land
        assert [stored(zk, y, p) for p in range(1, 5)] == [7, 7, 7, 7]
        for (group, partition), offset in acked.items():
            assert stored(zk, group, partition) == offset
        # daemon 1 gave the group up (its contender deleted): a new election, and x commits again
        await until(lambda: fleet.contenders(x) == [], "daemon 1's contender for x deleted")
        deadline = time.monotonic() + WAIT_S
        while (answer := codes(await call(daemon_of[await owner(d2, x)], commit_request(x, {0: 3})))) != [E.NONE]:
            assert time.monotonic() < deadline and answer in ([E.NOT_COORDINATOR], [E.COORDINATOR_LOAD_IN_PROGRESS])
            await asyncio.sleep(0.05)
        assert stored(zk, x, 0) == 3

    asyncio.run(scenario())
