"""Commits of ``dual`` and ``kafka`` groups: Kafka first, then ZooKeeper, in order.

This module owns how the daemon stores a commit in both stores (``dual``) or
in Kafka (``kafka``), what it tells the member when Kafka refuses, the repair
of a ``dual`` group whose ZooKeeper offsets are behind Kafka's, and the
Kafka-side members it has seen (:class:`ForwardedOffsets`).

The order, for a ``dual`` commit (``kafka``: steps 1-3 only)::

    step                                         fails -> stores after    member is told
    -------------------------------------------  -----------------------  ----------------------------
    0  under the group's lock: generation check,  nothing written          the check's code /
       offsets checked for ZooKeeper, fence                                NOT_COORDINATOR
       taken, place in the group's order taken
    1  wait for the earlier commits of the group  -                        -
    2  forward to Kafka (generation -1, empty     nothing written          COORDINATOR_NOT_AVAILABLE
       member id); Kafka not answering                                     (retriable)
    3  Kafka refuses partitions                   those: nothing written   per partition: Kafka's code,
                                                                           its membership codes as
                                                                           UNKNOWN_SERVER_ERROR
                                                                           (core.dual_commit)
    4  fenced ZooKeeper write of what Kafka       Kafka ahead of ZooKeeper  the write's error (not
       stored (deposed, ZooKeeper down,           for those partitions,     acknowledged); logged,
       daemon killed here)                        said below                counted
    5  acknowledged                               both have it             NONE

Why Kafka first: the refusals that happen in practice (a consumer joined the
group through a broker, Kafka down or slow, metadata too large) then leave
*both* stores as they were, and the member hears the commit failed. The
failures left (step 4) leave Kafka ahead, never ZooKeeper, and that is safe
and visible: a ``dual`` group's OffsetFetch answers the larger of the two
offsets (:func:`~zkcoord.core.migration.dual_fetch`), so no member resumes
from the older one; ``migrate verify`` reports every partition where
ZooKeeper is behind Kafka and does not call the group clean; the daemon
logs it and counts it (``zkcoord_dual_commit_divergences_total``); and the
next owner to load the group (after a kill, a deposition or a restart)
copies Kafka's offsets where ZooKeeper is behind
(:meth:`ForwardedOffsets.repair`, a fenced write, ordered with the group's
commits), so the stores converge without anyone acting. The ZooKeeper-first
order it replaces left ZooKeeper ahead after every refusal, with the
member told its commit failed and nothing saying the stores differed.

Order: a commit takes its place in its group's chain (step 0) under the
group's lock, so a commit validated for generation N reaches Kafka and then
ZooKeeper before any commit validated after it; the ZooKeeper write is queued
before the next commit may go to Kafka.

A deposed owner's forward. Kafka stores a forwarded commit with no fencing
of its own; what keeps a deposed owner's commit from landing there after
the new owner's:

* The owner check: before each try of step 2 (retried while Kafka's
  coordinator moves, for up to the forwarder's request time-out) the owner
  checks that it still holds the group's contender it held at step 0: a
  daemon that has learnt it was deposed starts no more tries.
* The abort: the moment this daemon stops owning a group whose commit is in
  step 2 (:meth:`ForwardedOffsets.forwarding`), the forwarder's connections
  are aborted (``GroupOffsets.abort_forwards``;
  :mod:`zkcoord.kafka.forwarder` rule 5), in the same callback that tells
  it, before its members hear NOT_COORDINATOR: on the ownership's LOST (the
  session given up at the session time-out, or found expired; the contender
  deleted, or no longer the lowest after a reconnect), a runtime stepping
  down after a refused write, a group removed, and the daemon stopping
  (before its contenders are deleted). The client is marked aborted at
  once, so no try starts on it; a thread of its own resets its connections,
  and with ``SO_LINGER`` 0 the kernel drops what they still held, so a try
  whose bytes a cut holds up never reaches the broker, even once the cut
  heals (a daemon killed meanwhile: its kernel resets them as it exits).
  The try in flight fails; the call asks the owner again (NOT_COORDINATOR).
  Other groups' forwards on that client end COORDINATOR_NOT_AVAILABLE and
  their members commit again; the next forward connects a fresh client.
* The race between the two: a try that passed its owner check just before
  the daemon learnt. Its check of the abort mark and the mark itself are
  ordered by the client's state lock: after the mark, the try does not
  start. Before it, the request goes to kafka-python's I/O thread, as does
  the abort's reset, so it reaches the socket either after the reset
  (nothing is sent: the connections are closed, and a closed connection
  manager opens none that carries a request) or before it, when the reset
  then drops whatever the broker had not yet received.

What is left: bytes the broker had received before the reset. They were
sent before the daemon learnt (or milliseconds after), over a network that
delivered them, and the broker stores them as it reads them; they land
after the new owner's commits only if the broker holds them longer than a
takeover takes (the session expired or the contender gone, the group
loaded by the other daemon, its members sent there by this daemon's
NOT_COORDINATOR, which comes after the abort, and a commit forwarded by the
new owner). A daemon cut from ZooKeeper that has not yet given its session
up is still the owner as far as it can know, and forwards as one: no other
daemon can own the group before ZooKeeper expires the session, which it
does at about the moment the daemon gives it up
(:mod:`zkcoord.core.session_loss`); a SUSPENDED daemon aborts nothing,
for that reason. Should a late commit land all the same, step 4 refuses it
in ZooKeeper in ``dual`` mode (whose OffsetFetch answers the larger
offset), and the next commit of the partition corrects Kafka.

Kafka-side members: a refusal with a membership code means the group has
members in Kafka's own coordinator. The owner then describes the group in
Kafka and logs the members once per change of the set (a stored commit means
Kafka's group is Empty again: also a change, logged); the metrics count
them (``zkcoord_groups_with_kafka_members``, ``zkcoord_kafka_side_members``,
``zkcoord_forwarded_commit_refusals_total{error}``). zkcoord's own members
are never told about them: they keep their membership.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping

from zkcoord.core.dual_commit import KAFKA_MEMBERSHIP_ERRORS, KafkaMember, KafkaSideMembers, client_error
from zkcoord.core.errors import ErrorCode
from zkcoord.errors import ZkcoordError
from zkcoord.kafka.forwarder import KafkaForwarder

__all__ = ["CommitOrder", "ForwardedOffsets", "Slot"]

log = logging.getLogger(__name__)
E = ErrorCode
TopicPartition = tuple[str, int]


class Slot:
    """One commit's place in its group's chain: :meth:`turn` waits for the
    commit before it, :meth:`release` lets the next one go (idempotent)."""

    def __init__(self, order: CommitOrder, group: str, before: asyncio.Future | None, mine: asyncio.Future):
        self._order, self._group, self._before, self._mine = order, group, before, mine

    async def turn(self) -> None:
        if self._before is not None:
            await asyncio.shield(self._before)

    def release(self) -> None:
        if not self._mine.done():
            self._mine.set_result(None)
        self._order._released(self._group, self._mine)


class CommitOrder:
    """Per group, commits go on in the order they took a :class:`Slot`."""

    def __init__(self) -> None:
        self._tail: dict[str, asyncio.Future] = {}

    def take(self, group: str) -> Slot:
        """Synchronous: call it under the group's lock to fix the order."""
        mine = asyncio.get_running_loop().create_future()
        before = self._tail.get(group)
        self._tail[group] = mine
        return Slot(self, group, before, mine)

    def _released(self, group: str, fut: asyncio.Future) -> None:
        if self._tail.get(group) is fut:
            del self._tail[group]


