"""Where each group stands in its migration, kept in ZooKeeper.

This module owns ``/zkcoord/migrations/<group>`` (the group's migration
record), its ``backup`` and ``archive`` children, and ``migrate status``.
The group's offset-storage *mode* lives in its state record
(:mod:`zkcoord.zk.modes`); the migration record says how far the
commands got, so a re-run continues where a crash stopped one.

Phases, and the command that moves a group on (h11-style: a table, not ifs)::

    phase            meaning                                    next (command)
    ---------------  -----------------------------------------  -------------------------------
    zookeeper        not migrated, or rolled back               backed-up (apply)
    backed-up        backup written; Kafka not yet committed    kafka-committed (apply)
    kafka-committed  the plan's offsets are in Kafka            dual (apply)
    dual             the group commits to both stores           kafka (finalize), zookeeper (rollback)
    kafka            the group commits to Kafka only            zookeeper (rollback)

Record (JSON, compact)::

    {"v": 1, "phase": "dual", "since_ms": 1795315596682, "zk_root": "/consumers",
     "history": [["backed-up", ms], ["kafka-committed", ms], ["dual", ms]],
     "applied": {"at_ms": ms, "committed": [[topic, partition, offset], ...],
                 "skipped": [[topic, partition, decision, note], ...]},
     "verify": {"at_ms": ms, "clean": true, "checked": 4, "behind": [[topic, partition, zk, kafka], ...]},
     "finalized": {...}, "rolled_back": {...}}

``backup``: ``{"v": 1, "at_ms", "zk_root", "kafka": [[t, p, offset, metadata]],
"zookeeper": [[t, p, raw text or null]]}``, written once per migration
(never overwritten by a re-run, so it keeps the offsets from *before*).

Rules: every write is versioned (``ConflictError`` when another command
changed the record meanwhile); a write whose answer was lost is resolved by
reading it back; a corrupt record is a StateError naming its znode.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from zkcoord.errors import ConflictError, StateError
from zkcoord.zk.modes import read_mode
from zkcoord.zk import aio, paths
from zkcoord.zk.connection import ZkConnection

__all__ = ["Phase", "NEXT", "MigrationStore", "advanced", "GroupStatus", "group_status", "encode", "tp_rows"]

RECORD_VERSION = 1
MAX_BYTES = 1_000_000
_HISTORY = 50  # phase changes kept in a record


class Phase(enum.Enum):
    ZOOKEEPER = "zookeeper"
    BACKED_UP = "backed-up"
    KAFKA_COMMITTED = "kafka-committed"
    DUAL = "dual"
    KAFKA = "kafka"


NEXT: dict[Phase, frozenset[Phase]] = {
    Phase.ZOOKEEPER: frozenset({Phase.BACKED_UP}),
    Phase.BACKED_UP: frozenset({Phase.KAFKA_COMMITTED, Phase.ZOOKEEPER}),
    Phase.KAFKA_COMMITTED: frozenset({Phase.DUAL, Phase.ZOOKEEPER}),
    Phase.DUAL: frozenset({Phase.KAFKA, Phase.ZOOKEEPER}),
    Phase.KAFKA: frozenset({Phase.ZOOKEEPER}),
}


def encode(what: str, value: dict[str, Any]) -> bytes:
    data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    if len(data) > MAX_BYTES:
        raise StateError(f"{what} would be {len(data)} bytes, over ZooKeeper's limit of {MAX_BYTES}; "
                         "migrate fewer partitions per group or raise jute.maxbuffer")
    return data


def tp_rows(offsets: dict, *extra: dict) -> list[list]:
    """``{(t, p): v}`` (and more maps by the same keys) as sorted ``[[t, p, v, ...]]`` rows."""
    return [[t, p, v, *(more.get((t, p)) for more in extra)] for (t, p), v in sorted(offsets.items())]


def _decode(path: str, data: bytes) -> dict[str, Any]:
    try:
        record = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise StateError(f"migration znode {path} is not JSON ({exc}); inspect it, then repair or delete it") from None
    if not isinstance(record, dict) or record.get("v") != RECORD_VERSION:
        raise StateError(f"migration znode {path} is not a version-{RECORD_VERSION} record; "
                         "inspect it, then repair or delete it")
    return record


def advanced(group: str, record: dict | None, phase: Phase, now_ms: int, **fields: Any) -> dict:
    """The record moved on to ``phase`` with ``fields`` set (pure; what
    :meth:`MigrationStore.advance` writes); StateError for a move ``NEXT``
    does not allow."""
    old = record or {"v": RECORD_VERSION, "phase": Phase.ZOOKEEPER.value, "history": []}
    current = Phase(old.get("phase", Phase.ZOOKEEPER.value))
    if phase is not current and phase not in NEXT[current]:
        raise StateError(f"group {group!r}: the migration cannot go from {current.value} to {phase.value}")
    new = dict(old, **fields)
    if phase is not current:
        new["phase"], new["since_ms"] = phase.value, now_ms
        new["history"] = (list(old.get("history", [])) + [[phase.value, now_ms]])[-_HISTORY:]
    return new


class MigrationStore:
    """Migration records of every group; no I/O in the constructor."""

    def __init__(self, conn: ZkConnection) -> None:
        self._conn = conn

    async def list_groups(self) -> list[str]:
        async def inner() -> list[str]:
            try:
                return sorted(await aio.call(self._conn.client.get_children_async, paths.MIGRATIONS))
            except NoNodeError:
                return []
        return await self._conn.retry("list the migration records", inner)

    async def load(self, group: str) -> tuple[dict[str, Any] | None, int]:
        """(record, version); (None, -1) if the group has none."""
        return await self._read(paths.migration(group))

    async def load_child(self, path: str) -> dict[str, Any] | None:
        return (await self._read(path))[0]

    async def _read(self, path: str) -> tuple[dict[str, Any] | None, int]:
        async def inner():
            try:
                data, stat = await aio.call(self._conn.client.get_async, path)
            except NoNodeError:
                return None, -1
            if not data:  # a parent created by makepath for a child
                return None, stat.version
            return _decode(path, data), stat.version
        return await self._conn.retry(f"read {path}", inner)

    async def advance(self, group: str, record: dict | None, version: int, phase: Phase, now_ms: int,
                      **fields: Any) -> tuple[dict, int]:
        """The record moved to ``phase`` (with ``fields`` set), written at
        ``version``; returns (record, new version). Moving to the phase it
        is in only updates the fields."""
        new = advanced(group, record, phase, now_ms, **fields)
        path = paths.migration(group)
        return new, await self.write(path, encode(f"the migration record of group {group!r}", new), version)

    async def write(self, path: str, data: bytes, version: int) -> int:
        """Set ``path`` at ``version`` (-1: create, or fill a data-less parent
        at 0); ConflictError if someone else wrote it meanwhile."""
        tried = [False]

        async def inner() -> int:
            client = self._conn.client
            if tried[0]:
                current, stat = await aio.call(client.get_async, path)
                if current == data:
                    return stat.version  # our write landed; its answer was lost
            tried[0] = True
            try:
                if version < 0:
                    await aio.call(client.create_async, path, data, makepath=True)
                    return 0
                return (await aio.call(client.set_async, path, data, version)).version
            except (NodeExistsError, BadVersionError, NoNodeError):
                raise ConflictError(f"{path} was changed by another command while this one ran; "
                                    "nothing of this step was written: re-run") from None
        return await self._conn.retry(f"write {path}", inner)

    async def put(self, path: str, data: bytes) -> None:
        """Create or overwrite ``path`` (archives)."""
        async def inner() -> None:
            try:
                await aio.call(self._conn.client.set_async, path, data)
            except NoNodeError:
                try:
                    await aio.call(self._conn.client.create_async, path, data, makepath=True)
                except NodeExistsError:
                    await aio.call(self._conn.client.set_async, path, data)
        await self._conn.retry(f"write {path}", inner)

    async def create_once(self, path: str, data: bytes) -> bool:
        """Create ``path`` unless it exists; True if this call created it."""
        async def inner() -> bool:
            try:
                await aio.call(self._conn.client.create_async, path, data, makepath=True)
                return True
            except NodeExistsError:
                current, _ = await aio.call(self._conn.client.get_async, path)
                return current == data  # ours, if a retry follows a lost answer
        return await self._conn.retry(f"create {path}", inner)


@dataclass(frozen=True)
class GroupStatus:
    """One group for ``migrate status``: its mode (from its state record),
    its migration phase, when that changed, and the last verify."""

    group: str
    mode: str
    phase: str
    since_ms: int | None
    verify_at_ms: int | None = None
    verify_clean: bool | None = None
    verify_behind: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "mode": self.mode, "phase": self.phase, "since_ms": self.since_ms,
                "verify": None if self.verify_at_ms is None else {
                    "at_ms": self.verify_at_ms, "clean": self.verify_clean, "behind": self.verify_behind}}


async def group_status(conn: ZkConnection, store: MigrationStore, groups: Iterable[str]) -> list[GroupStatus]:
    """The status of each group (those without a record: phase ``zookeeper``)."""
    async def one(group: str) -> GroupStatus:
        (record, _), (mode, _) = await asyncio.gather(store.load(group), read_mode(conn, group))
        record = record or {}
        verify = record.get("verify") or {}
        return GroupStatus(group, mode, record.get("phase", Phase.ZOOKEEPER.value), record.get("since_ms"),
                           verify.get("at_ms"), verify.get("clean"), len(verify.get("behind") or ()))
    return list(await asyncio.gather(*(one(g) for g in sorted(set(groups)))))
