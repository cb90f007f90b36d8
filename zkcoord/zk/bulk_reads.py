"""Reading legacy groups in bulk, for the Spark migration job.

This module owns the bulk ZooKeeper reads of the migration toolkit
(:mod:`zkcoord.migrate.spark_tasks`, :mod:`zkcoord.migrate.apply_batch`):
:class:`MultiReadLegacy` reads many groups by the rules of
:meth:`zkcoord.zk.legacy.LegacyOffsets.read_groups` (same znodes, same
decoding, same skipping of names that are not partitions) with ZooKeeper's
multiRead, up to 1000 znodes per request instead of one; :class:`SingleReads`
does the same through ``LegacyOffsets`` itself for servers older than 3.6;
:func:`reader_for` picks one (``auto``: multiRead if the server's ``srvr``
says 3.6 or later); :class:`ReaderLegacy` is a ``LegacyOffsets`` whose
``read_groups`` uses a reader, for ``apply_group``.

Measured on the benchmark's 2-core machine, one kazoo client does about
7,000 single reads a second (kazoo's per-request cost in Python) and over
200,000 values a second in multiRead requests.

Rules:

1. A read answers ``{group: LegacyGroup or ZkcoordError}``: one group's
   failure (a corrupt state record, a znode it may not read, a name that
   cannot be a znode) is that group's; losing the connection raises (the
   whole step is retried by ``conn.retry``, reads being idempotent).
2. multiRead returns every op's outcome on its own, so a missing znode is a
   NoNodeError in its slot, as with one read per znode; requests stay under
   512 KiB (ZooKeeper's jute.maxbuffer is 1 MiB).
3. kazoo has no multiRead: :mod:`zkcoord.zk.multi_read` adds it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence

from kazoo.exceptions import NoNodeError

from zkcoord.core.legacy_values import partition_number
from zkcoord.errors import ServiceUnavailableError, ZkcoordError
from zkcoord.zk import aio, paths
from zkcoord.zk.legacy import LegacyGroup, LegacyOffsets, TopicPartition
from zkcoord.zk.connection import SelectHandler, ZkConnection
from zkcoord.zk.multi_read import (  # noqa: F401 (GET_DATA, GET_CHILDREN, read_znodes: this module's API too)
    _BYTES_PER_READ, _GET_CHILDREN, _GET_DATA, _OPS_PER_READ, GET_CHILDREN, GET_DATA, _MultiRead,
    multi_read_supported, read_znodes,
)
from zkcoord.zk.state_store import decode_state, member_count

__all__ = ["GET_DATA", "GET_CHILDREN", "SelectHandler", "read_znodes", "read_many", "Reads", "MultiReadLegacy", "SingleReads", "ReaderLegacy", "multi_read_supported", "reader_for"]

log = logging.getLogger(__name__)

def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")

def _failure(outcome: object) -> BaseException | None:
    """The outcome if it is a failure other than a missing znode."""
    return outcome if isinstance(outcome, BaseException) and not isinstance(outcome, NoNodeError) else None

Reads = dict[str, "LegacyGroup | ZkcoordError"]  # group -> what was read, or why it could not be

class MultiReadLegacy:
    """Reads groups by the rules of :meth:`LegacyOffsets.read_groups` (same
    znodes, same decoding, same skipping), up to 1000 znodes per request."""

    def __init__(self, conn: ZkConnection, zk_root: str) -> None:
        self._conn = conn
        self.paths = paths.OffsetPaths(zk_root)
        self._topics: set[str] = set()  # topic names already checked by paths.component

    def _topic_dir(self, offsets_dir: str, topic: str) -> str:
        """``OffsetPaths.topic_dir`` with the group checked already: each topic name checked once per task."""
        if topic not in self._topics:
            paths.component(topic, "topic")
            self._topics.add(topic)
        return f"{offsets_dir}/{topic}"

    async def read(self, groups: Sequence[str]) -> Reads:
        return await self._conn.retry(f"read the legacy offsets of {len(groups)} group(s)", self._inner_read,
                                      list(groups))

    async def _inner_read(self, groups: list[str]) -> Reads:
        found: Reads = {}
        ops: list[tuple[int, str]] = []
        valid = []
        offsets_dirs: dict[str, str] = {}
        for group in groups:
            try:
                base = self.paths.group(group)  # checks the name once: the paths below share it
                ops += [(_GET_CHILDREN, f"{base}/{paths.OFFSETS}"), (_GET_DATA, paths.state(group)),
                        (_GET_CHILDREN, f"{base}/ids")]
                offsets_dirs[group] = f"{base}/{paths.OFFSETS}"
                valid.append(group)
            except ZkcoordError as exc:
                found[group] = exc
        outcomes = await self._read(ops)
        topics: dict[str, list[str]] = {}
        for i, group in enumerate(valid):
            listed, state, ids = outcomes[3 * i:3 * i + 3]
            try:
                self._raise(group, listed, state, ids)
                members = storage = None
                if not isinstance(state, NoNodeError):
                    decoded = decode_state(group, paths.state(group), state)
                    members, storage = member_count(decoded), str(decoded.get("os", "zookeeper"))
                found[group] = LegacyGroup(group, {}, members, storage, 0 if isinstance(ids, NoNodeError) else len(ids))
                topics[group] = [] if isinstance(listed, NoNodeError) else sorted(listed)
            except ZkcoordError as exc:
                found[group] = exc
        await self._read_offsets(found, topics, offsets_dirs)
        return found

    async def _read_offsets(self, found: Reads, topics: dict[str, list[str]], offsets_dirs: dict[str, str]) -> None:
        dirs = [(g, t) for g, names in topics.items() for t in names]
        topic_dir = self._topic_dir
        where = {(g, t): topic_dir(offsets_dirs[g], t) for g, t in dirs}  # checked once per topic, not per partition
        listed = await self._read([(_GET_CHILDREN, where[key]) for key in dirs])
        wanted: dict[str, list[TopicPartition]] = {g: [] for g in topics}
        for (group, topic), names in zip(dirs, listed):
            if isinstance(found[group], ZkcoordError) or isinstance(names, NoNodeError):
                continue  # failed already, or deleted meanwhile
            if (failed := _failure(names)) is not None:
                found[group] = aio.translate(failed, f"list {self.paths.topic_dir(group, topic)}", self._conn.hosts)
                continue
            for name in names:
                if (number := partition_number(name)) is not None:
                    wanted[group].append((topic, number))
                else:
                    log.warning("ignoring %s/%s: not a partition number", self.paths.topic_dir(group, topic), name)
        keys = [(g, tp) for g, tps in wanted.items() if isinstance(found[g], LegacyGroup) for tp in sorted(tps)]
        values = await self._read([(_GET_DATA, f"{where[g, t]}/{p:d}") for g, (t, p) in keys])  # p: an int >= 0
        for (group, tp), value in zip(keys, values):
            legacy = found[group]
            if isinstance(legacy, ZkcoordError) or isinstance(value, NoNodeError):
                continue
            if (failed := _failure(value)) is not None:
                found[group] = aio.translate(failed, f"read {self.paths.partition(group, *tp)}", self._conn.hosts)
                continue
            legacy.offsets[tp] = _text(value)

    def _raise(self, group: str, *outcomes: object) -> None:
        for outcome in outcomes:
            if (failed := _failure(outcome)) is not None:
                raise aio.translate(failed, f"read the legacy offsets of group {group!r}", self._conn.hosts)

    async def _read(self, ops: list[tuple[int, str]]) -> list:
        """Every op's outcome, in order; a lost connection raises (the caller retries)."""
        client = self._conn.client
        chroot = client.chroot or ""
        pending = []
        for start in range(0, len(ops), _OPS_PER_READ):
            chunk = [(op, chroot + path) for op, path in ops[start:start + _OPS_PER_READ]]
            if sum(len(path) for _, path in chunk) + 16 * len(chunk) <= _BYTES_PER_READ:
                pending.append(self._send(client, chunk))
                continue
            part, size = [], 0  # long paths: as many as fit
            for op, full in chunk:
                if part and size + len(full) + 16 > _BYTES_PER_READ:
                    pending.append(self._send(client, part))
                    part, size = [], 0
                part.append((op, full))
                size += len(full) + 16
            pending.append(self._send(client, part))
        results = []
        for outcome in await aio.gather(asyncio.get_running_loop(), pending):
            if isinstance(outcome, BaseException):
                raise outcome
            results += outcome
        return results

    @staticmethod
    def _send(client, ops: list[tuple[int, str]]):
        result = client.handler.async_result()
        client._call(_MultiRead(ops), result)  # how kazoo's own *_async methods queue a request
        return result

