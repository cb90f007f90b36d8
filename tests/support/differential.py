"""Harness of the differential test (``tests/integration/test_differential.py``):
run one request sequence against a coordinator and keep a transcript that
can be compared with another coordinator's.

A :class:`Run` is one scenario on one target (the Kafka broker or a zkcoord
daemon). Every response a scenario awaits through :meth:`Run.call` or
:meth:`Run.wait` is reduced to a *view* (a tuple of the fields both
coordinators must agree on) and appended to the transcript in program order,
so concurrent requests still give a deterministic transcript.

Member ids differ between coordinators (they end in a random UUID), so a
view never holds one: each generated id becomes an alias, ``<prefix>#<n>``,
``n`` counting distinct ids in order of first appearance and ``prefix``
being what comes before the UUID (the client id, or the group instance id
for static members, on Kafka). Ids a scenario makes up (``"ghost"``) are kept
as they are. Two transcripts are equal when both coordinators answered the
same errors, generations, protocols, states, and the same *structure* of
members (who leads, who is who across responses, how many).

``Run.expect`` records a fact the scenario relies on (for instance "the
second join asks for a member id") without stopping the run, so a mismatch
still shows the whole transcript.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable

from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.support.wire import WireClient

UNKNOWN_TOPIC_OR_PARTITION = 3
NONE, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 0, 14, 15, 16
ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID = 22, 23, 25
INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS = 26, 27
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID = 68, 69, 79, 82
NOT_READY = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}

SESSION_MS = 30_000
REBALANCE_MS = 30_000


def subscription(*topics: str) -> bytes:
    """Consumer-protocol metadata (ConsumerProtocolSubscription v0). It must
    be well formed: Kafka 3.9 parses it when a "consumer" group completes a
    join phase, and on bytes it cannot parse the join phase never ends
    (``computeSubscribedTopics`` throws out of ``onCompleteJoin``)."""
    return bytes(ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=None).encode())


SUBSCRIPTION = subscription("orders")
SUBSCRIPTION_2 = subscription("orders", "payments")
RANGE = (("range", SUBSCRIPTION),)
READY_TIMEOUT_S = 60.0
POLL_S = 0.05

_GENERATED_ID = re.compile(r"(.*)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# Kafka's Uuid.toString() (22 characters of URL-safe base64): the member ids of KIP-848's
# consumer groups (ConsumerGroupHeartbeat v0, a classic member joining one); aliased "uuid#<n>".
_UUID_ID = re.compile(r"[A-Za-z0-9_-]{22}")


class Run:
    """One scenario against one coordinator, and its transcript."""

    def __init__(self, target: str, bootstrap: tuple[str, int], group: str, topic: str):
        self.target = target
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.steps: list[tuple[str, object]] = []
        self.surprises: list[str] = []
        self._aliases: dict[str, str] = {}
        self._clients: list[WireClient] = []
        self._ready: set[str] = set()

    # -- connections -------------------------------------------------------
    async def client(self, group: str | None = None, client_id: str = "c") -> WireClient:
        """A new connection to ``group``'s coordinator, found with
        FindCoordinator v3 through the bootstrap address (retried while the
        coordinator is not ready: Kafka creates its offsets topic lazily)."""
        group = group or self.group
        finder = await WireClient.connect(*self.bootstrap, client_id)
        try:
            found = await _until(lambda: finder.call(
                FindCoordinatorRequest(version=3, key=group, key_type=0)),
                lambda r: r.error_code not in NOT_READY, f"{self.target}: FindCoordinator {group}")
        finally:
            await finder.close()
        assert found.error_code == NONE, (self.target, found)
        client = await WireClient.connect(found.host, found.port, client_id)
        self._clients.append(client)
        if group not in self._ready:  # the coordinator may still load the group's partition
            await _until(lambda: client.call(DescribeGroupsRequest(version=0, groups=[group])),
                         lambda r: r.groups[0].error_code not in NOT_READY, f"{self.target}: load {group}")
            self._ready.add(group)
        return client

    async def close(self) -> None:
        for client in self._clients:
            await client.close()

    # -- the transcript ------------------------------------------------------
    async def call(self, label: str, client: WireClient, request, *, expect: int | None = None):
        """Send, wait, record; ``expect``: the error code the scenario relies on."""
        response = await client.call(request)
        await self.prepare(response)
        self.record(label, response)
        if expect is not None:
            self.expect(label, error_of(response), expect)
        return response

    def send(self, client: WireClient, request) -> asyncio.Future:
        """Send without waiting (a request the coordinator will park)."""
        return asyncio.ensure_future(client.call(request))

    async def wait(self, label: str, pending: asyncio.Future):
        response = await pending
        await self.prepare(response)
        return self.record(label, response)

    async def prepare(self, response) -> None:
        """Before a response is viewed: learn what its view needs (a subclass
        looks up topic names)."""

    def record(self, label: str, response):
        self.steps.append((label, self.view(response)))
        return response

    def expect(self, label: str, actual: object, wanted: object) -> None:
        if actual != wanted:
            self.surprises.append(f"{label}: got {actual!r}, expected {wanted!r}")

    def alias(self, member_id: str | None) -> str | None:
        if not member_id:
            return member_id
        match = _GENERATED_ID.fullmatch(member_id)
        if match is None and _UUID_ID.fullmatch(member_id) is None:
            return member_id
        if member_id not in self._aliases:
            prefix = match.group(1) if match is not None else "uuid"
            self._aliases[member_id] = f"{prefix}#{len(self._aliases) + 1}"
        return self._aliases[member_id]

    def _alias_new(self, members, key) -> None:
        """Alias the ids first seen in a member list in the order of ``key``
        (instance id, client id), not in the coordinator's hash-map order."""
        for m in sorted(members, key=key):
            self.alias(m.member_id)

    def view(self, r) -> object:
        kind = type(r).__name__
        a = self.alias
        if kind == "JoinGroupResponse":
            a(r.leader), a(r.member_id)
            self._alias_new(r.members, lambda m: (m.group_instance_id or "", bytes(m.metadata)))
            members = sorted((a(m.member_id), m.group_instance_id, bytes(m.metadata)) for m in r.members)
            return ("join", r.error_code, r.generation_id, r.protocol_type, r.protocol_name,
                    a(r.leader), a(r.member_id), r.skip_assignment, tuple(members))
        if kind == "SyncGroupResponse":
            return ("sync", r.error_code, r.protocol_type, r.protocol_name, bytes(r.assignment))
        if kind == "HeartbeatResponse":
            return ("heartbeat", r.error_code)
        if kind == "LeaveGroupResponse":
            return ("leave", r.error_code, tuple((a(m.member_id), m.group_instance_id, m.error_code)
                                                for m in (r.members or ())))
        if kind == "OffsetCommitResponse":
            return ("commit", tuple(sorted((t.name, p.partition_index, p.error_code)
                                           for t in r.topics for p in t.partitions)))
        if kind == "OffsetFetchResponse":
            return ("fetch", r.error_code, _fetched(r.topics))
        if kind == "DescribeGroupsResponse":
            for g in r.groups:
                self._alias_new(g.members, lambda m: (m.group_instance_id or "", m.client_id))
            return ("describe", tuple(
                (g.error_code, g.group_id, g.group_state, g.protocol_type, g.protocol_data, tuple(sorted(
                    (a(m.member_id), m.group_instance_id, m.client_id, m.client_host,
                     bytes(m.member_metadata), bytes(m.member_assignment)) for m in g.members)))
                for g in r.groups))
        if kind == "DeleteGroupsResponse":
            return ("delete", tuple((x.group_id, x.error_code) for x in r.results))
        raise AssertionError(f"no view for {kind}")


