"""The largest-group benchmark's clients: classic members that send what
Kafka 3.9's Java consumer sends, and the probe whose heartbeats are measured.

Owns, for ``bench_biggroup.py``:

* the payloads, byte for byte in the Java 3.9 consumer's format
  (``ConsumerProtocol``): a Subscription v3 (the sorted topics, the
  assignor's user data, the owned partitions, the generation, no rack) and an
  Assignment v3; ``cooperative-sticky``'s user data is its generation
  (``CooperativeStickyAssignor.subscriptionUserData``), ``range`` has none,
  and an eager (``range``) member owns nothing when it rejoins (the Java
  consumer revokes everything before it joins);
* the leader's assignment, as Java computes it client-side and sends in its
  SyncGroup: ``range`` is Kafka's ``RangeAssignor`` (per topic, members
  sorted, the first ``partitions % members`` one more); ``cooperative-sticky``
  is a port of the sticky rule that decides the size of what is stored
  (each member keeps what it owns up to its quota, the rest are dealt in
  partition order), not of Java's class (no second, revoking round);
  ``shuffled=True`` deals the partitions at random instead, the least
  compressible assignment (a group after much churn);
* :class:`BigMember`: one member on its own connection (JoinGroup with the
  member id round trip, SyncGroup, heartbeats every 3 s as Java's default,
  OffsetCommit), following its coordinator through a fail-over as Java does
  (FindCoordinator on a bootstrap address, with backoff);
* :func:`probe_main`: a member of another group, in a process of its own,
  that heartbeats every ``interval`` and writes each heartbeat's send time
  (``time.monotonic``, comparable across processes on Linux) and latency to
  a file, so the main process's own CPU (decoding a 3 MB JoinGroup answer)
  never shows up as the daemon's latency.
"""

from __future__ import annotations

import asyncio
import random
import struct
import sys
import time
from collections.abc import Sequence

from kafka.protocol.consumer.group import (
    HeartbeatRequest, JoinGroupRequest, OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from group_client import (
    COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, ILLEGAL_GENERATION, MEMBER_ID_REQUIRED, NONE,
    NOT_COORDINATOR, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, BenchError, KafkaConnection,
)

REJOIN = {ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS}
from zkcoord.wire.messages import build_message

COORDINATOR_GONE = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}
JOIN_V, SYNC_V, HEARTBEAT_V, COMMIT_V, FETCH_V, FIND_V = 9, 5, 4, 8, 7, 3
SESSION_TIMEOUT_MS, REBALANCE_TIMEOUT_MS = 45_000, 300_000  # Java 3.9's defaults
HEARTBEAT_INTERVAL_S = 3.0  # Java's heartbeat.interval.ms


# -- payloads ------------------------------------------------------------------------------------

def subscription(topics: Sequence[str], assignor: str, owned: dict[str, list[int]], generation: int) -> bytes:
    """What a Java 3.9 consumer puts in its JoinGroup protocol metadata."""
    user_data = struct.pack(">i", generation) if assignor == "cooperative-sticky" else None
    return bytes(ConsumerProtocolSubscription(
        version=3, topics=sorted(topics), user_data=user_data,
        owned_partitions=[ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=ps)
                          for t, ps in sorted(owned.items()) if ps],
        generation_id=generation, rack_id=None).encode())


def assignment_bytes(partitions: dict[str, list[int]]) -> bytes:
    return bytes(ConsumerProtocolAssignment(
        version=3, assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
                                        for t, ps in sorted(partitions.items()) if ps],
        user_data=None).encode())


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    if not data:
        return {}
    decoded = ConsumerProtocolAssignment.decode(data)
    return {tp.topic: list(tp.partitions) for tp in decoded.assigned_partitions}


