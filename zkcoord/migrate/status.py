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
     "verify": {"at_ms": ms, "clean": true, "checked": 4, "behind": [[topic, partition, zk, kafka], ...],
                "zookeeper_behind": [[topic, partition, zk or null, kafka], ...]},
     "finalized": {...}, "rolled_back": {...}}

``backup``: ``{"v": 1, "at_ms", "zk_root", "kafka": [[t, p, offset, metadata]],
"zookeeper": [[t, p, raw text or null]]}``, written once per migration
(never overwritten by a re-run, so it keeps the offsets from *before*).

The znodes are read and written by :mod:`zkcoord.zk.migrations` (every
write versioned, a corrupt record a StateError naming its znode); this
module owns what the records mean.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from zkcoord.errors import StateError
from zkcoord.zk import paths
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.migrations import RECORD_VERSION, MigrationRecords, encode
from zkcoord.zk.modes import read_mode

__all__ = ["Phase", "NEXT", "MigrationStore", "advanced", "GroupStatus", "group_status", "encode", "tp_rows"]

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


def tp_rows(offsets: dict, *extra: dict) -> list[list]:
    """``{(t, p): v}`` (and more maps by the same keys) as sorted ``[[t, p, v, ...]]`` rows."""
    return [[t, p, v, *(more.get((t, p)) for more in extra)] for (t, p), v in sorted(offsets.items())]


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


class MigrationStore(MigrationRecords):
    """The migration records, moved on by the phase rules above."""

    async def advance(self, group: str, record: dict | None, version: int, phase: Phase, now_ms: int,
                      **fields: Any) -> tuple[dict, int]:
        """The record moved to ``phase`` (with ``fields`` set), written at
        ``version``; returns (record, new version). Moving to the phase it
        is in only updates the fields."""
        new = advanced(group, record, phase, now_ms, **fields)
        path = paths.migration(group)
        return new, await self.write(path, encode(f"the migration record of group {group!r}", new), version)


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
    verify_behind: int = 0  # partitions where Kafka was behind ZooKeeper
    verify_zookeeper_behind: int = 0  # partitions where ZooKeeper was behind (or without) Kafka's offset

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "mode": self.mode, "phase": self.phase, "since_ms": self.since_ms,
                "verify": None if self.verify_at_ms is None else {
                    "at_ms": self.verify_at_ms, "clean": self.verify_clean, "behind": self.verify_behind,
                    "zookeeper_behind": self.verify_zookeeper_behind}}


async def group_status(conn: ZkConnection, store: MigrationStore, groups: Iterable[str]) -> list[GroupStatus]:
    """The status of each group (those without a record: phase ``zookeeper``)."""
    async def one(group: str) -> GroupStatus:
        (record, _), (mode, _) = await asyncio.gather(store.load(group), read_mode(conn, group))
        record = record or {}
        verify = record.get("verify") or {}
        return GroupStatus(group, mode, record.get("phase", Phase.ZOOKEEPER.value), record.get("since_ms"),
                           verify.get("at_ms"), verify.get("clean"), len(verify.get("behind") or ()),
                           len(verify.get("zookeeper_behind") or ()))
    return list(await asyncio.gather(*(one(g) for g in sorted(set(groups)))))