def error_of(response) -> int:
    """The one error code of a response (a commit's, if all its partitions agree)."""
    kind = type(response).__name__
    if kind == "OffsetCommitResponse":
        codes = {p.error_code for t in response.topics for p in t.partitions}
        return codes.pop() if len(codes) == 1 else -999
    if kind == "DeleteGroupsResponse":
        return response.results[0].error_code
    if kind == "DescribeGroupsResponse":
        return response.groups[0].error_code
    return response.error_code


def _fetched(topics) -> tuple:
    return tuple(sorted((t.name, p.partition_index, p.committed_offset, p.metadata, p.error_code)
                        for t in (topics or ()) for p in t.partitions))


async def _until(call, done, what: str):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_TIMEOUT_S
    while True:
        response = await call()
        if done(response):
            return response
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not ready after {READY_TIMEOUT_S} s: {response}")
        await asyncio.sleep(0.2)


def diff(expected: list, actual: list, names: tuple[str, str] = ("kafka", "zkcoord")) -> str:
    """The steps where two transcripts differ, side by side."""
    lines = []
    for i in range(max(len(expected), len(actual))):
        left = expected[i] if i < len(expected) else None
        right = actual[i] if i < len(actual) else None
        if left != right:
            lines.append(f"step {i}:\n  {names[0]:8} {left}\n  {names[1]:8} {right}")
    return "\n".join(lines)


# -- requests --------------------------------------------------------------------

def join(group: str, member_id: str = "", *, version: int = 5, instance: str | None = None,
         protocols: Iterable[tuple[str, bytes]] = RANGE, protocol_type: str = "consumer",
         session_ms: int = SESSION_MS, rebalance_ms: int = REBALANCE_MS) -> JoinGroupRequest:
    return JoinGroupRequest(
        version=version, group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
        member_id=member_id, group_instance_id=instance, protocol_type=protocol_type, reason=None,
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols])