def assign(assignor: str, members: dict[str, bytes], topics: dict[str, int], *, shuffled: bool = False,
           seed: int = 1) -> dict[str, dict[str, list[int]]]:
    """The leader's assignment: member id -> {topic: partitions} (module docstring)."""
    owned = {}
    subscribed: set[str] = set()
    for member_id, metadata in members.items():
        decoded = ConsumerProtocolSubscription.decode(metadata)
        subscribed.update(decoded.topics)
        owned[member_id] = [(tp.topic, p) for tp in (decoded.owned_partitions or []) for p in tp.partitions]
    ordered = sorted(members)
    out: dict[str, dict[str, list[int]]] = {m: {} for m in ordered}
    every = [(t, p) for t in sorted(subscribed) if t in topics for p in range(topics[t])]
    if assignor == "range" and not shuffled:
        for topic in sorted(subscribed):
            share, extra = divmod(topics.get(topic, 0), len(ordered))
            start = 0
            for i, member_id in enumerate(ordered):
                count = share + (1 if i < extra else 0)
                if count:
                    out[member_id][topic] = list(range(start, start + count))
                start += count
        return out
    if shuffled:
        random.Random(seed).shuffle(every)
    quota, extra = divmod(len(every), len(ordered))
    quotas = {m: quota + (1 if i < extra else 0) for i, m in enumerate(ordered)}
    taken: set[tuple[str, int]] = set()
    counts = dict.fromkeys(ordered, 0)
    for member_id in ordered:  # sticky: keep what is owned, up to the quota
        for tp in owned[member_id]:
            if counts[member_id] < quotas[member_id] and tp not in taken and tp[0] in topics and tp[1] < topics[tp[0]]:
                taken.add(tp)
                out[member_id].setdefault(tp[0], []).append(tp[1])
                counts[member_id] += 1
    free = [tp for tp in every if tp not in taken]
    under = [m for m in ordered if counts[m] < quotas[m]]
    cursor = 0
    while cursor < len(free) and under:  # dealt round robin to the members still under their quota
        still = []
        for member_id in under:
            if cursor >= len(free):
                break
            topic, partition = free[cursor]
            cursor += 1
            out[member_id].setdefault(topic, []).append(partition)
            counts[member_id] += 1
            if counts[member_id] < quotas[member_id]:
                still.append(member_id)
        under = still
    for parts in out.values():
        for ps in parts.values():
            ps.sort()
    return out


# -- one member ------------------------------------------------------------------------------------

class BigMember:
    """One classic member on a connection of its own (module docstring)."""

    def __init__(self, index: int, group: str, topics: Sequence[str], assignor: str,
                 bootstraps: Sequence[tuple[str, int]]) -> None:
        self.index, self.group, self.topics, self.assignor = index, group, list(topics), assignor
        self.bootstraps = list(bootstraps)
        self.client_id = f"consumer-{group}-{index}"
        self.conn: KafkaConnection | None = None
        self.coordinator: tuple[int, str, int] | None = None
        self.member_id = ""
        self.generation = -1
        self.leader = ""
        self.members: list[tuple[str, bytes]] = []  # the leader's JoinGroup answer
        self.owned: dict[str, list[int]] = {}
        self.synced_generation = -1
        self.last_ok = 0.0  # monotonic time of the last heartbeat answered NONE
        self.needs_join = True
        self.commit_version = COMMIT_V
        self.errors: dict[int, int] = {}

    # connections
    async def connect(self, find: "Finder") -> None:
        node, host, port = await find.coordinator(self.group)
        if self.conn is not None:
            self.conn.close()
        self.conn = await KafkaConnection.open(host, port, self.client_id)
        self.coordinator = (node, host, port)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def metadata(self) -> bytes:
        owned = self.owned if self.assignor == "cooperative-sticky" else {}
        return subscription(self.topics, self.assignor, owned, self.generation)

    async def join(self) -> None:
        """JoinGroup until answered NONE (the member id round trip included)."""
        while True:
            response = await self.conn.call(build_message(
                JoinGroupRequest, JOIN_V, group_id=self.group, session_timeout_ms=SESSION_TIMEOUT_MS,
                rebalance_timeout_ms=REBALANCE_TIMEOUT_MS, member_id=self.member_id, group_instance_id=None,
                protocol_type="consumer", protocols=[{"name": self.assignor, "metadata": self.metadata()}],
                reason=None))
            code = response.error_code
            if code == MEMBER_ID_REQUIRED:
                self.member_id = response.member_id
                continue
            if code == NONE:
                self.generation, self.leader = response.generation_id, response.leader
                self.members = [(m.member_id, bytes(m.metadata)) for m in response.members]
                return
            self.errors[code] = self.errors.get(code, 0) + 1
            if code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
            elif code in COORDINATOR_GONE:
                raise CoordinatorGone(code)
            elif code != REBALANCE_IN_PROGRESS:
                raise BenchError(f"JoinGroup of member {self.index}: error {code}")
            await asyncio.sleep(0.1)

    async def sync(self, assignments: dict[str, bytes] | None = None) -> int:
        response = await self.conn.call(build_message(
            SyncGroupRequest, SYNC_V, group_id=self.group, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=None, protocol_type="consumer", protocol_name=self.assignor,
            assignments=[{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]))
        if response.error_code == NONE:
            self.owned = decode_assignment(bytes(response.assignment))
            self.synced_generation = self.generation
            self.last_ok = time.monotonic()
        else:
            self.errors[response.error_code] = self.errors.get(response.error_code, 0) + 1
        return response.error_code

    async def heartbeat(self) -> int:
        sent = time.monotonic()
        response = await self.conn.call(build_message(
            HeartbeatRequest, HEARTBEAT_V, group_id=self.group, generation_id=self.generation,
            member_id=self.member_id, group_instance_id=None))
        if response.error_code == NONE:
            self.last_ok = sent  # when the answered heartbeat was sent: a fail-over is timed to one sent after it
        else:
            self.errors[response.error_code] = self.errors.get(response.error_code, 0) + 1
        return response.error_code

    async def commit(self, offsets: dict[str, list[tuple[int, int]]]):
        """OffsetCommit of ``{topic: [(partition, offset)]}`` at this member's generation."""
        return await self.conn.call(build_message(
            OffsetCommitRequest, self.commit_version, group_id=self.group,
            generation_id_or_member_epoch=self.generation,
            member_id=self.member_id, group_instance_id=None,
            topics=[{"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                                "committed_leader_epoch": -1, "committed_metadata": ""}
                                               for p, o in parts]} for t, parts in offsets.items()]))

    async def fetch_all(self):
        return await self.conn.call(build_message(OffsetFetchRequest, FETCH_V, group_id=self.group, topics=None,
                                                  require_stable=False))


