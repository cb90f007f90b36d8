"""The legacy side of a migration: what ZooKeeper holds about each group.

This module owns reading, for the migration toolkit, a group's legacy
offsets exactly as stored (``<root>/<group>/offsets/<topic>/<partition>``,
the raw text, so the plan can show and judge what old consumers wrote), the
group's zkcoord state record (members, offset storage mode) and the old
ZooKeeper consumers registered under ``<root>/<group>/ids``; and writing
legacy offsets (``migrate import``) through
:class:`~zkcoord.zk.offsets.OffsetStore`, one multi-op per group.

Rules:

1. Reads are pipelined: per group one listing of the topics, one per topic,
   then every partition's value at once; groups are read 32 at a time. Each
   group's read is idempotent and retried on connection loss.
2. Values are decoded as UTF-8 (undecodable bytes shown as ``\\xNN``); a
   znode without data reads as None. Znode names under a topic that are not
   partition numbers are skipped (legacy tools ignore them too).
3. A corrupt zkcoord state record is that group's ``state_error`` (the
   StateError's message, naming its znode): the other groups are read.
4. Writes create ``<root>/<group>`` with open ACLs, what is below it with
   the connection's (:mod:`zkcoord.zk.auth` rule 1), as the offset store does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from zkcoord.core.legacy_values import partition_number
from zkcoord.errors import ConflictError, StateError
from zkcoord.zk import aio, paths
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.offsets import OffsetStore, ensure_group_dirs
from zkcoord.zk.state_store import decode_state, member_count

__all__ = ["LegacyGroup", "LegacyOffsets", "LegacyVersions", "TopicPartition"]

log = logging.getLogger(__name__)
TopicPartition = tuple[str, int]
LegacyVersions = dict[TopicPartition, tuple[str | None, int]]  # (topic, partition) -> (raw text, znode version)
_MAX_OPS = 900  # deletes per multi
_GROUPS_AT_ONCE = 32


@dataclass(frozen=True)
class LegacyGroup:
    """One group as ZooKeeper knows it.

    ``offsets`` maps (topic, partition) to the znode's text (None: no data);
    ``zkcoord_members`` is None when the group has no zkcoord state record.
    """

    group: str
    offsets: dict[TopicPartition, str | None] = field(default_factory=dict)
    zkcoord_members: int | None = None
    offset_storage: str | None = None
    legacy_consumers: int = 0
    state_error: str | None = None  # its zkcoord state znode is corrupt: what is wrong


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


class LegacyOffsets:
    """Legacy offsets under ``zk_root`` (``/consumers``, or ``/kafka/consumers``...)."""

    def __init__(self, conn: ZkConnection, zk_root: str = paths.DEFAULT_CONSUMERS_ROOT) -> None:
        self._conn = conn
        self.paths = paths.OffsetPaths(zk_root)  # ConfigError for a bad root, before any I/O

    @property
    def root(self) -> str:
        return self.paths.root

    def partition_path(self, group: str, topic: str, partition: int) -> str:
        return self.paths.partition(group, topic, partition)

    async def group_exists(self, group: str) -> bool:
        """Is there a ``<root>/<group>`` znode?"""
        path = paths.OffsetPaths(self.root).group(group)
        return await self._conn.retry(f"look up {path}", self._inner_exists, path)

    async def _inner_exists(self, path: str) -> bool:
        return await aio.call(self._conn.client.exists_async, path) is not None

    async def list_groups(self) -> list[str]:
        """Every group under the root, sorted (with offsets or not)."""
        return await self._conn.retry(f"list the groups under {self.root}", self._inner_list_groups)

    async def _inner_list_groups(self) -> list[str]:
        try:
            return paths.group_ids(await aio.call(self._conn.client.get_children_async, self.root))
        except NoNodeError:
            return []

    async def read_groups(self, groups: Iterable[str]) -> dict[str, LegacyGroup]:
        """Each group's offsets, zkcoord state and legacy consumers."""
        wanted = list(dict.fromkeys(groups))
        for group in wanted:
            self.paths.group(group)  # validates every name before any I/O
        found: dict[str, LegacyGroup] = {}
        for i in range(0, len(wanted), _GROUPS_AT_ONCE):
            chunk = wanted[i:i + _GROUPS_AT_ONCE]
            read = await asyncio.gather(*(self._conn.retry(f"read the legacy offsets of group {g!r}",
                                                           self._inner_read_group, g) for g in chunk))
            found.update(zip(chunk, read))
        return found

    async def _inner_read_group(self, group: str) -> LegacyGroup:
        client = self._conn.client
        loop = asyncio.get_running_loop()
        state_path = paths.state(group)
        topics, state, ids = await aio.gather(loop, [
            client.get_children_async(self.paths.offsets_dir(group)),
            client.get_async(state_path),
            client.get_children_async(self.paths.ids_dir(group)),
        ])
        _raise_unexpected(topics, state, ids)
        members = storage = state_error = None
        if not isinstance(state, NoNodeError):
            try:
                record = decode_state(group, state_path, state[0])
                members, storage = member_count(record), str(record.get("os", "zookeeper"))
            except StateError as exc:
                state_error = str(exc)
        offsets = {} if isinstance(topics, NoNodeError) else await self._read_offsets(group, sorted(topics))
        return LegacyGroup(group, offsets, members, storage, 0 if isinstance(ids, NoNodeError) else len(ids),
                           state_error)

    async def _read_offsets(self, group: str, topics: list[str]) -> dict[TopicPartition, str | None]:
        client = self._conn.client
        loop = asyncio.get_running_loop()
        listed = await aio.gather(loop, [client.get_children_async(self.paths.topic_dir(group, t)) for t in topics])
        _raise_unexpected(*listed)
        wanted: list[TopicPartition] = []
        for topic, names in zip(topics, listed):
            if isinstance(names, NoNodeError):
                continue  # deleted meanwhile
            for name in names:
                if (number := partition_number(name)) is not None:
                    wanted.append((topic, number))
                else:
                    log.warning("ignoring %s/%s: not a partition number", self.paths.topic_dir(group, topic), name)
        wanted.sort()
        values = await aio.gather(loop, [client.get_async(self.paths.partition(group, t, p)) for t, p in wanted])
        _raise_unexpected(*values)
        return {tp: _text(v[0]) for tp, v in zip(wanted, values) if not isinstance(v, NoNodeError)}

    async def write(self, offsets: Mapping[str, Mapping[TopicPartition, int]]) -> int:
        """Write ``{group: {(topic, partition): offset}}`` as legacy offsets,
        one multi-op per group (empty metadata: stale metadata is removed).
        Returns the number of offsets written."""
        store = OffsetStore(self._conn, offsets_root=self.root)
        try:
            await asyncio.gather(*(store.commit(group, {tp: (offset, "") for tp, offset in per_group.items()})
                                   for group, per_group in offsets.items()))
        finally:
            await store.stop()
        return sum(len(per_group) for per_group in offsets.values())


    # -- finalize: the archived znodes, read with their versions and deleted at them ------------
    async def read_versions(self, group: str) -> LegacyVersions:
        """Every legacy offset znode of the group: its text and znode version."""
        layout = self.paths

        async def inner() -> LegacyVersions:
            client, loop = self._conn.client, asyncio.get_running_loop()
            try:
                topics = await aio.call(client.get_children_async, layout.offsets_dir(group))
            except NoNodeError:
                return {}
            listed = await aio.gather(loop, [client.get_children_async(layout.topic_dir(group, t)) for t in topics])
            wanted = [(t, p) for t, names in zip(topics, listed) if isinstance(names, list)
                      for p in map(partition_number, names) if p is not None]
            values = await aio.gather(loop, [client.get_async(layout.partition(group, t, p)) for t, p in wanted])
            found: LegacyVersions = {}
            for tp, value in zip(wanted, values):
                if isinstance(value, NoNodeError):
                    continue
                if isinstance(value, BaseException):
                    raise value
                data, stat = value
                found[tp] = (None if data is None else data.decode("utf-8", "backslashreplace"), stat.version)
            return found

        return await self._conn.retry(f"read the legacy offsets of group {group!r}", inner)

    async def delete_archived(self, group: str, versions: LegacyVersions) -> int:
        """Delete the offset znodes ``versions`` names, each at its version
        (ConflictError when a legacy consumer committed since: nothing of that
        topic is deleted), then the emptied directories and the commit
        metadata; the number of offsets deleted."""
        layout = self.paths
        deleted = 0
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), (_, version) in sorted(versions.items()):
            by_topic.setdefault(topic, []).append((partition, version))
        for topic, parts in by_topic.items():
            for i in range(0, len(parts), _MAX_OPS):
                chunk = parts[i:i + _MAX_OPS]
                last = i + _MAX_OPS >= len(parts)
                ops = [(layout.partition(group, topic, p), v) for p, v in chunk]
                ops += [(layout.topic_dir(group, topic), -1)] if last else []
                await self._delete_all(group, ops)
                deleted += len(chunk)
        await self._delete_all(group, [(layout.offsets_dir(group), -1)], missing_ok=True)
        await self._delete_tree(layout.metadata_dir(group))
        return deleted

    async def _delete_all(self, group: str, ops: list[tuple[str, int]], missing_ok: bool = False) -> None:
        conn = self._conn

        async def inner() -> None:
            txn = conn.client.transaction()
            for path, version in ops:
                txn.delete(path, version)
            results = await aio.future_of(asyncio.get_running_loop(), txn.commit_async())
            failure = aio.transaction_failure(results)
            if failure is None:
                return
            index, exc = failure
            if isinstance(exc, NoNodeError) and missing_ok:
                return
            if isinstance(exc, NoNodeError) and index >= 0:
                remaining = ops[:index] + ops[index + 1:]  # deleted already (by a lost answer, say)
                if remaining:
                    await self._delete_all(group, remaining, missing_ok)
                return
            if isinstance(exc, (BadVersionError, NotEmptyError)):
                raise ConflictError(f"legacy offsets of group {group!r} changed after they were archived "
                                    f"({ops[index][0]}): a legacy consumer still commits to ZooKeeper? nothing "
                                    "of this topic was deleted; re-run finalize --delete-legacy")
            raise aio.translate(exc, f"delete the legacy offsets of group {group!r}", conn.hosts)

        await conn.retry(f"delete the legacy offsets of group {group!r}", inner)

    async def _delete_tree(self, root: str) -> None:
        """Delete ``root`` and everything below (the commit metadata: derived data)."""
        async def inner() -> None:
            try:  # kazoo's recursive delete is blocking: run it off the loop
                await asyncio.to_thread(self._conn.client.delete, root, recursive=True)
            except NoNodeError:
                pass
        await self._conn.retry(f"delete {root}", inner)

    # -- rollback: offsets raised where ZooKeeper has less, at the versions read --------------
    async def write_versioned(self, group: str, ops: list[tuple[str, int, int, int | None]]) -> bool:
        """Write ``(topic, partition, offset, znode version or None to create)``
        in one multi; False (nothing written) when a znode changed since its
        version was read (a legacy consumer committed): read again."""
        layout = self.paths

        async def inner() -> bool:
            client, loop = self._conn.client, asyncio.get_running_loop()
            topics = sorted({t for t, _, _, _ in ops})
            _raise_first(await ensure_group_dirs(self._conn, [layout.group(group)]))  # open: zkcoord.zk.auth rule 1
            ensured = await aio.gather(loop, [client.ensure_path_async(layout.topic_dir(group, t)) for t in topics])
            _raise_first(ensured)
            txn = client.transaction()
            for topic, partition, offset, version in ops:
                path, value = layout.partition(group, topic, partition), str(offset).encode()
                if version is None:
                    txn.create(path, value)
                else:
                    txn.set_data(path, value, version)
            failure = aio.transaction_failure(await aio.future_of(loop, txn.commit_async()))
            if failure is None:
                return True
            if isinstance(failure[1], (BadVersionError, NodeExistsError, NoNodeError)):
                return False
            raise aio.translate(failure[1], f"write the legacy offsets of group {group!r}", self._conn.hosts)

        return await self._conn.retry(f"write the legacy offsets of group {group!r}", inner)


def _raise_first(outcomes: Iterable[object]) -> None:
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


def _raise_unexpected(*outcomes: object) -> None:
    """Raise the first failure other than NoNodeError (a retry decides what to do)."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, NoNodeError):
            raise outcome
