"""The largest-group benchmark's KIP-848 side (``bench_biggroup.py --protocol
consumer``): the same number of members over the same partitions in one
consumer group (Kafka's consumer protocol, the daemon's server-side
``uniform`` assignor).

Owns the members' loop around :class:`consumer_client.ConsumerMember` (the
Java 4.x consumer's heartbeats): each member finds its coordinator on the
bootstrap addresses (FindCoordinator, with Java's backoff), heartbeats on
its own connection, and after a broken connection or a coordinator error
finds the coordinator again and carries on with its member id and epoch,
as Java's consumer does across a coordinator fail-over. The phases measure
what the classic phases do: every member owning its share (join), the
stored state (the group record and one record per member), commits of
every partition (with the member epoch), and a kill -9 of the owner.
"""

from __future__ import annotations

import asyncio
import time

from biggroup_members import Finder
from consumer_client import ConsumerMember, heartbeat_version, settled
from group_client import BenchError, KafkaConnection, served_versions

COORDINATOR_ERRORS = ("(14)", "(15)", "(16)")  # load in progress, not available, not the coordinator


class FollowingMember(ConsumerMember):
    """A ConsumerMember that follows its coordinator (module docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.last_ok_sent = 0.0  # time.monotonic() of the last heartbeat answered NONE, when it was sent
        self.coordinator: int | None = None

    async def heartbeat(self) -> str:
        sent = time.monotonic()
        kind = await super().heartbeat()
        if kind != "fenced":
            self.last_ok_sent = sent
        return kind


async def run_member(member: FollowingMember, finder: Finder, group: str, stop: asyncio.Event) -> None:
    backoff = 0.1
    while not stop.is_set():
        try:
            if member.conn is None:
                node, host, port = await finder.coordinator(group)
                member.conn = await KafkaConnection.open(host, port, f"consumer-{member.name}")
                member.coordinator = node
            await member.run(stop)
        except (OSError, ConnectionError, asyncio.TimeoutError):
            pass
        except BenchError as exc:
            if not any(code in str(exc) for code in COORDINATOR_ERRORS):
                raise
        if member.conn is not None:
            member.conn.close()
            member.conn = None
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, 1.0)


class ConsumerGroupRun:
    """The KIP-848 group of one benchmark run."""

    def __init__(self, bench, group: str, count: int) -> None:
        self.bench = bench
        self.group = group
        self.finder = Finder(bench.bootstraps())
        self.count = count
        self.members: list[FollowingMember] = []
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        self.partitions = sum(bench.topics.values())

    async def start(self) -> None:
        conn = await KafkaConnection.open(*self.bench.bootstraps()[0], "bench")
        version = heartbeat_version(await served_versions(conn), "the daemon")
        conn.close()
        for i in range(self.count):
            member = FollowingMember(None, self.group, list(self.bench.topics), version, 300_000, name=str(i))
            self.members.append(member)
            self.tasks.append(asyncio.get_running_loop().create_task(
                run_member(member, self.finder, self.group, self.stop)))

    def failed(self) -> BaseException | None:
        for task in self.tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                return task.exception()
        return None

    async def wait(self, predicate, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if (exc := self.failed()) is not None:
                raise BenchError(f"{what}: a member failed: {exc}")
            if time.monotonic() > deadline:
                epochs = sorted({m.epoch for m in self.members})
                raise BenchError(f"{what} did not happen within {timeout_s:g} s (member epochs {epochs[:5]}..., "
                                 f"owned {sum(m.owned_count() for m in self.members)} of {self.partitions})")
            await asyncio.sleep(0.2)

    def settled(self) -> bool:
        return settled(self.members, self.partitions)

    async def close(self) -> None:
        self.stop.set()
        for member in self.members:
            member.wake()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for member in self.members:
            if member.conn is not None:
                member.conn.close()
        self.finder.close()