class CoordinatorGone(Exception):
    """The member's coordinator answered that it is not (or not yet) the coordinator."""


class Finder:
    """FindCoordinator on the bootstrap addresses, with Java's backoff (100 ms doubling to 1 s)."""

    def __init__(self, bootstraps: Sequence[tuple[str, int]], client_id: str = "bench-finder") -> None:
        self.bootstraps = list(bootstraps)
        self.client_id = client_id
        self._conns: dict[tuple[str, int], KafkaConnection] = {}

    async def _conn(self, address: tuple[str, int]) -> KafkaConnection:
        conn = self._conns.get(address)
        if conn is None or conn._lost is not None:
            conn = await KafkaConnection.open(*address, self.client_id)
            self._conns[address] = conn
        return conn

    async def coordinator(self, group: str, timeout_s: float = 300.0) -> tuple[int, str, int]:
        from kafka.protocol.metadata import FindCoordinatorRequest

        deadline = time.monotonic() + timeout_s
        backoff = 0.1
        turn = 0
        while time.monotonic() < deadline:
            address = self.bootstraps[turn % len(self.bootstraps)]
            turn += 1
            try:
                conn = await self._conn(address)
                answer = await asyncio.wait_for(conn.call(build_message(
                    FindCoordinatorRequest, FIND_V, key=group, key_type=0)), 30)
                if answer.error_code == NONE:
                    return answer.node_id, answer.host, answer.port
            except (OSError, ConnectionError, asyncio.TimeoutError):
                self._conns.pop(address, None)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
        raise BenchError(f"FindCoordinator({group}) found no coordinator within {timeout_s:g} s")

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()


# -- the group ------------------------------------------------------------------------------------------

