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
3. A corrupt zkcoord state record is a StateError naming its znode.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kazoo.exceptions import NoNodeError

from zkcoord.zk import aio, paths
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.offsets import OffsetStore
from zkcoord.zk.state_store import decode_state

__all__ = ["LegacyGroup", "LegacyOffsets", "TopicPartition"]

log = logging.getLogger(__name__)
TopicPartition = tuple[str, int]
_IDS = "ids"  # <root>/<group>/ids/<consumer id>: ephemeral registrations of old ZooKeeper consumers
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
            return sorted(await aio.call(self._conn.client.get_children_async, self.root))
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
            client.get_children_async(f"{self.paths.group(group)}/{_IDS}"),
        ])
        _raise_unexpected(topics, state, ids)
        members = storage = None
        if not isinstance(state, NoNodeError):
            record = decode_state(group, state_path, state[0])
            members, storage = len(record.get("m") or ()), str(record.get("os", "zookeeper"))
        offsets = {} if isinstance(topics, NoNodeError) else await self._read_offsets(group, sorted(topics))
        return LegacyGroup(group, offsets, members, storage, 0 if isinstance(ids, NoNodeError) else len(ids))

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
                if name.isascii() and name.isdigit():
                    wanted.append((topic, int(name)))
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


def _raise_unexpected(*outcomes: object) -> None:
    """Raise the first failure other than NoNodeError (a retry decides what to do)."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, NoNodeError):
            raise outcome
