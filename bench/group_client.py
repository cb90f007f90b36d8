"""The benchmark's Kafka client: one asyncio connection per group member.

Owns the client side of the wire (kafka-python encodes every request and
decodes every response, as ``tests/support/wire.py`` does with
``KafkaProtocol``) and a classic consumer-group member: JoinGroup / SyncGroup
/ Heartbeat / OffsetCommit / LeaveGroup with the range assignor over one
topic, the ConsumerProtocol subscription and assignment as payloads.

Rules:

1. The load generator must cost less than the servers it measures, so the
   hot loops send a :class:`RequestTemplate`: a request encoded once by
   kafka-python in which only the correlation id and marked int64 fields
   (committed offsets) are patched per call. Responses are always decoded in
   full by kafka-python and their correlation ids checked.
2. Requests may be pipelined on a connection; responses come back in order.
3. A member never hides an error: unexpected codes raise :class:`BenchError`,
   expected rebalance codes make it rejoin, as the Java consumer does.
4. The rebalance notice (``zkcoord/core/notice.py``) is used only where the
   server advertises it in ApiVersions, as zkcoord's own consumer does: a
   member with a ``notice`` connection keeps a heartbeat in flight on it
   besides its usual heartbeats. A Kafka broker does not advertise it, nor
   does a daemon's gateway (its ApiVersions carries the brokers' features),
   so against those :func:`open_notice` returns None and nothing changes.
"""

from __future__ import annotations

import asyncio
import collections
import io
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

from kafka.protocol.consumer.group import (
    HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, OffsetCommitRequest, SyncGroupRequest,
)
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest

from zkcoord.core import notice as rebalance_notice
from zkcoord.wire.messages import build_message

NONE, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 0, 14, 15, 16
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED = 22, 25, 27, 79
RETRY_JOIN = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, REBALANCE_IN_PROGRESS}
REJOIN = {ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS}

# What a Kafka 3.9 Java consumer sends, capped by what both peers serve.
PREFERRED_VERSIONS = {"FindCoordinator": 3, "JoinGroup": 9, "SyncGroup": 5, "Heartbeat": 4,
                      "LeaveGroup": 5, "OffsetCommit": 8}
_API_KEYS = {"FindCoordinator": 10, "JoinGroup": 11, "SyncGroup": 14, "Heartbeat": 12,
             "LeaveGroup": 13, "OffsetCommit": 8}
_CID_SENTINEL = 0x7EADBEEF
_CID_OFFSET = 8  # size prefix (4), api key (2), api version (2), then the correlation id


class BenchError(Exception):
    """The benchmark cannot go on (a server answered what it should not)."""


def _decode(frame: bytes, response_class, correlation_id: int):
    buffer = io.BytesIO(frame)
    header = response_class.parse_header(buffer)
    if header.correlation_id != correlation_id:
        raise BenchError(f"correlation id {header.correlation_id} answers request {correlation_id}")
    return response_class.decode(buffer)


def heartbeat_errors(response) -> list[int]:
    """A Heartbeat response's error codes."""
    return [response.error_code]


def commit_errors(response) -> list[int]:
    """An OffsetCommit response's error codes, one per partition."""
    return [p.error_code for t in response.topics for p in t.partitions]


@dataclass(frozen=True)
class Schedule:
    """When a load run's members send (``time.perf_counter`` instants, the
    system-wide monotonic clock on Linux: the same in every process)."""

    start: float
    measure_from: float  # latencies of requests sent from here on count
    end: float  # no request is sent from here on
    interval_s: float  # between one member's requests; 0: back to back
    members: int  # in the whole run: member ``index`` starts ``interval_s * index / members`` in

    @classmethod
    def from_now(cls, warmup_s: float, duration_s: float, members: int, paced_rate: int | None) -> "Schedule":
        start = time.perf_counter() + 0.05
        return cls(start, start + warmup_s, start + warmup_s + duration_s,
                   members / paced_rate if paced_rate else 0.0, members)