class Group:
    """The big group's members and the loop each runs (Java's poll loop, reduced)."""

    def __init__(self, group: str, count: int, topics: dict[str, int], assignor: str, shuffled: bool,
                 bootstraps: Sequence[tuple[str, int]]) -> None:
        self.group, self.topics, self.assignor, self.shuffled = group, topics, assignor, shuffled
        self.bootstraps = list(bootstraps)
        self.finder = Finder(self.bootstraps)
        self.members = [self.new_member(i) for i in range(count)]
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        self.assign_s: list[float] = []
        self.changed = asyncio.Event()
        self.failure: BaseException | None = None  # a member met what it cannot go on from

    def new_member(self, index: int) -> BigMember:
        return BigMember(index, self.group, list(self.topics), self.assignor, self.bootstraps)

    def start(self, members=None) -> None:
        for member in members or self.members:
            member.needs_join = True
            self.tasks.append(asyncio.get_running_loop().create_task(self._run(member)))

    async def _run(self, member: BigMember) -> None:
        backoff = 0.1
        next_beat = time.monotonic() + random.uniform(0, HEARTBEAT_INTERVAL_S)
        while not self.stop.is_set():
            try:
                if member.conn is None:
                    await member.connect(self.finder)
                if member.needs_join:
                    await member.join()
                    assignments = None
                    if member.member_id == member.leader:
                        assignments = await self._assign(member)
                    code = await member.sync(assignments)
                    if code == NONE:
                        member.needs_join = False
                        next_beat = time.monotonic() + HEARTBEAT_INTERVAL_S
                        self.changed.set()
                    elif code in COORDINATOR_GONE:
                        raise CoordinatorGone(code)
                    elif code not in REJOIN:
                        raise BenchError(f"SyncGroup of member {member.index}: error {code}")
                    elif code == UNKNOWN_MEMBER_ID:
                        member.member_id = ""
                    backoff = 0.1
                    continue
                await asyncio.sleep(max(0.0, next_beat - time.monotonic()))
                next_beat = time.monotonic() + HEARTBEAT_INTERVAL_S
                code = await member.heartbeat()
                if code == NONE:
                    self.changed.set()
                elif code in REJOIN:
                    member.needs_join = True
                    if code == UNKNOWN_MEMBER_ID:
                        member.member_id = ""
                elif code in COORDINATOR_GONE:
                    raise CoordinatorGone(code)
                else:
                    raise BenchError(f"Heartbeat of member {member.index}: error {code}")
                backoff = 0.1
            except BenchError as exc:
                self.failure = self.failure or exc
                self.changed.set()
                return
            except (OSError, ConnectionError, CoordinatorGone):
                member.close()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                next_beat = time.monotonic()

    async def _assign(self, leader: BigMember) -> dict[str, bytes]:
        started = time.perf_counter()
        members = dict(leader.members)
        assigned = await asyncio.to_thread(assign, self.assignor, members, self.topics, shuffled=self.shuffled)
        encoded = {m: assignment_bytes(parts) for m, parts in assigned.items()}
        self.assign_s.append(time.perf_counter() - started)
        return encoded

    def synced_at(self) -> int | None:
        """The generation every member is synced at and serving, or None."""
        generations = {m.synced_generation for m in self.members if not m.needs_join}
        if len(generations) == 1 and all(not m.needs_join for m in self.members):
            return generations.pop()
        return None

    async def wait(self, predicate, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if self.failure is not None:
                raise BenchError(f"{what}: {self.failure}")
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"{what} did not happen within {timeout_s:g} s")
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))
            except asyncio.TimeoutError:
                pass

    async def close(self) -> None:
        self.stop.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for member in self.members:
            member.close()
        self.finder.close()


# -- the probe ---------------------------------------------------------------------------------------

async def _probe(bootstraps: list[tuple[str, int]], group: str, out_path: str, interval_s: float) -> None:
    finder = Finder(bootstraps, "probe-finder")
    member = BigMember(0, group, ["probe-topic"], "range", bootstraps)
    out = open(out_path, "a", buffering=1)
    while True:
        try:
            await member.connect(finder)
            await member.join()
            if await member.sync({member.member_id: b""} if member.member_id == member.leader else None) != NONE:
                continue
            while True:
                sent = time.monotonic()
                code = await asyncio.wait_for(member.heartbeat(), 60)
                took = time.monotonic() - sent
                out.write(f"{sent:.6f} {took * 1e3:.3f} {code}\n")
                if code != NONE:
                    break
                await asyncio.sleep(max(0.0, interval_s - took))
        except (OSError, ConnectionError, CoordinatorGone, asyncio.TimeoutError) as exc:
            out.write(f"{time.monotonic():.6f} -1 {type(exc).__name__}\n")
            await asyncio.sleep(0.1)


def probe_main(argv: list[str]) -> None:
    """``biggroup_members.py HOST:PORT[,HOST:PORT] GROUP OUT_FILE INTERVAL_MS``: heartbeat forever."""
    addresses = [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in argv[0].split(","))]
    try:
        asyncio.run(_probe(addresses, argv[1], argv[2], int(argv[3]) / 1000))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    probe_main(sys.argv[1:])
