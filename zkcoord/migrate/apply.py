"""``migrate apply``: carry the plan out, group by group, resumably.

This module owns :class:`Adapters` (what every per-group step uses, made
once per process or Spark task) and :func:`apply_group`, which moves one
group through the phases of :mod:`zkcoord.migrate.status`::

    phase at start    what this run does                                  phase after
    ----------------  --------------------------------------------------  ---------------
    zookeeper         back up Kafka's and ZooKeeper's offsets             backed-up
    backed-up         one OffsetCommit of the plan's writes to Kafka      kafka-committed
    kafka-committed   switch the group to ``dual`` (modes.py)             dual
    dual, kafka       nothing: already applied                            (unchanged)

A run starts at the phase it finds and goes to ``dual``, so a crash at any
point is resumed by running again. Rules:

1. The backup is written before anything changes, into
   ``/zkcoord/migrations/<group>/backup`` (and to ``backup_sink``, e.g.
   ``--backup-file``), and is never rewritten once the group is past
   ``zookeeper``: it keeps the offsets from *before*.
2. The commit is planned afresh from the current facts
   (:mod:`zkcoord.core.migration`): after a crash that followed the commit,
   the offsets already in Kafka plan as ``equal`` and nothing is re-sent;
   Kafka is never moved backwards without ``allow_rewind``.
3. Partitions the plan does not write (unparsable legacy values, missing
   topics, offsets beyond the log end without ``force``, Kafka ahead) are
   reported in ``skipped``; the group's other partitions proceed.
4. A group with members in Kafka's own coordinator is refused (nothing is
   written) unless ``allow_active_kafka_members``: Kafka refuses commits
   from outside a live group, and two coordinators would share its partitions.
5. Errors of one group (ZkcoordError) are that group's result; the other
   groups go on.

The Spark job applies many groups through :mod:`zkcoord.migrate.apply_batch`:
these same phases, records and rules, each phase pipelined across a batch.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from zkcoord.core.migration import Decision, GroupPlan, Options
from zkcoord.errors import ZkcoordError
from zkcoord.kafka.forwarder import KafkaGroupOffsets
from zkcoord.kafka.offsets import KafkaGroup, TopicPartition
from zkcoord.zk.legacy import LegacyOffsets
from zkcoord.zk.modes import ModeChange, set_offset_storage
from zkcoord.migrate.plan import KafkaFacts, Selection, gather_plan, select_groups
from zkcoord.migrate.status import MigrationStore, Phase, encode, tp_rows
from zkcoord.zk import paths
from zkcoord.zk import layout
from zkcoord.zk.connection import ZkConnection

__all__ = ["Adapters", "ApplyOptions", "ApplyResult", "apply_group", "apply_groups", "plan_one", "run_with_adapters",
           "wall_clock_ms"]

T = TypeVar("T")
OnStep = Callable[[str, str], None]  # (group, phase reached)
BackupSink = Callable[[dict[str, Any]], None]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class KafkaAdapter(KafkaFacts, Protocol):
    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int]) -> None: ...


@dataclass(frozen=True)
class Adapters:
    """Started adapters: a ZooKeeper connection, Kafka (a started
    :class:`~zkcoord.kafka.offsets.KafkaOffsets`), the legacy layout, the
    migration records; ``clock`` gives wall-clock ms for the records."""

    conn: ZkConnection
    kafka: KafkaAdapter
    legacy: LegacyOffsets
    store: MigrationStore
    mode_timeout_s: float = 30.0
    clock: Callable[[], int] = wall_clock_ms

    @classmethod
    def of(cls, conn: ZkConnection, kafka: KafkaAdapter, zk_root: str = paths.DEFAULT_CONSUMERS_ROOT,
           **kwargs: Any) -> Adapters:
        return cls(conn, kafka, LegacyOffsets(conn, zk_root), MigrationStore(conn), **kwargs)

    @property
    def zk_root(self) -> str:
        return self.legacy.root


@dataclass(frozen=True)
class ApplyOptions:
    allow_rewind: bool = False
    force: bool = False
    allow_active_kafka_members: bool = False


@dataclass(frozen=True)
class ApplyResult:
    """``outcome``: ``applied`` (this run moved the group on), ``already-done``,
    ``refused`` or ``failed``; ``phase`` where the group is now."""

    group: str
    outcome: str
    phase: str
    committed: tuple[tuple[str, int, int], ...] = ()
    skipped: tuple[tuple[str, int, str, str], ...] = ()
    mode: ModeChange | None = None
    message: str = ""
    steps: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.outcome in ("applied", "already-done")


def run_with_adapters(zookeeper: str, bootstrap_servers: str | None, work: Callable[[Adapters], Awaitable[T]], *,
                      zk_root: str = paths.DEFAULT_CONSUMERS_ROOT, timeout_ms: int = 15_000,
                      ensure_layout: bool = False, fail_when_refused: bool = False, security=None,
                      kafka_security=None) -> T:
    """Blocking: start the adapters (Kafka only with ``bootstrap_servers``),
    run ``work(adapters)`` to its end, stop them. For the CLI and for a Spark
    task: ``run_with_adapters(zk, bs, lambda a: apply_group(a, "orders"))``.
    ``ensure_layout``: the work writes zkcoord znodes, so the ZooKeeper
    layout must be current (on an empty ZooKeeper it is created, as a
    daemon's first start does). ``fail_when_refused``: a command's
    connection (:class:`~zkcoord.zk.connection.ZkConnection`); ``security``:
    its login and ACLs (:class:`~zkcoord.zk.auth.ZkSecurity`); ``kafka_security``:
    the Kafka login (:class:`~zkcoord.kafka.client_security.KafkaClientSecurity`)."""
    paths.OffsetPaths(zk_root)  # ConfigError before any I/O
    kafka = KafkaGroupOffsets(bootstrap_servers, request_timeout_ms=timeout_ms,
                              security=kafka_security) if bootstrap_servers else None
    conn = ZkConnection(zookeeper, connect_timeout_ms=timeout_ms, request_timeout_ms=timeout_ms,
                        fail_when_refused=fail_when_refused, security=security)

    async def main() -> T:
        async with conn:
            if ensure_layout:
                await layout.ensure_layout(conn)
            if kafka is not None:
                await asyncio.to_thread(kafka.start)
            try:
                return await work(Adapters.of(conn, kafka, zk_root, mode_timeout_s=timeout_ms / 1000))
            finally:
                if kafka is not None:
                    await asyncio.to_thread(kafka.close)

    return asyncio.run(main())


async def plan_one(adapters: Adapters, group: str, options: Options = Options()) -> GroupPlan:
    """The plan of one group (NotFoundError if it has nothing under the root)."""
    plan = await gather_plan(adapters.legacy, adapters.kafka, Selection(groups=(group,)), options)
    return plan.groups[0]


async def apply_group(adapters: Adapters, group: str, options: ApplyOptions = ApplyOptions(), *,
                      on_step: OnStep | None = None, backup_sink: BackupSink | None = None) -> ApplyResult:
    """Move ``group`` on to ``dual`` from wherever it is (module docstring)."""
    store, steps = adapters.store, []
    record, version = await store.load(group)
    phase = Phase(record["phase"]) if record else Phase.ZOOKEEPER
    if phase in (Phase.DUAL, Phase.KAFKA):
        return ApplyResult(group, "already-done", phase.value, message=f"already applied (phase {phase.value})")
    kafka_group = (await asyncio.to_thread(adapters.kafka.groups, [group]))[group]
    if kafka_group.members and not options.allow_active_kafka_members:
        return ApplyResult(group, "refused", phase.value, message=_active_message(kafka_group))

    def reached(new: Phase) -> None:
        steps.append(new.value)
        if on_step is not None:
            on_step(group, new.value)

    committed: tuple = ()
    skipped: tuple = ()
    if phase in (Phase.ZOOKEEPER, Phase.BACKED_UP):
        plan = await plan_one(adapters, group, Options(options.allow_rewind, options.force))
        if plan.activity.state_error:  # before any backup or commit: nothing half-done
            return ApplyResult(group, "refused", phase.value, message=f"refused: {plan.activity.state_error}")
        skipped = tuple((r.facts.topic, r.facts.partition, r.decision.value, r.plan.note)
                        for r in plan.rows if not r.decision.writes and r.decision is not Decision.EQUAL)
        if phase is Phase.ZOOKEEPER:
            record, version = await _back_up(adapters, group, plan, record, version, backup_sink)
            phase = Phase.BACKED_UP
            reached(phase)
        committed = await _commit(adapters, group, plan)
        applied = {"at_ms": adapters.clock(), "committed": [list(c) for c in committed],
                   "skipped": [list(s) for s in skipped]}
        record, version = await store.advance(group, record, version, Phase.KAFKA_COMMITTED, adapters.clock(),
                                              applied=applied)
        phase = Phase.KAFKA_COMMITTED
        reached(phase)
    change = await set_offset_storage(adapters.conn, group, "dual", timeout_s=adapters.mode_timeout_s)
    await store.advance(group, record, version, Phase.DUAL, adapters.clock())
    reached(Phase.DUAL)
    return ApplyResult(group, "applied", Phase.DUAL.value, committed, skipped, change, steps=tuple(steps))


def _active_message(kafka_group: KafkaGroup) -> str:
    return (f"refused: {kafka_group.members} active member(s) in Kafka's own coordinator (state "
            f"{kafka_group.state}); Kafka refuses commits from outside a live group. Stop them, or pass "
            "--allow-active-kafka-members")


async def _back_up(adapters: Adapters, group: str, plan: GroupPlan, record: dict | None, version: int,
                   sink: BackupSink | None) -> tuple[dict, int]:
    """Claim the record (a versioned write: a concurrent run fails here, before
    touching the backup), write the backup, record ``backed-up``."""
    now = adapters.clock()
    base = dict(record or {"v": 1, "phase": Phase.ZOOKEEPER.value, "history": []}, run=uuid.uuid4().hex)
    version = await adapters.store.write(paths.migration(group), encode(f"the migration record of {group!r}", base),
                                         version)
    kafka = (await asyncio.to_thread(adapters.kafka.committed_offsets, [group]))[group]
    zookeeper = {(r.facts.topic, r.facts.partition): r.facts.legacy_raw for r in plan.rows}
    backup = {"v": 1, "group": group, "at_ms": now, "zk_root": adapters.zk_root,
              "kafka": tp_rows(kafka), "zookeeper": tp_rows(zookeeper)}
    if sink is not None:
        sink(backup)  # first: a file the operator asked for must exist before anything changes
    await adapters.store.put(paths.migration_backup(group), encode(f"the backup of group {group!r}", backup))
    return await adapters.store.advance(group, base, version, Phase.BACKED_UP, now, zk_root=adapters.zk_root)


async def _commit(adapters: Adapters, group: str, plan: GroupPlan) -> tuple[tuple[str, int, int], ...]:
    writes = {(r.facts.topic, r.facts.partition): r.plan.target_offset for r in plan.rows if r.decision.writes}
    if writes:
        await asyncio.to_thread(adapters.kafka.commit_offsets, group, writes)
    return tuple((t, p, o) for (t, p), o in sorted(writes.items()))


async def apply_groups(adapters: Adapters, selection: Selection, options: ApplyOptions = ApplyOptions(), *,
                       on_step: OnStep | None = None, backup_sink: BackupSink | None = None) -> list[ApplyResult]:
    """:func:`apply_group` for every selected legacy group, one at a time."""
    results = []
    for group in await select_groups(adapters.legacy, selection):
        try:
            results.append(await apply_group(adapters, group, options, on_step=on_step, backup_sink=backup_sink))
        except ZkcoordError as exc:
            record, _ = await _quiet_load(adapters.store, group)
            phase = (record or {}).get("phase", Phase.ZOOKEEPER.value)
            results.append(ApplyResult(group, "failed", phase, message=str(exc)))
    return results


async def _quiet_load(store: MigrationStore, group: str) -> tuple[dict | None, int]:
    try:
        return await store.load(group)
    except ZkcoordError:
        return None, -1