class SingleReads:
    """The same reads, one znode per request, through LegacyOffsets (ZooKeeper < 3.6)."""

    def __init__(self, conn: ZkConnection, zk_root: str) -> None:
        self._legacy = LegacyOffsets(conn, zk_root)

    async def read(self, groups: Sequence[str]) -> Reads:
        try:
            return dict(await self._legacy.read_groups(groups))
        except ServiceUnavailableError:
            raise
        except ZkcoordError:  # one group's fault (rule 1): find it by reading each alone
            return dict(zip(groups, await asyncio.gather(*(self._one(g) for g in groups))))

    async def _one(self, group: str) -> LegacyGroup | ZkcoordError:
        try:
            return (await self._legacy.read_groups([group]))[group]
        except ServiceUnavailableError:
            raise
        except ZkcoordError as exc:
            return exc

class ReaderLegacy(LegacyOffsets):
    """LegacyOffsets whose ``read_groups`` goes through the task's reader, so
    ``apply_group`` (which plans each group afresh) reads with multiRead too."""

    def __init__(self, conn: ZkConnection, zk_root: str, reader: MultiReadLegacy | SingleReads) -> None:
        super().__init__(conn, zk_root)
        self._reader = reader

    async def read_groups(self, groups: Iterable[str]) -> dict[str, LegacyGroup]:
        wanted = list(dict.fromkeys(groups))
        found = await self._reader.read(wanted)
        for group in wanted:
            if isinstance(found[group], ZkcoordError):
                raise found[group]
        return found

async def reader_for(conn: ZkConnection, zk_root: str, zk_reads: str) -> MultiReadLegacy | SingleReads:
    """``multi``, ``single``, or ``auto`` (multi when the server is 3.6+)."""
    if zk_reads == "multi" or (zk_reads == "auto" and await multi_read_supported(conn)):
        return MultiReadLegacy(conn, zk_root)
    return SingleReads(conn, zk_root)
