"""``migrate finalize``: groups in ``dual`` whose verify is clean move to ``kafka``.

This module owns the last step of a migration and the legacy znodes' end::

    phase at start   what finalize does                                       phase after
    ---------------  -------------------------------------------------------  -----------
    dual             verify now (recorded); not clean: stop, change nothing   dual
                     clean: switch the group to ``kafka`` (modes.py), then     kafka
                     archive its legacy offsets; with ``delete_legacy``,
                     delete them
    kafka            archive again (merged) and, with ``delete_legacy``,      kafka
                     delete what is left (a re-run finishes a crashed one)
    other            nothing: not migrated, or not applied completely         (unchanged)

Rules:

1. The switch comes before the archive: once the group is in ``kafka`` mode
   the daemon stops writing ZooKeeper, so the archive is the final state.
2. The archive (``/zkcoord/migrations/<group>/archive``:
   ``{"v": 1, "at_ms", "zk_root", "offsets": [[topic, partition, raw text]]}``)
   merges with an earlier one, so a deletion interrupted half-way and re-run
   keeps every value it deleted. With ``archive_sink`` (``--backup-file``)
   it is also written there before anything is deleted.
3. Deletion is per topic one multi-op: each partition's znode at the version
   that was archived, then the topic's directory. A legacy consumer that
   committed since makes it fail as a whole: ConflictError, re-run. Commit
   metadata (``offsets-metadata``) goes with it; ``ids`` and ``owners`` stay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zkcoord.migrate.apply import Adapters
from zkcoord.zk.modes import ModeChange, set_offset_storage
from zkcoord.migrate.plan import Selection
from zkcoord.migrate.status import Phase, encode
from zkcoord.migrate.verify import VerifyResult, migrated_groups, verify_group
from zkcoord.zk import paths

__all__ = ["FinalizeResult", "finalize_group", "finalize_groups"]

ArchiveSink = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class FinalizeResult:
    """``outcome``: ``finalized``, ``already-done``, ``not-clean``, ``not-migrated``."""

    group: str
    outcome: str
    phase: str
    verify: VerifyResult | None = None
    archived: int = 0
    deleted: int = 0
    mode: ModeChange | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in ("finalized", "already-done")


async def finalize_group(adapters: Adapters, group: str, *, delete_legacy: bool = False,
                         archive_sink: ArchiveSink | None = None) -> FinalizeResult:
    record, version = await adapters.store.load(group)
    phase = Phase(record["phase"]) if record else Phase.ZOOKEEPER
    if phase not in (Phase.DUAL, Phase.KAFKA):
        return FinalizeResult(group, "not-migrated", phase.value,
                              message=f"phase {phase.value}: finalize needs a group in dual (run migrate apply)")
    verify, change, outcome = None, None, "already-done"
    if phase is Phase.DUAL:
        verify = await verify_group(adapters, group)
        if not verify.clean:
            return FinalizeResult(group, "not-clean", phase.value, verify,
                                  message=f"{len(verify.behind)} partition(s) where Kafka is behind ZooKeeper, "
                                          f"{len(verify.zookeeper_behind)} where ZooKeeper is behind Kafka; "
                                          "still dual (see migrate verify)")
        change = await set_offset_storage(adapters.conn, group, "kafka", timeout_s=adapters.mode_timeout_s)
        record, version = await adapters.store.load(group)
        record, version = await adapters.store.advance(group, record, version, Phase.KAFKA, adapters.clock())
        outcome = "finalized"
    archived, deleted = await _archive_and_delete(adapters, group, delete_legacy, archive_sink)
    await adapters.store.advance(group, record, version, Phase.KAFKA, adapters.clock(), finalized={
        "at_ms": adapters.clock(), "archived": archived, "deleted": deleted or
        (record.get("finalized") or {}).get("deleted", 0)})
    return FinalizeResult(group, outcome, Phase.KAFKA.value, verify, archived, deleted, change)


async def _archive_and_delete(adapters: Adapters, group: str, delete_legacy: bool,
                              sink: ArchiveSink | None) -> tuple[int, int]:
    layout = adapters.legacy.paths
    legacy = await adapters.legacy.read_versions(group)
    archive_path = paths.migration_archive(group)
    old = await adapters.store.load_child(archive_path) or {}
    merged = {(t, p): raw for t, p, raw in old.get("offsets", [])}
    merged.update({tp: raw for tp, (raw, _) in legacy.items()})
    if legacy or not old:
        archive = {"v": 1, "group": group, "at_ms": adapters.clock(), "zk_root": layout.root,
                   "offsets": [[t, p, raw] for (t, p), raw in sorted(merged.items())]}
        if sink is not None:
            sink(archive)
        await adapters.store.put(archive_path, encode(f"the archive of group {group!r}", archive))
    if not delete_legacy:
        return len(merged), 0
    return len(merged), await adapters.legacy.delete_archived(group, legacy)


async def finalize_groups(adapters: Adapters, selection: Selection, *, delete_legacy: bool = False,
                          archive_sink: ArchiveSink | None = None) -> list[FinalizeResult]:
    groups = await migrated_groups(adapters, selection, phases=(Phase.DUAL, Phase.KAFKA))
    return [await finalize_group(adapters, g, delete_legacy=delete_legacy, archive_sink=archive_sink)
            for g in groups]
