"""A group's offsets in Kafka's ``__consumer_offsets``, for the daemon and the migration toolkit.

This module owns:

* :class:`KafkaGroupOffsets`: :class:`~zkcoord.kafka.offsets.KafkaOffsets`
  plus what a coordinator needs that the plan does not: commits and fetches
  that carry the commit metadata, per-partition Kafka error codes, and
  deleting a group's offsets (``OffsetDelete``).
* :class:`KafkaForwarder`: the daemon's asyncio face of it. A group in
  ``dual`` or ``kafka`` offset storage has its members managed by zkcoord;
  Kafka sees a group *without* members, so commits go to the group's broker
  coordinator as OffsetCommit with generation -1 and an empty member id
  (kafka-python's ``alter_group_offsets``), which Kafka accepts for a group
  that is Empty or Dead on its side.

Rules:

1. No I/O in constructors; the forwarder connects on first use (in a worker
   thread) and again after a failed connect, so a daemon starts while Kafka
   is down and its ``zookeeper`` groups never touch Kafka.
2. Calls are blocking under the adapter's lock and run through
   ``asyncio.to_thread``: the event loop never blocks. One admin client per
   daemon serializes every Kafka call; enough for commits at consumer rates
   (a few ms each on a LAN), not for thousands of groups committing every
   millisecond.
3. Retriable per-partition errors of a commit (the group's coordinator moving
   or loading) are retried within ``request_timeout_ms`` like any retriable
   Kafka error, then :class:`~zkcoord.errors.ServiceUnavailableError`.
   Other per-partition errors (``OFFSET_METADATA_TOO_LARGE``,
   ``UNKNOWN_MEMBER_ID`` when Kafka has members of its own ...) are returned
   as Kafka's error codes, exactly as Kafka answered; what a zkcoord member
   is told is decided by :mod:`zkcoord.core.dual_commit` (Kafka's answers
   about its own members are never passed on as they are).
4. :meth:`KafkaForwarder.group` describes the group in Kafka's own
   coordinator, so the daemon can name the members that joined it there.
5. :meth:`KafkaForwarder.abort` (on the event loop; it does not block)
   ends the forwarder's Kafka connections at once, for a daemon that stops
   owning a group while a forward of it may be in flight
   (:mod:`zkcoord.server.dual_commit`, "A deposed owner's forward"): the
   client is marked aborted before it returns, so no try starts on it, and
   a thread of its own resets its connections (every socket has
   ``SO_LINGER`` 0: what the kernel still holds to send is dropped, not
   sent when the network comes back) and stops it, without waiting for the
   call in progress. That call ends at its next try, whose owner check
   answers first (:meth:`~zkcoord.kafka.offsets.KafkaOffsets.abort`); the
   next call connects a fresh client.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from zkcoord.core.offset_fetch import Wanted, pairs
from zkcoord.errors import UsageError, ZkcoordError
from zkcoord.kafka.offsets import KafkaGroup, KafkaOffsets, TopicPartition

__all__ = ["KafkaGroupOffsets", "KafkaForwarder", "CommitEntry"]

log = logging.getLogger(__name__)
CommitEntry = tuple[int, str]  # (offset, metadata)


class KafkaGroupOffsets(KafkaOffsets):
    """Kafka offsets with commit metadata and per-partition outcomes."""

    def commit_with_metadata(self, group: str, offsets: Mapping[TopicPartition, CommitEntry],
                             before_try: Callable[[], None] | None = None) -> dict[TopicPartition, int]:
        """Commit ``{(topic, partition): (offset, metadata)}`` as a group without
        members; returns the Kafka error code of each partition Kafka refused
        (``{}``: all stored). ``before_try``: run before each try (and retry),
        its exception ends the commit (:meth:`KafkaOffsets._call`)."""
        from kafka import TopicPartition as KafkaTP
        from kafka.structs import OffsetAndMetadata

        request = {}
        for (topic, partition), (offset, metadata) in offsets.items():
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise UsageError(f"offset of {topic}-{partition} must be a whole number >= 0, got {offset!r}")
            request[KafkaTP(topic, partition)] = OffsetAndMetadata(offset, metadata or "", None)
        if not request:
            return {}
        answer = self._call(f"commit offsets of group {group!r}", self._commit_retrying_partitions, group, request,
                            before_try=before_try)
        return {(tp.topic, tp.partition): int(error.errno) for tp, error in answer.items()
                if error.__name__ != "NoError"}

    def _commit_retrying_partitions(self, group: str, request: dict) -> dict:
        answer = self._admin.alter_group_offsets(group, request)
        retriable = next((error for error in answer.values() if getattr(error, "retriable", False)), None)
        if retriable is not None:
            raise retriable(f"group {group!r}")  # _call retries until the deadline
        return answer

    def fetch_with_metadata(self, group: str,
                            partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, CommitEntry]:
        """``{(topic, partition): (offset, metadata)}`` committed for ``group``
        (``partitions`` None: all of them); partitions without one are left out."""
        from kafka import TopicPartition as KafkaTP

        wanted = None if partitions is None else [KafkaTP(t, p) for t, p in partitions]
        if wanted == []:
            return {}
        answer = self._call(f"fetch the committed offsets of group {group!r}", self._admin_call,
                            "list_group_offsets", {group: wanted})
        found = answer.get(group, {})
        return {(tp.topic, tp.partition): (oam.offset, oam.metadata or "") for tp, oam in found.items()
                if oam.offset is not None and oam.offset >= 0}

    def delete_offsets(self, group: str, partitions: Iterable[TopicPartition]) -> None:
        """Delete the group's committed offsets of ``partitions`` (Kafka's OffsetDelete)."""
        from kafka import TopicPartition as KafkaTP

        wanted = [KafkaTP(t, p) for t, p in sorted(set(partitions))]
        if not wanted:
            return
        answer = self._call(f"delete offsets of group {group!r}", self._admin_call, "delete_group_offsets",
                            group, wanted)
        failed = {f"{tp.topic}-{tp.partition}": error.__name__ for tp, error in answer.items()
                  if error.__name__ != "NoError"}
        if failed:
            raise ZkcoordError(f"Kafka at {self.bootstrap_servers} did not delete offsets of group {group!r}: "
                               + ", ".join(f"{tp} {name}" for tp, name in sorted(failed.items())))


class KafkaForwarder:
    """The daemon's commits and fetches of ``dual`` / ``kafka`` groups. No I/O until used."""

    def __init__(self, bootstrap_servers: str, *, request_timeout_ms: int = 10_000,
                 client_id: str = "zkcoord-daemon", security=None) -> None:
        self.kafka = KafkaGroupOffsets(bootstrap_servers, request_timeout_ms=request_timeout_ms,
                                       client_id=client_id, security=security,
                                       reset_on_close=True)  # validates the address; no I/O (rule 5)

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka.bootstrap_servers

    async def commit(self, group: str, offsets: Mapping[TopicPartition, CommitEntry],
                     before_try: Callable[[], None] | None = None) -> dict[TopicPartition, int]:
        """Store the offsets in Kafka; Kafka's error code per refused partition.

        Raises ServiceUnavailableError when Kafka does not take them in time,
        and what ``before_try()`` raises (called in a worker thread before each
        try) when it refuses one."""
        return await asyncio.to_thread(self._started_call, self.kafka.commit_with_metadata, group, dict(offsets),
                                       before_try)

    async def fetch(self, group: str, partitions: Iterable[TopicPartition] | Wanted | None = None
                    ) -> dict[TopicPartition, CommitEntry]:
        """``partitions``: ``[(topic, partition)]`` or ``{topic: [partition]}``
        (expanded in the worker thread: a request may name millions)."""
        def call():
            wanted = None if partitions is None else list(
                pairs(partitions) if isinstance(partitions, Mapping) else partitions)
            return self._started_call(self.kafka.fetch_with_metadata, group, wanted)

        return await asyncio.to_thread(call)

    async def group(self, group: str) -> KafkaGroup:
        """The group as Kafka's own coordinator sees it (state, members)."""
        return await asyncio.to_thread(self._started_call, self.kafka.group, group)

    def _started_call(self, fn, *args: Any) -> Any:
        self.kafka.start()  # once; again after a failed connect
        return fn(*args)

    def abort(self, reason: str) -> bool:
        """Rule 5: abort the connections now (returns at once); False when
        there was no client to abort (none yet, or already aborted)."""
        finish = self.kafka.abort(reason)
        if finish is None:
            return False
        # A thread of its own, not asyncio.to_thread: the default executor's workers may all be calls
        # blocked in Kafka (the ones being aborted) and the reset would queue behind them.
        threading.Thread(target=finish, name="zkcoord-kafka-abort", daemon=True).start()
        return True

    async def close(self) -> None:
        await asyncio.to_thread(self.kafka.close)
