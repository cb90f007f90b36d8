"""Where a group's offsets are stored: one interface, three storage modes.

This module owns the :class:`OffsetStorage` interface the daemon's offset
requests go through and its three implementations, one per offset storage
mode (``"os"`` in the group's state record, :mod:`zkcoord.zk.modes`):

=========  ==============================================================
mode       commit                                  fetch
=========  ==============================================================
zookeeper  the legacy layout, :mod:`zkcoord.zk.offsets`, fenced by the
           group's election node (a deposed owner cannot commit)
dual       Kafka first, then ZooKeeper (fenced)    both; per partition the
           (:mod:`zkcoord.server.dual_commit`:     larger offset
           the order, its failure points and       (``core.migration.dual_fetch``)
           their recovery); ack only when both
           stored it
kafka      Kafka only, after checking that we      Kafka only
           still own the group
=========  ==============================================================

A commit has two halves: :meth:`OffsetStorage.begin` is synchronous and is
called under the group's lock, after the group accepted the commit: it
takes the commit's place in the group's order of writes (a ZooKeeper multi
queued, or a place in the chain of forwarded commits) and checks what can
be checked before anything is written (ownership, a Kafka to forward to).
The awaitable it returns does the writing, outside the lock, and gives the
partitions refused, with the error the member is to hear.

A ``dual`` / ``kafka`` group on a daemon without ``bootstrap_servers``
answers COORDINATOR_NOT_AVAILABLE (logged once per group). Kafka not
answering in time: COORDINATOR_NOT_AVAILABLE, so the client retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from zkcoord.core.errors import ErrorCode
from zkcoord.core.migration import dual_fetch
from zkcoord.core.offset_fetch import Wanted
from zkcoord.errors import NotOwnerError, ServiceUnavailableError
from zkcoord.kafka.forwarder import KafkaForwarder
from zkcoord.server.dual_commit import ForwardedOffsets
from zkcoord.server.group_runtime import GroupUnavailableError
from zkcoord.zk.offsets import FetchedOffsets, OffsetStore, PreparedCommit
from zkcoord.zk.ownership import Fence

__all__ = ["OffsetStorage", "ZooKeeperStorage", "ForwardedStorage", "OffsetStorages", "merge_dual"]

log = logging.getLogger(__name__)
E = ErrorCode
TopicPartition = tuple[str, int]
Offsets = Mapping[TopicPartition, tuple[int, str]]
Refused = dict[TopicPartition, ErrorCode]


class OffsetStorage(Protocol):
    """One storage mode's way of committing and fetching a group's offsets."""

    mode: str

    def begin(self, group_id: str, offsets: Offsets, prepared: PreparedCommit | None,
              fence: Callable[[], Fence]) -> Awaitable[Refused]:
        """Queue a commit (synchronous, under the group's lock); await the
        result for the partitions refused. ``prepared``: ``offsets`` as a
        ZooKeeper write made ready beforehand (:meth:`OffsetStore.prepare`);
        ``fence()``: this daemon's proof of ownership (NotOwnerError if it
        was deposed)."""
        ...

    async def fetch(self, group_id: str, wanted: Wanted | None) -> dict:
        """``{(topic, partition): (offset, metadata)}`` of ``wanted`` (None: all)."""
        ...


class ZooKeeperStorage:
    """``zookeeper``: the legacy layout, fenced."""

    mode = "zookeeper"

    def __init__(self, offsets: OffsetStore) -> None:
        self.offsets = offsets

    def begin(self, group_id, offsets, prepared, fence) -> Awaitable[Refused]:
        queued = self.offsets.submit(group_id, offsets if prepared is None else prepared, fence=fence())

        async def written() -> Refused:
            await queued
            return {}
        return written()

    async def fetch(self, group_id: str, wanted: Wanted | None) -> dict:
        return await self.offsets.fetch(group_id, wanted)


class ForwardedStorage:
    """``dual`` and ``kafka``: forwarded to Kafka (and, in ``dual``, then
    written to ZooKeeper), in the group's order (:mod:`.dual_commit`)."""

    def __init__(self, mode: str, offsets: OffsetStore, forwarded: ForwardedOffsets,
                 forwarder: Callable[[str], KafkaForwarder]) -> None:
        self.mode = mode
        self.offsets = offsets
        self.forwarded = forwarded
        self._forwarder = forwarder  # group id -> the forwarder, or GroupUnavailableError

    def begin(self, group_id, offsets, prepared, fence) -> Awaitable[Refused]:
        forwarder = self._forwarder(group_id)  # no Kafka: refused before anything is written
        held = fence()  # NotOwnerError if we were deposed meanwhile
        slot = self.forwarded.order.take(group_id)

        def still_owner() -> None:  # before each try of the forward, in its worker thread
            if fence() != held:  # NotOwnerError when not owned; another contender: owned again since
                raise NotOwnerError(f"group {group_id!r} was taken over again since the commit was accepted",
                                    group_id)

        async def written() -> Refused:
            try:
                return await self.forwarded.commit(forwarder, group_id, self.mode, offsets, slot, held, prepared,
                                                   still_owner)
            except ServiceUnavailableError as exc:
                raise GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc
        return written()

    async def fetch(self, group_id: str, wanted: Wanted | None) -> dict:
        forwarder = self._forwarder(group_id)
        if self.mode == "kafka":
            return await _kafka_fetch(forwarder, group_id, wanted)
        zk, kafka = await asyncio.gather(self.offsets.fetch(group_id, wanted),
                                         _kafka_fetch(forwarder, group_id, wanted))
        merged = FetchedOffsets()
        merged.update(merge_dual(zk, kafka))
        merged.unparsable.update(getattr(zk, "unparsable", {}))  # the larger of the two is unknowable
        return merged