def sync(group: str, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, *,
         version: int = 5, instance: str | None = None, protocol_type: str | None = "consumer",
         protocol_name: str | None = "range") -> SyncGroupRequest:
    """SyncGroup; from v5 it carries the protocol type and name as clients
    send them (Kafka refuses a v5 request without them)."""
    return SyncGroupRequest(
        version=version, group_id=group, generation_id=generation, member_id=member_id,
        group_instance_id=instance, protocol_type=protocol_type, protocol_name=protocol_name,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=b)
                     for m, b in (assignments or {}).items()])


def heartbeat(group: str, member_id: str, generation: int, *, version: int = 4,
              instance: str | None = None) -> HeartbeatRequest:
    return HeartbeatRequest(version=version, group_id=group, generation_id=generation,
                            member_id=member_id, group_instance_id=instance)


def leave(group: str, *members: tuple[str, str | None], version: int = 3) -> LeaveGroupRequest:
    if version < 3:
        (member_id, _), = members
        return LeaveGroupRequest(version=version, group_id=group, member_id=member_id)
    return LeaveGroupRequest(version=version, group_id=group, members=[
        LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i, reason=None) for m, i in members])


def commit(group: str, topic: str, offsets: dict[int, int], *, member_id: str = "", generation: int = -1,
           instance: str | None = None, version: int = 7) -> OffsetCommitRequest:
    Topic = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(
        version=version, group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
        group_instance_id=instance, retention_time_ms=-1, topics=[Topic(name=topic, partitions=[
            Topic.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                               committed_metadata=f"m{p}") for p, o in offsets.items()])])


def fetch(group: str, topic: str | None, partitions: Iterable[int] = (), *,
          version: int = 5) -> OffsetFetchRequest:
    topics = None if topic is None else [
        OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=list(partitions))]
    return OffsetFetchRequest(version=version, group_id=group, topics=topics, require_stable=False)


def describe(*groups: str, version: int = 5) -> DescribeGroupsRequest:
    return DescribeGroupsRequest(version=version, groups=list(groups), include_authorized_operations=False)


def delete(*groups: str, version: int = 2) -> DeleteGroupsRequest:
    return DeleteGroupsRequest(version=version, groups_names=list(groups))


# -- flows shared by scenarios -----------------------------------------------------

async def join_new_member(run: Run, client: WireClient, label: str, *, version: int = 5,
                          group: str | None = None, **kw):
    """A dynamic member joins; from v4 first through MEMBER_ID_REQUIRED. The
    final JoinGroup is sent without waiting and returned pending."""
    group = group or run.group
    member_id = ""
    if version >= 4:
        asked = await run.call(f"{label}: join without id", client, join(group, version=version, **kw))
        run.expect(f"{label}: member id required", asked.error_code, MEMBER_ID_REQUIRED)
        member_id = asked.member_id
    return run.send(client, join(group, member_id, version=version, **kw))


async def until_rebalancing(run: Run, label: str, client: WireClient, member_id: str, generation: int,
                            *, version: int = 4, instance: str | None = None, limit_s: float = 10.0):
    """Heartbeat every 50 ms until the coordinator answers anything but NONE
    (it has seen what starts a rebalance), for at most ``limit_s``; only the
    last answer is recorded."""
    for _ in range(int(limit_s / POLL_S)):
        answer = await client.call(heartbeat(run.group, member_id, generation, version=version,
                                             instance=instance))
        if answer.error_code != NONE:
            break
        await asyncio.sleep(POLL_S)
    return run.record(label, answer)


async def stable_group(run: Run, size: int, *, version: int = 5, generation: int = 0,
                       **join_kw) -> list[tuple[WireClient, str]]:
    """Members join one after another (no initial delay: each join ends a
    join phase, each later one starts a rebalance) into a group at
    ``generation``; returns (client, member id) of each member of the final,
    Stable generation ``generation + size``."""
    g = run.group
    members: list[tuple[WireClient, str]] = []
    for n in range(1, size + 1):
        client = await run.client(client_id=f"c{n}")
        pending = await join_new_member(run, client, f"member {n}", version=version, **join_kw)
        if members:
            leader_client, leader_id = members[0]
            await until_rebalancing(run, f"member 1 heartbeat sees member {n}", leader_client, leader_id,
                                    generation + n - 1)
            rejoins = [run.send(c, join(g, mid, version=version, **join_kw)) for c, mid in members]
            for i, rejoin in enumerate(rejoins, 1):
                rejoined = await run.wait(f"member {i} rejoined for generation {n}", rejoin)
                run.expect(f"member {i} rejoined", rejoined.generation_id, generation + n)
        joined = await run.wait(f"member {n} joined", pending)
        run.expect(f"member {n} generation", joined.generation_id, generation + n)
        members.append((client, joined.member_id))
    leader_client, leader_id = members[0]
    final = generation + size
    followers = [run.send(c, sync(g, mid, final)) for c, mid in members[1:]]
    await run.call("leader syncs", leader_client, sync(
        g, leader_id, final, {mid: f"assignment-{i}".encode() for i, (_, mid) in enumerate(members, 1)}))
    for i, pending in enumerate(followers, 2):
        await run.wait(f"member {i} synced", pending)
    return members
