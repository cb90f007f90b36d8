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

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError

from zkcoord.errors import ConflictError
from zkcoord.migrate.apply import Adapters
from zkcoord.zk.modes import ModeChange, set_offset_storage
from zkcoord.migrate.plan import Selection
from zkcoord.migrate.status import Phase, encode
from zkcoord.migrate.verify import VerifyResult, migrated_groups, verify_group
from zkcoord.zk import aio, paths

__all__ = ["FinalizeResult", "finalize_group", "finalize_groups", "read_legacy_versions"]

ArchiveSink = Callable[[dict[str, Any]], None]
Legacy = dict[tuple[str, int], tuple[str | None, int]]  # (topic, partition) -> (raw text, znode version)
_MAX_OPS = 900


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
                                  message=f"{len(verify.behind)} partition(s) where Kafka is behind ZooKeeper; "
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
    legacy = await read_legacy_versions(adapters, group)
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
    return len(merged), await _delete_legacy(adapters, group, legacy)


async def read_legacy_versions(adapters: Adapters, group: str) -> Legacy:
    """Every legacy offset znode of the group: its text and version."""
    conn, layout = adapters.conn, adapters.legacy.paths

    async def inner() -> Legacy:
        client, loop = conn.client, asyncio.get_running_loop()
        try:
            topics = await aio.call(client.get_children_async, layout.offsets_dir(group))
        except NoNodeError:
            return {}
        listed = await aio.gather(loop, [client.get_children_async(layout.topic_dir(group, t)) for t in topics])
        wanted = [(t, int(n)) for t, names in zip(topics, listed) if isinstance(names, list)
                  for n in names if n.isascii() and n.isdigit()]
        values = await aio.gather(loop, [client.get_async(layout.partition(group, t, p)) for t, p in wanted])
        found: Legacy = {}
        for tp, value in zip(wanted, values):
            if isinstance(value, NoNodeError):
                continue
            if isinstance(value, BaseException):
                raise value
            data, stat = value
            found[tp] = (None if data is None else data.decode("utf-8", "backslashreplace"), stat.version)
        return found

    return await conn.retry(f"read the legacy offsets of group {group!r}", inner)


async def _delete_legacy(adapters: Adapters, group: str, legacy: Legacy) -> int:
    """Delete the archived znodes (at their versions) and the metadata; the count deleted."""
    conn, layout = adapters.conn, adapters.legacy.paths
    deleted = 0
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), (_, version) in sorted(legacy.items()):
        by_topic.setdefault(topic, []).append((partition, version))
    for topic, parts in by_topic.items():
        for i in range(0, len(parts), _MAX_OPS):
            chunk = parts[i:i + _MAX_OPS]
            last = i + _MAX_OPS >= len(parts)
            ops = [(layout.partition(group, topic, p), v) for p, v in chunk]
            ops += [(layout.topic_dir(group, topic), -1)] if last else []
            await _delete_all(adapters, group, ops)
            deleted += len(chunk)
    await _delete_all(adapters, group, [(layout.offsets_dir(group), -1)], missing_ok=True)
    await _delete_tree(adapters, layout.metadata_dir(group))
    return deleted


async def _delete_all(adapters: Adapters, group: str, ops: list[tuple[str, int]], missing_ok: bool = False) -> None:
    conn = adapters.conn

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
                await _delete_all(adapters, group, remaining, missing_ok)
            return
        if isinstance(exc, (BadVersionError, NotEmptyError)):
            raise ConflictError(f"legacy offsets of group {group!r} changed after they were archived ({ops[index][0]}"
                                "): a legacy consumer still commits to ZooKeeper? nothing of this topic was "
                                "deleted; re-run finalize --delete-legacy")
        raise aio.translate(exc, f"delete the legacy offsets of group {group!r}", conn.hosts)

    await conn.retry(f"delete the legacy offsets of group {group!r}", inner)


async def _delete_tree(adapters: Adapters, root: str) -> None:
    """Delete ``root`` and everything below (the commit metadata: derived data)."""
    async def inner() -> None:
        try:  # kazoo's recursive delete is blocking: run it off the loop
            await asyncio.to_thread(adapters.conn.client.delete, root, recursive=True)
        except NoNodeError:
            pass
    await adapters.conn.retry(f"delete {root}", inner)


async def finalize_groups(adapters: Adapters, selection: Selection, *, delete_legacy: bool = False,
                          archive_sink: ArchiveSink | None = None) -> list[FinalizeResult]:
    groups = await migrated_groups(adapters, selection, phases=(Phase.DUAL, Phase.KAFKA))
    return [await finalize_group(adapters, g, delete_legacy=delete_legacy, archive_sink=archive_sink)
            for g in groups]
