"""Consumer-group members driven over the Kafka protocol, for fault tests.

This module owns :class:`Member`, a hand-driven classic group member that
behaves as a Kafka client does on coordinator trouble (the 0.9 consumer
rewrite design, "Co-ordinator failure during rebalance"): it finds its
coordinator with FindCoordinator through any daemon of a bootstrap list,
re-discovers it when a request fails with NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or a broken
connection, rejoins on REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION, and
starts over without a member id on UNKNOWN_MEMBER_ID.

Every generation a JoinGroup response hands out and every assignment a
SyncGroup response delivers is written to a shared :class:`Ledger`, so tests
can check that no partition was owned by two members of one generation and
that generations only grow. :func:`converge` drives members until all of
them heartbeat successfully in one generation.

The leader assigns ``partitions`` round-robin over the sorted member ids;
an assignment is JSON of the partition numbers (``b"[0,2]"``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.support.wire import WireClient
from zkcoord.core.errors import ErrorCode

E = ErrorCode
COORDINATOR_ERRORS = {E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS}
REJOIN_ERRORS = {E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION}
CONNECTION_ERRORS = (ConnectionError, OSError, asyncio.TimeoutError, asyncio.IncompleteReadError)


class CoordinatorMoved(Exception):
    """Internal: the request must go to a re-discovered coordinator."""


@dataclass
class Ledger:
    """What the coordinators handed out, across fail-overs."""

    joined: dict[int, set[str]] = field(default_factory=dict)  # generation -> members told of it
    synced: dict[int, dict[str, tuple[int, ...]]] = field(default_factory=dict)  # gen -> member -> partitions

    def max_generation(self) -> int:
        return max(self.joined, default=0)

    def double_owned(self) -> dict[int, dict[int, list[str]]]:
        """``{generation: {partition: [members]}}`` of partitions assigned to
        more than one member of the same generation (empty when all is well)."""
        found: dict[int, dict[int, list[str]]] = {}
        for generation, by_member in self.synced.items():
            owners: dict[int, list[str]] = {}
            for member_id, partitions in by_member.items():
                for partition in partitions:
                    owners.setdefault(partition, []).append(member_id)
            twice = {p: sorted(m) for p, m in owners.items() if len(m) > 1}
            if twice:
                found[generation] = twice
        return found


def assign(member_ids, partitions) -> dict[str, bytes]:
    """Round-robin over sorted member ids: ``assign(["b", "a"], range(3))`` ->
    ``{"a": b"[0,2]", "b": b"[1]"}``."""
    ordered = sorted(member_ids)
    chosen: dict[str, list[int]] = {m: [] for m in ordered}
    for i, partition in enumerate(sorted(partitions)):
        chosen[ordered[i % len(ordered)]].append(partition)
    return {m: json.dumps(p, separators=(",", ":")).encode() for m, p in chosen.items()}


class Member:
    """One member of ``group``. ``bootstrap()`` gives the daemon addresses to
    ask FindCoordinator (called at each re-discovery, so a test can change it)."""

    def __init__(self, name: str, group: str, bootstrap: Callable[[], list[tuple[str, int]]], ledger: Ledger,
                 partitions=range(6), session_timeout_ms: int = 10_000, rebalance_timeout_ms: int = 10_000,
                 call_timeout_s: float = 20.0):
        self.name = name
        self.group = group
        self.bootstrap = bootstrap
        self.ledger = ledger
        self.partitions = list(partitions)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.call_timeout_s = call_timeout_s
        self.member_id = ""
        self.generation = -1
        self.assignment: tuple[int, ...] = ()
        self.needs_join = True
        self.confirmed = False  # a heartbeat in ``generation`` succeeded since the last sync
        self.coordinator_id: int | None = None
        self._client: WireClient | None = None

    def __repr__(self) -> str:
        return (f"Member({self.name}, id={self.member_id!r}, generation={self.generation}, "
                f"assignment={self.assignment}, needs_join={self.needs_join}, confirmed={self.confirmed})")

    # ------------------------------------------------------------ transport
    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def discover(self, deadline: float) -> None:
        """Connect to the coordinator some bootstrap daemon names."""
        await self.close()
        while True:
            for host, port in self.bootstrap():
                try:
                    finder = await asyncio.wait_for(WireClient.connect(host, port, self.name), 2.0)
                except CONNECTION_ERRORS:
                    continue
                try:
                    found = await finder.call(FindCoordinatorRequest(version=3, key=self.group, key_type=0),
                                              timeout_s=self.call_timeout_s)
                except CONNECTION_ERRORS:
                    continue
                finally:
                    await finder.close()
                if found.error_code != E.NONE:
                    continue
                try:
                    self._client = await asyncio.wait_for(WireClient.connect(found.host, found.port, self.name), 2.0)
                except CONNECTION_ERRORS:
                    continue  # e.g. the owner died and its session has not expired yet
                self.coordinator_id = found.node_id
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no coordinator found for {self.group} in time")
            await asyncio.sleep(0.2)

    async def call(self, request, deadline: float):
        """Send ``request`` to the coordinator; re-discover it on connection
        trouble and on the coordinator error codes, until ``deadline``."""
        while True:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: {type(request).__name__} not answered in time")
            if self._client is None:
                await self.discover(deadline)
            try:
                response = await self._client.call(request, timeout_s=self.call_timeout_s)
            except CONNECTION_ERRORS:
                await self.close()
                await asyncio.sleep(0.1)
                continue
            if _error_of(response) in COORDINATOR_ERRORS:
                await self.close()
                await asyncio.sleep(0.1)
                continue
            return response

    # ------------------------------------------------------------- requests
    def join_request(self) -> JoinGroupRequest:
        return JoinGroupRequest(
            version=5, group_id=self.group, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id, group_instance_id=None,
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=self.name.encode())])

    async def join(self, deadline: float):
        """JoinGroup until it succeeds (member-id handshake included); the
        successful response. Records the generation in the ledger."""
        while True:
            response = await self.call(self.join_request(), deadline)
            code = E(response.error_code)
            if code is E.MEMBER_ID_REQUIRED:
                self.member_id = response.member_id
            elif code is E.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            elif code is E.REBALANCE_IN_PROGRESS:
                await asyncio.sleep(0.1)
            elif code is E.NONE:
                self.member_id = response.member_id
                self.ledger.joined.setdefault(response.generation_id, set()).add(self.member_id)
                return response
            else:
                raise AssertionError(f"{self.name}: JoinGroup answered {code.name}")

    def sync_request(self, generation: int, assignments: dict[str, bytes]) -> SyncGroupRequest:
        return SyncGroupRequest(
            version=3, group_id=self.group, generation_id=generation, member_id=self.member_id,
            group_instance_id=None, assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in assignments.items()])

    async def join_and_sync(self, deadline: float) -> None:
        """One rebalance from this member's side: join, (lead,) sync. Leaves
        ``needs_join`` set if the coordinator asked for another round."""
        joined = await self.join(deadline)
        assignments = {}
        if joined.leader == self.member_id:
            assignments = assign([m.member_id for m in joined.members], self.partitions)
        synced = await self.call(self.sync_request(joined.generation_id, assignments), deadline)
        code = E(synced.error_code)
        if code is E.NONE:
            self.generation = joined.generation_id
            self.assignment = tuple(json.loads(synced.assignment or b"[]"))
            self.ledger.synced.setdefault(self.generation, {})[self.member_id] = self.assignment
            self.needs_join, self.confirmed = False, False
        elif code is E.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        elif code not in REJOIN_ERRORS:
            raise AssertionError(f"{self.name}: SyncGroup answered {code.name}")

    def heartbeat_request(self, generation: int | None = None) -> HeartbeatRequest:
        return HeartbeatRequest(version=3, group_id=self.group, member_id=self.member_id, group_instance_id=None,
                                generation_id=self.generation if generation is None else generation)

    async def heartbeat(self, deadline: float) -> ErrorCode:
        """One heartbeat; updates what this member must do next."""
        code = E((await self.call(self.heartbeat_request(), deadline)).error_code)
        if code is E.NONE:
            self.confirmed = True
        elif code in REJOIN_ERRORS:
            self.needs_join, self.confirmed = True, False
        elif code is E.UNKNOWN_MEMBER_ID:
            self.member_id, self.needs_join, self.confirmed = "", True, False
        else:
            raise AssertionError(f"{self.name}: Heartbeat answered {code.name}")
        return code

    async def commit(self, offsets: dict[int, int], deadline: float, topic: str = "orders") -> list[ErrorCode]:
        """OffsetCommit v7 of ``{partition: offset}`` in this member's generation."""
        request = OffsetCommitRequest(
            version=7, group_id=self.group, generation_id_or_member_epoch=self.generation,
            member_id=self.member_id, group_instance_id=None, topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                    OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
                    for p, o in sorted(offsets.items())])])
        response = await self.call(request, deadline)
        return [E(p.error_code) for t in response.topics for p in t.partitions]

    async def fetch(self, deadline: float) -> dict[tuple[str, int], int]:
        """OffsetFetch v5 of every committed offset of the group."""
        response = await self.call(OffsetFetchRequest(version=5, group_id=self.group, topics=None), deadline)
        assert response.error_code == E.NONE, response
        return {(t.name, p.partition_index): p.committed_offset for t in response.topics for p in t.partitions}

    async def leave(self, deadline: float) -> None:
        request = LeaveGroupRequest(version=3, group_id=self.group, members=[
            LeaveGroupRequest.MemberIdentity(member_id=self.member_id, group_instance_id=None)])
        response = await self.call(request, deadline)
        assert response.error_code == E.NONE, response
        self.member_id, self.generation, self.needs_join = "", -1, True