class ForwardedOffsets:
    """The daemon's commits to Kafka (``dual`` and ``kafka``) and their bookkeeping."""

    def __init__(self, offsets, metrics_of=lambda: None) -> None:
        self.offsets = offsets  # zk.offsets.OffsetStore
        self.order = CommitOrder()
        self.kafka_members = KafkaSideMembers()
        self._metrics_of = metrics_of  # -> DaemonMetrics or None, read when used
        self._forwarding: Counter[str] = Counter()  # group -> its commits in step 2 (in flight to Kafka)

    def forwarding(self, group: str) -> bool:
        """A commit of ``group`` is in step 2: its forward to Kafka may be in flight."""
        return self._forwarding[group] > 0

    async def commit(self, forwarder: KafkaForwarder, group: str, mode: str, kept: Mapping, slot: Slot,
                     fence, prepared=None, still_owner: Callable[[], None] | None = None
                     ) -> dict[TopicPartition, ErrorCode]:
        """Steps 1-5 of the module's table; the client's code per refused
        partition. ``prepared``: the ZooKeeper write of all of ``kept``
        (``OffsetStore.prepare``), used when Kafka stored every partition.
        ``still_owner()``: raises NotOwnerError once this daemon no longer
        holds ``fence``; asked before each try of the forward.
        ServiceUnavailableError: Kafka did not answer (nothing written);
        NotOwnerError: deposed before a try (nothing more written);
        other ZkcoordError: ZooKeeper refused (Kafka ahead, logged)."""
        written = None
        try:
            await slot.turn()
            self._forwarding[group] += 1
            try:
                answer = await forwarder.commit(group, kept, still_owner)
            finally:
                self._forwarding[group] -= 1
                if not self._forwarding[group]:
                    del self._forwarding[group]
            refused = {tp: _error_code(errno) for tp, errno in answer.items()}
            stored = {tp: om for tp, om in kept.items() if tp not in refused}
            if mode == "dual" and stored:
                try:
                    whole = not refused and prepared is not None
                    written = self.offsets.submit(group, prepared if whole else stored, fence=fence)
                except ZkcoordError as exc:
                    self._diverged(group, stored, exc)
                    raise
        finally:
            slot.release()
        if written is not None:
            try:
                await written
            except ZkcoordError as exc:
                self._diverged(group, stored, exc)
                raise
        await self._observe_refusals(forwarder, group, refused, stored_any=bool(stored))
        return {tp: client_error(code) for tp, code in refused.items()}

    def _diverged(self, group: str, stored: Mapping, exc: Exception) -> None:
        shown = ", ".join(f"{t}-{p}@{o}" for (t, p), (o, _) in sorted(stored.items())[:10])
        log.warning("group %s: Kafka stored the commit of %s but ZooKeeper did not (%s); Kafka is ahead of "
                    "ZooKeeper there until the next commit or the group's next load repairs it (migrate verify "
                    "reports it); the member was not acknowledged", group, shown, exc)
        metrics = self._metrics_of()
        if metrics is not None:
            metrics.observe_dual_divergence()

    async def _observe_refusals(self, forwarder: KafkaForwarder, group: str, refused: Mapping,
                                stored_any: bool) -> None:
        metrics = self._metrics_of()
        membership = sorted({code for code in refused.values() if code in KAFKA_MEMBERSHIP_ERRORS})
        if metrics is not None:
            for code in sorted(set(refused.values())):
                metrics.observe_forward_refusal(code.name)
        if membership:
            log.debug("group %s: Kafka refused a forwarded commit with %s (about Kafka's own members); the "
                      "member is told UNKNOWN_SERVER_ERROR", group, ", ".join(c.name for c in membership))
            await self.look_at_kafka_members(forwarder, group)
        elif stored_any and self.kafka_members.of(group):
            self._members_now(group, ())  # Kafka stored a commit from outside: its group is Empty

    async def look_at_kafka_members(self, forwarder: KafkaForwarder, group: str) -> tuple[KafkaMember, ...]:
        """Describe the group in Kafka's coordinator; log its members if they changed."""
        try:
            described = await forwarder.group(group)
        except ZkcoordError as exc:
            log.warning("group %s: Kafka refuses its forwarded commits, and describing it in Kafka failed: %s",
                        group, exc)
            return self.kafka_members.of(group)
        members = tuple(KafkaMember(*m) for m in described.member_ids)
        self._members_now(group, members, described.state)
        return members

    def _members_now(self, group: str, members, state: str = "Empty") -> None:
        if not self.kafka_members.update(group, members):
            return
        if members:
            log.warning("group %s has %d member(s) in Kafka's own coordinator (state %s): %s. They consume "
                        "beside zkcoord's members (both coordinators assign the partitions) and Kafka refuses "
                        "the group's forwarded commits while they stay; stop them or move them to zkcoord",
                        group, len(members), state, "; ".join(str(m) for m in members))
        else:
            log.warning("group %s: no members in Kafka's own coordinator any more; forwarded commits are "
                        "stored again", group)

    def forget(self, group: str) -> None:
        self.kafka_members.forget(group)

    async def repair(self, forwarder: KafkaForwarder, group: str, slot: Slot, fence) -> dict:
        """Copy Kafka's offsets into ZooKeeper where ZooKeeper is behind (a
        ``dual`` group, on load); returns what was written. Ordered with the
        group's commits through ``slot``; the write is fenced."""
        try:
            await slot.turn()
            zk, kafka = await asyncio.gather(self.offsets.fetch(group), forwarder.fetch(group))
            behind = {tp: om for tp, om in kafka.items()
                      if tp not in zk.unparsable and (tp not in zk or zk[tp][0] < om[0])}
            written = self.offsets.submit(group, behind, fence=fence) if behind else None
        finally:
            slot.release()
        if written is not None:
            await written
            log.warning("group %s: ZooKeeper was behind Kafka (a commit stored in Kafka only: a daemon stopped "
                        "or deposed between the two writes); copied Kafka's offsets of %s", group,
                        ", ".join(f"{t}-{p}@{o}" for (t, p), (o, _) in sorted(behind.items())[:10]))
        return behind


def _error_code(errno: int) -> ErrorCode:
    try:
        return ErrorCode(errno)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR

