"""The benchmark's KIP-848 client: consumer-protocol members on the wire.

Owns a ConsumerGroupHeartbeat member that behaves as Kafka 4.4's Java
consumer does toward its coordinator, over :class:`group_client.KafkaConnection`
(one connection per member; requests encoded and responses decoded by the
classes zkcoord generated from Kafka's JSON, ``zkcoord.schemas``).

Rules (Kafka's ``ConsumerHeartbeatRequestManager`` and
``ConsumerMembershipManager``):

1. A member makes its own id (v1: ``Uuid.randomUuid().toString()``) and
   joins with epoch 0, sending every field. Later heartbeats send only what
   changed since the last one sent: the owned partitions when the member's
   assignment changed, nothing else (null fields); rebalance time-out -1.
2. An answer's assignment, when it differs from what the member owns,
   replaces it at once (revoked partitions released, new ones taken: no
   processing to wait for), and the next heartbeat goes out immediately,
   reporting the partitions now owned: a revocation is acknowledged right
   after it is applied. An assignment equal to what it owns changes nothing.
3. Otherwise the next heartbeat is due ``heartbeat_interval_ms`` (the
   coordinator's answer) after the last answer. A benchmark may reschedule
   the next one (:meth:`ConsumerMember.schedule`), so that rounds on two
   coordinators see the same heartbeat phases, or heartbeat faster while a
   group is being set up (``fast_interval_s``; never while measuring).
4. FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID make it drop its partitions
   and join again (counted in ``fenced``); a coordinator loading or not
   available is asked again every 0.1 s for up to 30 s (counted in
   ``retries``); any other error is a :class:`group_client.BenchError`.

What each member knows (its epoch, its partitions, when either last
changed) is everything the benchmark's completion checks read:
:func:`settled` says when a group is stable and every member owns its share.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence

from group_client import NONE, BenchError, KafkaConnection, RequestTemplate
from zkcoord.schemas import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from zkcoord.wire.messages import build_message

CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
PREFERRED_HEARTBEAT_VERSION = 1  # Kafka 4.4's client
UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH = 25, 110
REJOIN = {UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH}
# Asked again after RETRY_S, as Kafka's client does (it would look the coordinator up again for the
# last two; the benchmark's coordinators do not move, and the errors are counted in ``retries``).
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
RETRY_S, RETRY_FOR_S = 0.1, 30.0
LEAVE_EPOCH = -1
ERROR_NAMES = {14: "COORDINATOR_LOAD_IN_PROGRESS", 15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR",
               25: "UNKNOWN_MEMBER_ID", 110: "FENCED_MEMBER_EPOCH", 111: "UNRELEASED_INSTANCE_ID",
               112: "UNSUPPORTED_ASSIGNOR", 42: "INVALID_REQUEST", 69: "GROUP_ID_NOT_FOUND",
               81: "GROUP_MAX_SIZE_REACHED", 35: "UNSUPPORTED_VERSION"}


def error_name(code: int) -> str:
    return f"{ERROR_NAMES.get(code, 'error')} ({code})"


def new_member_id() -> str:
    """What Kafka's ``Uuid.randomUuid().toString()`` looks like: 22 characters
    of URL-safe base64, not starting with '-'."""
    import base64

    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def heartbeat_version(served: dict[int, tuple[int, int]], where: str) -> int:
    """The ConsumerGroupHeartbeat version to use with a server ({api key: (min, max)})."""
    if CONSUMER_GROUP_HEARTBEAT not in served:
        raise BenchError(f"{where} does not serve ConsumerGroupHeartbeat (API 68): is the consumer protocol on?")
    low, high = served[CONSUMER_GROUP_HEARTBEAT]
    version = min(high, PREFERRED_HEARTBEAT_VERSION)
    if version < low:
        raise BenchError(f"{where} serves ConsumerGroupHeartbeat v{low}-v{high}, none the benchmark speaks")
    return version


class ConsumerMember:
    """One consumer-protocol member on its own connection (the module's rules)."""

    def __init__(self, conn: KafkaConnection, group: str, topics: Sequence[str], version: int,
                 rebalance_timeout_ms: int, name: str = "") -> None:
        self.conn, self.group, self.topics, self.version = conn, group, list(topics), version
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.name = name
        self.member_id = new_member_id()
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.interval_s: float | None = None  # the coordinator's heartbeat interval, once told
        self.fast_interval_s: float | None = None  # set-up only: heartbeat at most this far apart
        self.changed_at = 0.0  # perf_counter of the answer that last changed the epoch or the partitions
        self.fenced = 0
        self.retries = 0
        self.heartbeats = 0
        self.last_latency_s = 0.0
        # with keep_log: (sent, answered, kind, epoch, partitions owned before, after) per heartbeat
        self.log: list[tuple[float, float, str, int, int, int]] = []
        self.keep_log = False
        self._sent_owned: dict | None = None  # the partitions last reported; None: report them next time
        self._ack_now = False  # the assignment changed: heartbeat at once
        self._next_due = 0.0
        self._pinned: float | None = None  # a heartbeat the benchmark scheduled (rule 3)
        self._wake = asyncio.Event()

    # -- one heartbeat -------------------------------------------------------------------
    @property
    def joining(self) -> bool:
        return self.epoch == 0

    @property
    def acknowledging(self) -> bool:
        """Its partitions changed and the coordinator has not heard so yet (rule 2)."""
        return self._ack_now

    def owned_count(self) -> int:
        return sum(len(p) for p in self.owned.values())

    def request(self, epoch: int | None = None):
        """The next heartbeat as the Java consumer builds it (rule 1)."""
        joining = self.epoch == 0 if epoch is None else epoch == 0
        owned = None
        if joining or self._sent_owned != self.owned:
            owned = [{"topic_id": t, "partitions": sorted(p)} for t, p in self.owned.items() if p]
        return build_message(
            ConsumerGroupHeartbeatRequest, self.version, group_id=self.group, member_id=self.member_id,
            member_epoch=self.epoch if epoch is None else epoch, instance_id=None, rack_id=None,
            rebalance_timeout_ms=self.rebalance_timeout_ms if joining else -1,
            subscribed_topic_names=self.topics if joining else None, subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=owned)

    def heartbeat_template(self) -> RequestTemplate:
        """A steady member's heartbeat (nothing changed: every optional field null), encoded once."""
        if self.joining or self._sent_owned != self.owned:
            raise BenchError(f"member {self.name} is not steady: it still has something to report")
        return RequestTemplate(self.request(), self.conn.client_id)

    async def heartbeat(self) -> str:
        """Send the next heartbeat and take its answer; what it did:
        ``join``, ``assigned`` (the partitions changed), ``epoch`` (only the
        epoch moved), ``beat`` (nothing changed) or ``fenced``."""
        self._ack_now = False
        request = self.request()
        reported = None if request.topic_partitions is None else dict(self.owned)
        before = self.owned_count()
        sent = time.perf_counter()
        response = await self.conn.call(request)
        while response.error_code in RETRIABLE:
            self.retries += 1
            if time.perf_counter() - sent > RETRY_FOR_S:
                raise BenchError(f"ConsumerGroupHeartbeat of {self.name} in {self.group}: "
                                 f"{error_name(response.error_code)} for {RETRY_FOR_S:g} s")
            await asyncio.sleep(RETRY_S)
            response = await self.conn.call(request)
        answered = time.perf_counter()
        self.heartbeats += 1
        self.last_latency_s = answered - sent
        kind = self._take(response, reported, answered)
        if self.keep_log:
            self.log.append((sent, answered, kind, self.epoch, before, self.owned_count()))
        return kind

    def _take(self, response, reported: dict | None, now: float) -> str:
        code = response.error_code
        if code in REJOIN:
            self.fenced += 1
            self.epoch, self.owned, self._sent_owned, self._ack_now = 0, {}, None, True
            self.changed_at = now
            return "fenced"
        if code != NONE:
            raise BenchError(f"ConsumerGroupHeartbeat of {self.name or self.member_id} in {self.group}: "
                             f"{error_name(code)} {response.error_message or ''}".rstrip())
        was_joining, old_epoch = self.epoch == 0, self.epoch
        if reported is not None:
            self._sent_owned = reported
        if response.member_id:
            self.member_id = response.member_id
        self.epoch = response.member_epoch
        if response.heartbeat_interval_ms > 0:
            self.interval_s = response.heartbeat_interval_ms / 1000
        self._next_due = self._due_after(now)
        kind = "join" if was_joining else ("epoch" if self.epoch != old_epoch else "beat")
        if response.assignment is not None:
            new = {t.topic_id: frozenset(t.partitions) for t in response.assignment.topic_partitions if t.partitions}
            if new != self.owned:
                self.owned, self._ack_now, kind = new, True, "assigned"  # rule 2
        if kind != "beat":
            self.changed_at = now
        return kind

    def _due_after(self, now: float) -> float:
        """The next heartbeat's time after an answer at ``now``: the one the
        benchmark scheduled if still ahead, else one interval on."""
        if self._pinned is not None and self._pinned > now:
            return self._pinned
        self._pinned = None
        interval = self.interval_s if self.interval_s is not None else 5.0
        return now + (min(interval, self.fast_interval_s) if self.fast_interval_s else interval)

    # -- the heartbeat loop -----------------------------------------------------------
    def schedule(self, at: float) -> None:
        """Send the next heartbeat at perf_counter ``at`` (unless an acknowledgement is due first)."""
        self._next_due = self._pinned = at
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Heartbeat by the module's rules until ``stop`` (set it, then :meth:`wake`)."""
        while not stop.is_set():
            if not self._ack_now and not self.joining:
                delay = self._next_due - time.perf_counter()
                if delay > 0:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), delay)
                    except asyncio.TimeoutError:
                        pass
                    continue
            await self.heartbeat()

    async def leave(self) -> None:
        """Epoch -1: the member leaves the group (its answer is not checked: the
        member may have been removed already)."""
        if self.epoch > 0:
            await self.conn.call(self.request(epoch=LEAVE_EPOCH))
        self.epoch, self.owned = LEAVE_EPOCH, {}


# -- a group's state, as its members know it ----------------------------------------------------------

def settled(members: Sequence[ConsumerMember], partitions: int) -> bool:
    """Every member at one epoch, every one of ``partitions`` owned by exactly
    one member, and the shares balanced (they differ by at most one): the
    uniform assignor's target for one topic, reached."""
    if not members:
        return False
    epochs = {m.epoch for m in members}
    if len(epochs) != 1 or 0 in epochs:
        return False
    counts = [m.owned_count() for m in members]
    if sum(counts) != partitions or max(counts) - min(counts) > 1:
        return False
    seen: set = set()
    for member in members:
        for topic_id, owned in member.owned.items():
            for p in owned:
                seen.add((topic_id, p))
    return len(seen) == partitions


def settled_at(members: Sequence[ConsumerMember]) -> float:
    """When the last member reached its present state (perf_counter)."""
    return max(m.changed_at for m in members)


async def describe(conn: KafkaConnection, group: str, version: int = 0):
    """ConsumerGroupDescribe of one group: the decoded group entry."""
    response = await conn.call(build_message(ConsumerGroupDescribeRequest, version, group_ids=[group],
                                              include_authorized_operations=False))
    (entry,) = response.groups
    if entry.error_code != NONE:
        raise BenchError(f"ConsumerGroupDescribe {group}: {error_name(entry.error_code)} {entry.error_message or ''}")
    return entry


def check_described(entry, members: Sequence[ConsumerMember]) -> list[str]:
    """What ConsumerGroupDescribe says that the members' own view does not:
    a member behind the assignment epoch, an assignment that is not its
    target, a member the coordinator does not know. Empty: all agree."""
    problems = []
    by_id = {m.member_id: m for m in members}
    for d in entry.members:
        member = by_id.pop(d.member_id, None)
        current = {(t.topic_id, p) for t in d.assignment.topic_partitions for p in t.partitions}
        target = {(t.topic_id, p) for t in d.target_assignment.topic_partitions for p in t.partitions}
        if member is None:
            problems.append(f"member {d.member_id} unknown to the benchmark")
            continue
        if d.member_epoch != entry.assignment_epoch:
            problems.append(f"{member.name}: epoch {d.member_epoch} behind the assignment epoch "
                            f"{entry.assignment_epoch}")
        if current != target:
            problems.append(f"{member.name}: owns {len(current)} partitions, its target has {len(target)}")
        mine = {(t, p) for t, ps in member.owned.items() for p in ps}
        if mine != current:
            problems.append(f"{member.name}: the coordinator's view of its partitions differs from its own")
    problems += [f"{m.name}: not in the described group" for m in by_id.values()]
    return problems