def _error_of(response) -> ErrorCode | None:
    code = getattr(response, "error_code", None)
    if code is None:  # OffsetCommit: per partition; a coordinator error is the same for all
        topics = getattr(response, "topics", None) or []
        codes = {p.error_code for t in topics for p in getattr(t, "partitions", [])}
        code = codes.pop() if len(codes) == 1 else None
    try:
        return None if code is None else E(code)
    except ValueError:
        return None


async def converge(members: list[Member], timeout_s: float = 90.0, heartbeat_interval_s: float = 0.2) -> int:
    """Drive every member (rejoining, re-discovering as needed) until all of
    them heartbeat successfully in one generation; return that generation."""
    deadline = time.monotonic() + timeout_s
    done = asyncio.Event()

    def settled() -> bool:
        generations = {m.generation for m in members}
        return len(generations) == 1 and all(not m.needs_join and m.confirmed for m in members)

    async def drive(member: Member) -> None:
        while not done.is_set():
            if member.needs_join:
                await member.join_and_sync(deadline)
            else:
                await member.heartbeat(deadline)
            if settled():
                done.set()
                return
            if not member.needs_join:
                await asyncio.sleep(heartbeat_interval_s)

    for member in members:  # a stable member must prove itself again in this round
        member.confirmed = False
    await asyncio.gather(*(drive(m) for m in members))
    return members[0].generation


async def close_all(members: list[Member]) -> None:
    for member in members:
        await member.close()