class OffsetStorages:
    """The storage of each mode, over one ZooKeeper offset store and one
    (optional) Kafka forwarder."""

    def __init__(self, offsets: OffsetStore, forwarded: ForwardedOffsets, forwarder: KafkaForwarder | None) -> None:
        self.forwarder = forwarder
        self._warned_no_kafka: set[str] = set()
        self._by_mode: dict[str, OffsetStorage] = {
            "zookeeper": ZooKeeperStorage(offsets),
            "dual": ForwardedStorage("dual", offsets, forwarded, lambda g: self.forwarder_for(g, "dual")),
            "kafka": ForwardedStorage("kafka", offsets, forwarded, lambda g: self.forwarder_for(g, "kafka")),
        }

    def __getitem__(self, mode: str) -> OffsetStorage:
        return self._by_mode[mode]

    def forwarder_for(self, group_id: str, mode: str) -> KafkaForwarder:
        """The Kafka forwarder, or GroupUnavailableError (COORDINATOR_NOT_AVAILABLE, logged once per group)."""
        if self.forwarder is None:
            if group_id not in self._warned_no_kafka:
                self._warned_no_kafka.add(group_id)
                log.error("group %s uses %s offset storage, but this daemon has no Kafka bootstrap servers "
                          "(--bootstrap-servers); its offset requests get COORDINATOR_NOT_AVAILABLE", group_id, mode)
            raise GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE,
                                        f"{mode} offset storage needs --bootstrap-servers")
        return self.forwarder


async def _kafka_fetch(forwarder: KafkaForwarder, group_id: str, wanted) -> dict:
    try:
        return await forwarder.fetch(group_id, wanted)
    except ServiceUnavailableError as exc:
        raise GroupUnavailableError(group_id, E.COORDINATOR_NOT_AVAILABLE, str(exc)) from exc


def merge_dual(zk: dict, kafka: dict) -> dict:
    """Per partition the larger of the two offsets (``dual_fetch``) with the
    metadata stored beside it; on a tie ZooKeeper's metadata.

    >>> merge_dual({("t", 0): (5, "z"), ("t", 1): (9, "z")}, {("t", 0): (7, "k"), ("t", 2): (1, "k")})
    {('t', 0): (7, 'k'), ('t', 1): (9, 'z'), ('t', 2): (1, 'k')}
    """
    merged = {}
    for tp in sorted(set(zk) | set(kafka)):
        z, k = zk.get(tp), kafka.get(tp)
        best = dual_fetch(z[0] if z else None, k[0] if k else None)
        merged[tp] = z if z is not None and z[0] == best else k
    return merged