async def member_requests(conn: "KafkaConnection", template: "RequestTemplate", index: int, schedule: Schedule,
                          values: int, errors_of, errors: dict) -> list[float]:
    """Member ``index``'s requests on ``conn`` over ``schedule``: ``template``
    with its ``values`` sentinels set to 1, 2, 3... (offsets), one in flight
    at a time; the latencies of those sent after ``measure_from``, their
    nonzero error codes counted into ``errors``."""
    latencies, offset = [], 0
    interval = schedule.interval_s
    due = schedule.start + interval * index / schedule.members
    while True:
        now = time.perf_counter()
        if due > now:
            await asyncio.sleep(due - now)
            now = time.perf_counter()
        if now >= schedule.end:
            return latencies
        offset += 1
        response = await conn.call_template(template, [offset] * values)
        done = time.perf_counter()
        if now >= schedule.measure_from:
            latencies.append(done - now)
            for code in errors_of(response):
                if code != NONE:
                    errors[code] = errors.get(code, 0) + 1
        due = max(due + interval, done) if interval else 0.0


class KafkaConnection(asyncio.Protocol):
    """One TCP connection; ``await conn.call(request)`` returns the decoded response."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiting: collections.deque = collections.deque()  # (correlation id, response class, future)
        self._last_id = 0
        self._lost: BaseException | None = None
        self.peer: tuple[str, int] | None = None

    @classmethod
    async def open(cls, host: str, port: int, client_id: str, ssl_context=None, login=None) -> "KafkaConnection":
        """A connection (over TLS with ``ssl_context``), logged in with
        ``login`` (mechanism, user, password) when given."""
        tls = {} if ssl_context is None else {"ssl": ssl_context, "server_hostname": host}
        _, conn = await asyncio.get_running_loop().create_connection(lambda: cls(client_id), host, port, **tls)
        if login is not None:
            await sasl_login(conn, *login)
        return conn

    def connection_made(self, transport) -> None:
        self._transport = transport
        peer = transport.get_extra_info("peername")  # None: reset before it was made (a reconnect storm)
        self.peer = tuple(peer[:2]) if peer else ("?", 0)  # (host, port) connected to

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while len(buffer) >= 4:
            end = 4 + int.from_bytes(buffer[:4], "big")
            if len(buffer) < end:
                return
            frame = bytes(buffer[4:end])
            del buffer[:end]
            correlation_id, response_class, future = self._waiting.popleft()
            if future.done():
                continue
            try:
                future.set_result(_decode(frame, response_class, correlation_id))
            except Exception as exc:  # a bad response fails its caller
                future.set_exception(exc)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._lost = ConnectionError(f"connection closed by the server ({exc!r})")
        while self._waiting:
            future = self._waiting.popleft()[2]
            if not future.done():
                future.set_exception(self._lost)

    def _next_id(self) -> int:
        self._last_id = (self._last_id + 1) % 2**31
        return self._last_id

    def _send(self, data: bytes, response_class, correlation_id: int) -> asyncio.Future:
        if self._lost is not None:
            raise self._lost
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((correlation_id, response_class, future))
        self._transport.write(data)
        return future

    def call(self, request) -> asyncio.Future:
        correlation_id = self._next_id()
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        data = bytes(request.encode(framed=True, header=True))
        return self._send(data, request.header.get_response_class(), correlation_id)

    def call_template(self, template: "RequestTemplate", values: Sequence[int] = ()) -> asyncio.Future:
        correlation_id = self._next_id()
        return self._send(template.render(correlation_id, values), template.response_class, correlation_id)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class RequestTemplate:
    """A request encoded once; ``render`` patches the correlation id and the
    int64 fields that held ``sentinels`` (each must occur exactly once)."""

    def __init__(self, request, client_id: str, sentinels: Sequence[int] = ()) -> None:
        request.with_header(correlation_id=_CID_SENTINEL, client_id=client_id)
        self._data = bytes(request.encode(framed=True, header=True))
        if self._data[_CID_OFFSET:_CID_OFFSET + 4] != struct.pack(">i", _CID_SENTINEL):
            raise BenchError("the correlation id is not where request header v1/v2 puts it")
        self._positions = []
        for sentinel in sentinels:
            packed = struct.pack(">q", sentinel)
            position = self._data.find(packed)
            if position < 0 or self._data.find(packed, position + 1) >= 0:
                raise BenchError(f"sentinel {sentinel:#x} does not occur exactly once in the request")
            self._positions.append(position)
        self.response_class = request.header.get_response_class()

    def render(self, correlation_id: int, values: Sequence[int]) -> bytes:
        data = bytearray(self._data)
        struct.pack_into(">i", data, _CID_OFFSET, correlation_id)
        for position, value in zip(self._positions, values):
            struct.pack_into(">q", data, position, value)
        return bytes(data)


async def sasl_login(conn: KafkaConnection, mechanism: str, user: str, password: str) -> None:
    """SaslHandshake v1 and SaslAuthenticate v2, the client side driven by
    kafka-python's own SASL mechanism (what its clients send)."""
    from kafka.net.sasl.plain import SaslMechanismPlain
    from kafka.net.sasl.scram import SaslMechanismScram
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

    shaken = await conn.call(build_message(SaslHandshakeRequest, 1, mechanism=mechanism))
    if shaken.error_code != NONE:
        raise BenchError(f"SaslHandshake {mechanism}: error {shaken.error_code}")
    kind = SaslMechanismPlain if mechanism == "PLAIN" else SaslMechanismScram
    client = kind(sasl_plain_username=user, sasl_plain_password=password, sasl_mechanism=mechanism,
                  security_protocol="SASL_SSL")
    while not client.is_done():
        answer = await conn.call(build_message(SaslAuthenticateRequest, 2, auth_bytes=client.auth_bytes()))
        if answer.error_code != NONE:
            raise BenchError(f"SASL login of {user}: error {answer.error_code} {answer.error_message}")
        client.receive(answer.auth_bytes)


async def served_versions(conn: KafkaConnection) -> dict[int, tuple[int, int]]:
    """{api key: (min, max)} from an ApiVersions v3 request."""
    response = await conn.call(build_message(ApiVersionsRequest, 3, client_software_name="zkcoord-bench",
                                             client_software_version="1"))
    if response.error_code != NONE:
        raise BenchError(f"ApiVersions failed with error {response.error_code}")
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


async def open_notice(host: str, port: int, client_id: str) -> KafkaConnection | None:
    """A notice connection to the coordinator at (host, port), or None if it
    does not advertise the rebalance notice."""
    conn = await KafkaConnection.open(host, port, client_id)
    response = await conn.call(build_message(
        ApiVersionsRequest, 3, client_software_name=rebalance_notice.CLIENT_SOFTWARE_NAME, client_software_version="1"))
    if response.error_code == NONE and any(f.name == rebalance_notice.FEATURE
                                           for f in (response.supported_features or [])):
        return conn
    conn.close()
    return None


def common_versions(*served: dict[int, tuple[int, int]]) -> dict[str, int]:
    """The version of each API the benchmark uses: the preferred one, capped by every peer."""
    chosen = {}
    for name, preferred in PREFERRED_VERSIONS.items():
        key = _API_KEYS[name]
        low = max(s[key][0] for s in served)
        high = min([preferred] + [s[key][1] for s in served])
        if high < low:
            raise BenchError(f"{name}: the peers serve no common version")
        chosen[name] = high
    return chosen


