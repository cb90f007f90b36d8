"""``migrate rollback``: a migrated group goes back to ZooKeeper offset storage.

This module owns both ways back::

    way            steps                                                         offsets afterwards
    -------------  ------------------------------------------------------------  ---------------------------
    (default)      1. a ``kafka`` group goes to ``dual`` first, so the daemon     ZooKeeper: per partition the
                      writes both stores while we copy                            max of ZooKeeper and Kafka
                   2. Kafka's offsets are copied into the legacy layout where
                      they are ahead (versioned writes; a concurrent commit makes
                      us read again, so a newer offset is never overwritten)
                   3. the group goes to ``zookeeper``
    --to-backup    1. the group goes to ``zookeeper`` (the daemon stops writing   both stores as the backup of
                      Kafka)                                                      ``migrate apply`` had them
                   2. the backup's legacy offsets are written back (a deliberate
                      rewind: stop the consumers first)
                   3. Kafka gets the backup's offsets back; partitions Kafka had
                      no offset for then lose theirs (OffsetDelete)

Either way the migration record ends in phase ``zookeeper``; ``migrate
apply`` can start again from there (with a new backup).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from zkcoord.core.migration import parse_legacy_offset
from zkcoord.errors import ConflictError, NotFoundError, UsageError, ZkcoordError
from zkcoord.kafka.offsets import TopicPartition
from zkcoord.migrate.apply import Adapters
from zkcoord.zk.modes import ModeChange, read_mode, set_offset_storage
from zkcoord.migrate.plan import Selection
from zkcoord.migrate.status import Phase
from zkcoord.migrate.verify import migrated_groups
from zkcoord.zk import paths

__all__ = ["RollbackResult", "rollback_group", "rollback_groups", "raise_legacy_to"]

_ATTEMPTS = 5
_MAX_OPS = 900
ROLLBACK_FROM = (Phase.BACKED_UP, Phase.KAFKA_COMMITTED, Phase.DUAL, Phase.KAFKA)


@dataclass(frozen=True)
class RollbackResult:
    """``outcome``: ``rolled-back`` or ``not-migrated``; ``written``: the legacy
    offsets this run wrote; ``kafka_restored`` / ``kafka_deleted``: --to-backup."""

    group: str
    outcome: str
    phase: str
    written: tuple[tuple[str, int, int], ...] = ()
    kafka_restored: tuple[tuple[str, int, int], ...] = ()
    kafka_deleted: tuple[tuple[str, int], ...] = ()
    modes: tuple[ModeChange, ...] = ()
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == "rolled-back"


async def rollback_group(adapters: Adapters, group: str, *, to_backup: bool = False) -> RollbackResult:
    record, version = await adapters.store.load(group)
    phase = Phase(record["phase"]) if record else Phase.ZOOKEEPER
    mode, _ = await read_mode(adapters.conn, group)
    if phase is Phase.ZOOKEEPER and mode == "zookeeper":
        return RollbackResult(group, "not-migrated", phase.value, message="not migrated: nothing to roll back")
    if to_backup:
        result = await _to_backup(adapters, group)
    else:
        modes = []
        if mode == "kafka":
            modes.append(await _switch(adapters, group, "dual"))
        kafka = (await asyncio.to_thread(adapters.kafka.committed_offsets, [group]))[group]
        written = await raise_legacy_to(adapters, group, kafka)
        modes.append(await _switch(adapters, group, "zookeeper"))
        result = RollbackResult(group, "rolled-back", Phase.ZOOKEEPER.value, written, modes=tuple(modes))
    now = adapters.clock()
    await adapters.store.advance(group, record, version, Phase.ZOOKEEPER, now, rolled_back={
        "at_ms": now, "to_backup": to_backup, "from_phase": phase.value, "written": len(result.written),
        "kafka_restored": len(result.kafka_restored), "kafka_deleted": len(result.kafka_deleted)})
    return result


async def _switch(adapters: Adapters, group: str, mode: str) -> ModeChange:
    return await set_offset_storage(adapters.conn, group, mode, timeout_s=adapters.mode_timeout_s)


async def raise_legacy_to(adapters: Adapters, group: str,
                          targets: Mapping[TopicPartition, int]) -> tuple[tuple[str, int, int], ...]:
    """Write ``targets`` into the legacy layout where ZooKeeper has less (or
    nothing, or no decimal); never lowers a legacy offset. Returns what was written."""
    written: list[tuple[str, int, int]] = []
    for _ in range(_ATTEMPTS):
        current = await adapters.legacy.read_versions(group)
        ops = []
        for (topic, partition), offset in sorted(targets.items()):
            raw, znode_version = current.get((topic, partition), (None, -1))
            legacy = parse_legacy_offset(raw)
            if (topic, partition) in current and legacy is not None and legacy >= offset:
                continue
            ops.append((topic, partition, offset, znode_version if (topic, partition) in current else None))
        if not ops:
            return tuple(sorted(written))
        changed = False
        for i in range(0, len(ops), _MAX_OPS):
            if not await adapters.legacy.write_versioned(group, ops[i:i + _MAX_OPS]):
                changed = True  # a commit landed meanwhile: read again, keep whatever is larger
                break
            written += [(t, p, o) for t, p, o, _ in ops[i:i + _MAX_OPS]]
        if changed:
            continue
    raise ConflictError(f"legacy offsets of group {group!r} kept changing while the rollback copied Kafka's "
                        f"offsets ({_ATTEMPTS} attempts); re-run")




async def _to_backup(adapters: Adapters, group: str) -> RollbackResult:
    backup = await adapters.store.load_child(paths.migration_backup(group))
    if backup is None:
        raise NotFoundError(f"group {group!r} has no backup ({paths.migration_backup(group)}); "
                            "roll back without --to-backup to copy Kafka's offsets instead")
    if backup.get("zk_root") != adapters.zk_root:
        raise UsageError(f"the backup of group {group!r} was taken under {backup.get('zk_root')}; "
                         f"pass --zk-root {backup.get('zk_root')}")
    change = await _switch(adapters, group, "zookeeper")
    legacy = {(t, p): parse_legacy_offset(raw) for t, p, raw in backup.get("zookeeper", [])}
    legacy = {tp: o for tp, o in legacy.items() if o is not None}  # unparsable values were never changed
    if legacy:
        await adapters.legacy.write({group: legacy})
    before = {(t, p): o for t, p, o in backup.get("kafka", [])}
    now = (await asyncio.to_thread(adapters.kafka.committed_offsets, [group]))[group]
    restore = {tp: o for tp, o in before.items() if now.get(tp) != o}
    if restore:
        await asyncio.to_thread(adapters.kafka.commit_offsets, group, restore)
    extra = sorted(set(now) - set(before))
    if extra:
        delete = getattr(adapters.kafka, "delete_offsets", None)
        if delete is None:
            raise ZkcoordError(f"group {group!r}: Kafka holds offsets the backup did not have ({len(extra)} "
                               "partition(s)) and this Kafka adapter cannot delete them; use KafkaGroupOffsets")
        await asyncio.to_thread(delete, group, extra)
    return RollbackResult(group, "rolled-back", Phase.ZOOKEEPER.value,
                          tuple((t, p, o) for (t, p), o in sorted(legacy.items())),
                          tuple((t, p, o) for (t, p), o in sorted(restore.items())), tuple(extra), (change,))


async def rollback_groups(adapters: Adapters, selection: Selection, *, to_backup: bool = False) -> list[RollbackResult]:
    groups = await migrated_groups(adapters, selection, phases=ROLLBACK_FROM)
    return [await rollback_group(adapters, g, to_backup=to_backup) for g in groups]