async def find_coordinator(conn: KafkaConnection, group: str, version: int,
                           timeout_s: float = 60.0) -> tuple[int, str, int]:
    """The coordinator's (node id, host, port); retries while the coordinator is loading.

    A daemon's own listener names itself by its node id; its gateway names the
    owner daemon's gateway, node id 2**30 + the daemon's."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = await conn.call(build_message(FindCoordinatorRequest, version, key=group, key_type=0))
        if response.error_code == NONE:
            return response.node_id, response.host, response.port
        if time.monotonic() > deadline:
            raise BenchError(f"FindCoordinator({group}) kept failing with error {response.error_code}")
        await asyncio.sleep(0.2)


def range_assignment(member_ids: Sequence[str], topic: str, partitions: int) -> dict[str, bytes]:
    """Kafka's range assignor for one topic, encoded as ConsumerProtocolAssignment v0.

    >>> sorted(len(b) for b in range_assignment(["b", "a", "c"], "t", 7).values())
    [27, 31, 31]

    ("a" gets 0-2, "b" 3-4, "c" 5-6; 4 bytes per partition.)
    """
    ordered = sorted(member_ids)
    share, extra = divmod(partitions, len(ordered))
    out, start = {}, 0
    for i, member_id in enumerate(ordered):
        count = share + (1 if i < extra else 0)
        assigned = [ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=list(range(start, start + count)))]
        out[member_id] = bytes(ConsumerProtocolAssignment(version=0, assigned_partitions=assigned,
                                                          user_data=None).encode())
        start += count
    return out


class Member:
    """One classic consumer-group member on its own connection."""

    def __init__(self, conn: KafkaConnection, group: str, topic: str, partitions: int,
                 versions: dict[str, int], session_timeout_ms: int, rebalance_timeout_ms: int,
                 notice: KafkaConnection | None = None) -> None:
        self.conn, self.group, self.topic, self.partitions = conn, group, topic, partitions
        self.notice = notice  # a held-heartbeat connection (rule 4), None: heartbeats only
        self.versions = versions
        self.session_timeout_ms, self.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        self.subscription = bytes(ConsumerProtocolSubscription(version=0, topics=[topic], user_data=None).encode())
        self.member_id = ""
        self.generation = -1
        self.leader_id = ""
        self.join_members: list[tuple[str, bytes]] = []
        self.assignment: list[int] = []
        self.synced_generation = -1
        self.stable_since: float | None = None  # last successful SyncGroup, None while rejoining
        self.events: list[tuple[str, float, int]] = []  # (what, perf_counter, generation)

    def _mark(self, what: str) -> None:
        self.events.append((what, time.perf_counter(), self.generation))

    async def join(self) -> None:
        while True:
            response = await self.conn.call(build_message(
                JoinGroupRequest, self.versions["JoinGroup"], group_id=self.group,
                session_timeout_ms=self.session_timeout_ms, rebalance_timeout_ms=self.rebalance_timeout_ms,
                member_id=self.member_id, group_instance_id=None, protocol_type="consumer",
                protocols=[{"name": "range", "metadata": self.subscription}], reason=None))
            code = response.error_code
            if code == MEMBER_ID_REQUIRED:
                self.member_id = response.member_id
                continue
            if code == NONE:
                self.generation, self.leader_id = response.generation_id, response.leader
                self.join_members = [(m.member_id, bytes(m.metadata)) for m in response.members]
                self._mark("joined")
                return
            if code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
            elif code not in RETRY_JOIN:
                raise BenchError(f"JoinGroup {self.group}: error {code}")
            await asyncio.sleep(0.05)

    async def sync(self) -> int:
        assignments = []
        if self.member_id == self.leader_id:
            for member_id, metadata in self.join_members:  # as a leader does: read each subscription
                ConsumerProtocolSubscription.decode(metadata)
            encoded = range_assignment([m for m, _ in self.join_members], self.topic, self.partitions)
            assignments = [{"member_id": m, "assignment": a} for m, a in encoded.items()]
        response = await self.conn.call(build_message(
            SyncGroupRequest, self.versions["SyncGroup"], group_id=self.group, generation_id=self.generation,
            member_id=self.member_id, group_instance_id=None, protocol_type="consumer", protocol_name="range",
            assignments=assignments))
        if response.error_code == NONE:
            decoded = ConsumerProtocolAssignment.decode(bytes(response.assignment))
            self.assignment = [p for tp in decoded.assigned_partitions for p in tp.partitions]
            self.synced_generation = self.generation
            self._mark("synced")
        return response.error_code

    async def heartbeat(self) -> int:
        return (await self.conn.call(self.heartbeat_request())).error_code

    def heartbeat_request(self):
        return build_message(HeartbeatRequest, self.versions["Heartbeat"], group_id=self.group,
                             generation_id=self.generation, member_id=self.member_id, group_instance_id=None)

    def heartbeat_template(self) -> RequestTemplate:
        return RequestTemplate(self.heartbeat_request(), self.conn.client_id)

    def commit_template(self, sentinels: Sequence[int], client_id: str | None = None) -> RequestTemplate:
        """OffsetCommit of this member's partitions (one per sentinel) at this generation
        (``client_id``: another connection's; its own by default)."""
        if len(sentinels) > len(self.assignment):
            raise BenchError(f"{self.member_id} owns {len(self.assignment)} partitions, cannot commit "
                             f"{len(sentinels)}")
        partitions = [{"partition_index": p, "committed_offset": s, "committed_leader_epoch": -1,
                       "committed_metadata": ""} for p, s in zip(self.assignment, sentinels)]
        request = build_message(
            OffsetCommitRequest, self.versions["OffsetCommit"], group_id=self.group,
            generation_id_or_member_epoch=self.generation, member_id=self.member_id, group_instance_id=None,
            retention_time_ms=-1, topics=[{"name": self.topic, "partitions": partitions}])
        return RequestTemplate(request, client_id or self.conn.client_id, sentinels)

    async def maintain(self, stop: asyncio.Event, interval_s: float) -> None:
        """Join, sync, then heartbeat every ``interval_s`` and rejoin when told, until ``stop``."""
        rejoin = self.synced_generation < 0
        held: asyncio.Future | None = None  # the heartbeat in flight on the notice connection
        try:
            while not stop.is_set():
                if rejoin:
                    if held is not None:  # answered for the old generation; nobody waits for it
                        held.add_done_callback(_retrieve)
                        held = None
                    self.stable_since = None
                    await self.join()
                    code = await self.sync()
                    if code == NONE:
                        rejoin, self.stable_since = False, time.perf_counter()
                    elif code not in REJOIN:
                        raise BenchError(f"SyncGroup {self.group}: error {code}")
                    elif code == UNKNOWN_MEMBER_ID:
                        self.member_id = ""
                    continue
                if self.notice is None:
                    await asyncio.sleep(interval_s)
                    code = await self.heartbeat()
                else:
                    if held is None:
                        held = self.notice.call(self.heartbeat_request())
                    done, _ = await asyncio.wait({held}, timeout=interval_s)
                    if done:
                        code, held = held.result().error_code, None
                    else:
                        code = await self.heartbeat()
                if code == NONE:
                    continue
                if code not in REJOIN:
                    raise BenchError(f"Heartbeat {self.group}: error {code}")
                self._mark("noticed")
                rejoin, self.stable_since = True, None
                if code == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
        finally:
            if held is not None:  # still in flight when the member stopped
                held.add_done_callback(_retrieve)


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


async def leave_all(members: Sequence[Member]) -> None:
    """One batched LeaveGroup per group, so no session expiry fires later."""
    by_group: dict[str, list[Member]] = collections.defaultdict(list)
    for member in members:
        if member.member_id:
            by_group[member.group].append(member)
    for group, group_members in by_group.items():
        first = group_members[0]
        await first.conn.call(build_message(
            LeaveGroupRequest, first.versions["LeaveGroup"], group_id=group, member_id="",
            members=[{"member_id": m.member_id, "group_instance_id": None, "reason": "benchmark done"}
                     for m in group_members]))
