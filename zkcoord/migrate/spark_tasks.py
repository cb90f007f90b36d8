"""What one Spark task of the migration job does with its share of the groups.

This module owns the executor side of :mod:`zkcoord.migrate.spark_job`: the
report rows' values and statuses (their columns, :data:`REPORT_COLUMNS`, are
:mod:`zkcoord.migrate.spark_report`'s), the task entry point
:func:`run_partition` given to ``mapPartitionsWithIndex``, the summary each
task adds to the job's accumulator (:class:`JobSummary`) and the progress
lines a task sends to the driver (:class:`ProgressReporter`). Its ZooKeeper
reads are in :mod:`zkcoord.zk.bulk_reads`. For a local report a task also
writes its rows' part of ``partitions.csv``
(:class:`~zkcoord.migrate.spark_report.CsvPart`) as it yields them.

A task opens ONE :class:`~zkcoord.zk.connection.ZkConnection` and ONE
:class:`~zkcoord.kafka.offsets.KafkaOffsets` for all its groups, runs one
asyncio loop, and works through its groups in batches of
``TaskSpec.batch_groups``. Per batch: the legacy reads of every group at once
(pipelined, in multiRead requests of 1000 znodes), Kafka's committed offsets
and group states for the whole batch, then partition counts and log ranges of the topics and partitions not seen
yet (cached for the task), then the decisions, with the single-group path's
own functions: ``_plan_one`` of :mod:`zkcoord.migrate.plan` (facts ->
:func:`~zkcoord.core.migration.plan_group`), :func:`~zkcoord.migrate.verify.compare`
and, for apply, :func:`~zkcoord.migrate.apply_batch.apply_batch` (apply_group's
phases pipelined across the batch; it hands any unusual group to apply_group
itself). The next batch's reads are in flight while a batch is decided and
its rows handed to Spark. In apply mode a batch asks Kafka only inside
apply_batch, after reading the groups' migration records.

Modes and the ``status`` of each row (a table, not ifs)::

    mode    status        meaning
    ------  ------------  -----------------------------------------------------------------
    plan    write         applying would commit ``target`` (the decision writes)
    plan    skip          applying would leave Kafka as it is
    verify  ok            Kafka is from min(legacy, log end) to max(legacy, log start)
    verify  behind        Kafka has no offset there, or a smaller one (verify.compare)
    verify  zookeeper-    Kafka has a larger offset than ZooKeeper (verify.compare; a
            behind        partition only Kafka has is counted in the group's result, no row)
    verify  unverifiable  the topic or partition is gone from Kafka, or the legacy value
                          is not an offset: not compared
    verify  not-migrated  one row per group named with --group whose migration record is
                          not at kafka-committed, dual or kafka (with --all / --pattern
                          such groups get no row, as in migrate verify: they are counted
                          as the group outcome ``not-verified``)
    apply   committed     apply committed ``target`` to Kafka in this run
    apply   skipped       the plan writes nothing there (see ``decision`` and ``note``)
    apply   unchanged     Kafka already had it (equal), or the commit was done by an
                          earlier run that this one resumed
    apply   already-done  the group was already in dual or kafka: left alone
    apply   refused       the group has members in Kafka's own coordinator
    apply   failed        apply failed for the group (the groups report says why)
    any     error         the group could not be read: one row without a topic whose
                          note says why; the other groups go on

Rules:

1. A failure of one group's data (a corrupt state record, a znode we may not
   read, a name that cannot be a znode) is that group's ``error`` row; in
   apply, any ZkcoordError of a group is its ``failed`` outcome, as in
   ``apply_groups``. Losing ZooKeeper or Kafka while reading fails the task
   with the ZkcoordError, which the driver raises again.
2. plan writes nothing. verify reads ZooKeeper before Kafka (a dual-commit
   consumer writes ZooKeeper first) and records each migrated group's result
   in its migration record, as ``migrate verify`` does (``record_verify``).
   apply is ``apply_batch`` over each batch, split into ``apply_concurrency``
   parts in flight at once; a group it hands to ``apply_group`` gets the
   task's adapters, with a ``LegacyOffsets`` that reads through the same
   multiRead reader. verify's record writes of a batch are in flight at once.
3. Progress lines are best effort: a driver that cannot be reached costs the
   bar its updates, never the job.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zkcoord.core.migration import Decision, GroupPlan, Options, make_plan
from zkcoord.errors import ServiceUnavailableError, UsageError, ZkcoordError
from zkcoord.kafka.offsets import KafkaOffsets, LogRange, TopicPartition
from zkcoord.migrate.apply import Adapters, ApplyOptions, ApplyResult, wall_clock_ms
from zkcoord.migrate.apply_batch import apply_batch
from zkcoord.migrate.spark_report import REPORT_COLUMNS, CsvPart  # the report's columns: its module's
from zkcoord.zk.legacy import LegacyGroup, LegacyOffsets
from zkcoord.migrate.plan import _plan_one  # the single-group path's facts -> plan step, shared on purpose
from zkcoord.zk.bulk_reads import MultiReadLegacy, ReaderLegacy, Reads, SelectHandler, SingleReads, reader_for
from zkcoord.migrate.status import MigrationStore, Phase
from zkcoord.migrate.verify import MIGRATED, VerifyResult, compare
from zkcoord.zk import paths
from zkcoord.zk.auth import ZkSecurity
from zkcoord.zk.connection import ZkConnection

if TYPE_CHECKING:
    from zkcoord.kafka.client_security import KafkaClientSecurity

__all__ = ["REPORT_COLUMNS", "MODES", "ZK_READS", "TaskSpec", "JobSummary", "SummaryParam", "ProgressReporter",
           "plan_status", "run_partition", "no_rows"]

log = logging.getLogger(__name__)

MODES = ("plan", "verify", "apply")
ZK_READS = ("auto", "multi", "single")
_MIGRATED_PHASES = frozenset(p.value for p in MIGRATED)
_UNVERIFIABLE = frozenset({Decision.TOPIC_MISSING, Decision.PARTITION_MISSING, Decision.UNPARSABLE,
                           Decision.NO_POSITION})
_GC_THRESHOLD = 50_000  # gen-0 collections during a task (run_partition)


def plan_status(decision: Decision) -> str:
    """``write`` or ``skip`` (plan mode).

    >>> plan_status(Decision.COPY), plan_status(Decision.EQUAL)
    ('write', 'skip')
    """
    return "write" if decision.writes else "skip"


@dataclass(frozen=True)
class TaskSpec:
    """Everything a task needs, pickled to the executors (no live objects).

    ``absent``: selected groups with nothing under the legacy root (verify
    notes them, as ``migrate verify`` does); ``named``: the groups were named
    with --group (verify then reports unmigrated ones instead of skipping them).
    """

    zookeeper: str
    bootstrap_servers: str
    zk_root: str = paths.DEFAULT_CONSUMERS_ROOT
    mode: str = "plan"
    options: Options = Options()
    allow_active_kafka_members: bool = False
    record_verify: bool = True
    timeout_ms: int = 15_000
    batch_groups: int = 100
    apply_concurrency: int = 4
    zk_reads: str = "auto"
    named: bool = False
    absent: frozenset[str] = frozenset()
    progress_address: tuple[str, int] | None = None
    progress_token: str = ""
    csv_dir: str | None = None  # a local report's partitions.csv staging directory: the task writes its part there
    zk_security: ZkSecurity | None = None  # the ZooKeeper login (its Password pickles; repr hides it)
    # The Kafka login, stores inline (zkcoord.kafka.login.portable): the TLS context is built on the executor.
    kafka_security: KafkaClientSecurity | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UsageError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.zk_reads not in ZK_READS:
            raise UsageError(f"--zk-reads {self.zk_reads!r} is not one of {', '.join(ZK_READS)}")
        for name, high in (("batch_groups", 10_000), ("apply_concurrency", 256)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise UsageError(f"--{name.replace('_', '-')} must be from 1 to {high}, got {value!r}")


# ------------------------------------------------------------------ the job's accumulator
@dataclass
class JobSummary:
    """What the tasks found, summed by Spark's accumulator: the fields of
    :class:`~zkcoord.core.migration.Totals` over the groups planned,
    ``error_groups`` (could not be read), rows per status, group outcomes
    (verify: clean / behind / not-migrated; apply: ApplyResult.outcome), and
    group notes and errors as ``(group, text)``."""

    groups: int = 0
    partitions: int = 0
    to_write: int = 0
    flagged: int = 0
    active_groups: int = 0
    error_groups: int = 0
    by_decision: Counter = field(default_factory=Counter)  # Decision.value -> rows
    by_status: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    notes: list[tuple[str, str]] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)

    def add_plans(self, plans: Sequence[GroupPlan], options: Options) -> None:
        totals = make_plan(plans, options).totals
        self.groups += totals.groups
        self.partitions += totals.partitions
        self.to_write += totals.to_write
        self.flagged += totals.flagged
        self.active_groups += totals.active_groups
        self.by_decision.update({d.value: n for d, n in totals.by_decision.items() if n})
        self.notes += [(g.group, note) for g in plans for note in g.notes]

    def merge(self, other: JobSummary) -> JobSummary:
        for name in ("groups", "partitions", "to_write", "flagged", "active_groups", "error_groups"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("by_decision", "by_status", "outcomes"):
            getattr(self, name).update(getattr(other, name))
        self.notes += other.notes
        self.errors += other.errors
        return self


class SummaryParam:
    """Spark AccumulatorParam of :class:`JobSummary` (duck-typed: no pyspark import here)."""

    def zero(self, value: JobSummary) -> JobSummary:
        return JobSummary()

    def addInPlace(self, value1: JobSummary, value2: JobSummary) -> JobSummary:  # noqa: N802 (Spark's name)
        return value1.merge(value2)


# ------------------------------------------------------------------ progress
class ProgressReporter:
    """Sends ``<token> <groups> <offsets>`` lines to the driver's progress
    server; gives up quietly on the first failure (rule 3)."""

    def __init__(self, address: tuple[str, int] | None, token: str, timeout_s: float = 2.0) -> None:
        self._address = address
        self._token = token
        self._timeout_s = timeout_s
        self._sock: socket.socket | None = None

    def report(self, groups: int, offsets: int) -> None:
        if self._address is None:
            return
        try:
            if self._sock is None:
                self._sock = socket.create_connection(self._address, timeout=self._timeout_s)
            self._sock.sendall(f"{self._token} {groups} {offsets}\n".encode())
        except OSError as exc:
            log.debug("progress to %s:%s not sent (%s); not trying again", *self._address, exc)
            self._address = None
            self.close()

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


# ------------------------------------------------------------------ the task
@dataclass
class _Fetched:
    """A batch as read: the groups to decide, their legacy data (or error),
    Kafka's view, and (verify) their migration records."""

    groups: list[str]
    reads: Reads
    committed: dict
    states: dict
    records: dict[str, tuple[dict | None, int]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # verify: unmigrated groups not named


def _migrated(record: dict | None) -> bool:
    return bool(record) and record.get("phase") in _MIGRATED_PHASES


class _PartitionRun:
    """One task's connections, Kafka caches and the per-batch pipeline."""

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        self.conn = ZkConnection(spec.zookeeper, connect_timeout_ms=spec.timeout_ms,
                                 request_timeout_ms=spec.timeout_ms, handler=SelectHandler(),
                                 security=spec.zk_security)
        self.kafka = KafkaOffsets(spec.bootstrap_servers, request_timeout_ms=spec.timeout_ms,
                                  security=spec.kafka_security)
        self.reader: MultiReadLegacy | SingleReads | None = None
        self.adapters: Adapters | None = None
        self.counts: dict[str, int | None] = {}
        self.ranges: dict[TopicPartition, LogRange] = {}

    async def start(self) -> None:
        kafka = asyncio.ensure_future(asyncio.to_thread(self.kafka.start))
        try:
            await asyncio.to_thread(self.conn.start)
        finally:
            await kafka
        self.reader = await reader_for(self.conn, self.spec.zk_root, self.spec.zk_reads)
        legacy = ReaderLegacy(self.conn, self.spec.zk_root, self.reader) if isinstance(self.reader, MultiReadLegacy) \
            else LegacyOffsets(self.conn, self.spec.zk_root)
        self.adapters = Adapters(self.conn, self.kafka, legacy, MigrationStore(self.conn),
                                 mode_timeout_s=self.spec.timeout_ms / 1000)

    async def stop(self) -> None:
        await asyncio.gather(asyncio.to_thread(self.kafka.close), asyncio.to_thread(self.conn.stop))

    async def fetch(self, batch: list[str]) -> _Fetched:
        if self.spec.mode == "verify":
            return await self._fetch_verify(batch)
        if self.spec.mode == "apply":  # apply_batch asks Kafka itself, after reading the migration records
            return _Fetched(batch, await self.reader.read(batch), {}, {})
        kafka = asyncio.gather(asyncio.to_thread(self.kafka.committed_offsets, batch),
                               asyncio.to_thread(self.kafka.groups, batch))
        try:
            reads = await self.reader.read(batch)  # while Kafka answers
        except BaseException:
            kafka.cancel()
            await asyncio.gather(kafka, return_exceptions=True)
            raise
        committed, states = await kafka
        return _Fetched(batch, reads, committed, states)

    async def _load_records(self, batch: list[str]) -> list:
        """Each group's ``(record, version)``, or the ZkcoordError of its read;
        with multiRead, all in one request per 1000 groups."""
        return await self.adapters.store.load_many(batch, multi=isinstance(self.reader, MultiReadLegacy))

    async def _fetch_verify(self, batch: list[str]) -> _Fetched:
        """Records, then ZooKeeper, then Kafka (rule 2)."""
        loaded = await self._load_records(batch)
        records, reads, chosen, skipped = {}, {}, [], []
        for group, outcome in zip(batch, loaded):
            if isinstance(outcome, ServiceUnavailableError) or not isinstance(outcome, (tuple, ZkcoordError)):
                raise outcome
            if isinstance(outcome, ZkcoordError):
                reads[group] = outcome
            elif _migrated(outcome[0]) or self.spec.named:
                records[group] = outcome
            else:
                skipped.append(group)
                continue
            chosen.append(group)
        migrated = [g for g in chosen if g in records and _migrated(records[g][0])]
        if not migrated:
            return _Fetched(chosen, reads, {}, {}, records, skipped)
        reads.update(await self.reader.read(migrated))
        committed, states = await asyncio.gather(asyncio.to_thread(self.kafka.committed_offsets, migrated),
                                                 asyncio.to_thread(self.kafka.groups, migrated))
        return _Fetched(chosen, reads, committed, states, records, skipped)

    async def plans(self, fetched: _Fetched) -> dict[str, GroupPlan]:
        """The plan of every group read (the same step as gather_plan)."""
        found = {g: r for g, r in fetched.reads.items() if isinstance(r, LegacyGroup)}
        await self._log_ranges(found.values())
        return {g: _plan_one(legacy, self.counts, self.ranges, fetched.committed.get(g, {}), fetched.states.get(g),
                             self.spec.options) for g, legacy in found.items()}

    async def _log_ranges(self, groups: Iterable[LegacyGroup]) -> None:
        """Partition counts and log ranges of every partition of ``groups``, into the task's caches."""
        groups = list(groups)
        topics = {t for g in groups for t, _ in g.offsets} - self.counts.keys()
        if topics:
            self.counts.update(await asyncio.to_thread(self.kafka.partition_counts, topics))
        existing = {(t, p) for g in groups for t, p in g.offsets if p < (self.counts.get(t) or 0)}
        missing = existing - self.ranges.keys()
        if missing:
            self.ranges.update(await asyncio.to_thread(self.kafka.log_ranges, missing))

    async def decide(self, fetched: _Fetched) -> tuple[list[tuple], JobSummary]:
        outcomes: dict[str, ApplyResult] = {}
        if self.spec.mode == "apply":
            plans, outcomes = await self._apply(fetched)
        else:
            plans = await self.plans(fetched)
        summary, rows = JobSummary(), []
        summary.add_plans(list(plans.values()), self.spec.options)
        if fetched.skipped:
            summary.outcomes["not-verified"] += len(fetched.skipped)
        recording: list = []  # verify: the results' record writes, all in flight at once
        for group in fetched.groups:
            if group in plans:
                if self.spec.mode == "plan":
                    rows += _plan_rows(plans[group], summary)
                elif self.spec.mode == "verify":
                    rows += self._verify_rows(group, plans[group], fetched, summary, recording)
                else:
                    rows += _apply_rows(plans[group], outcomes[group], summary)
            elif isinstance(fetched.reads.get(group), ZkcoordError):
                message = str(fetched.reads[group])
                rows.append(_group_row(group, message, "error", summary))
                summary.error_groups += 1
                summary.errors.append((group, message))
            else:  # verify: named, not migrated
                phase = (fetched.records[group][0] or {}).get("phase", Phase.ZOOKEEPER.value)
                rows.append(_group_row(group, f"not migrated (phase {phase}): run migrate apply", "not-migrated",
                                       summary))
                summary.outcomes["not-migrated"] += 1
        await asyncio.gather(*recording)
        return rows, summary

    def _verify_rows(self, group: str, plan: GroupPlan, fetched: _Fetched, summary: JobSummary,
                     recording: list) -> list[tuple]:
        record, version = fetched.records[group]
        phase = Phase(record["phase"])
        found = compare(plan, both_ways=phase is not Phase.KAFKA)
        notes = found.notes
        if group in self.spec.absent:
            notes = (f"no legacy offsets under {self.spec.zk_root}",)
            summary.notes.append((group, notes[0]))
        late = {(b.topic, b.partition) for b in found.behind}
        stale = {(b.topic, b.partition) for b in found.zookeeper_behind}
        now = wall_clock_ms()
        result = VerifyResult.of(group, phase.value, found, now, notes)
        summary.outcomes["clean" if result.clean else "behind"] += 1
        if self.spec.record_verify:
            recording.append(self._record_verify(group, record, version, phase, now, result, summary))
        rows = []
        for row in plan.rows:
            key = (row.facts.topic, row.facts.partition)
            status = ("unverifiable" if row.decision in _UNVERIFIABLE else "behind" if key in late
                      else "zookeeper-behind" if key in stale else "ok")
            rows.append(_row(row, status, summary))
        return rows

    async def _record_verify(self, group: str, record: dict, version: int, phase: Phase, now: int,
                             result: VerifyResult, summary: JobSummary) -> None:
        try:
            await self.adapters.store.advance(group, record, version, phase, now, verify=result.as_record())
        except ServiceUnavailableError:
            raise
        except ZkcoordError as exc:
            summary.errors.append((group, f"verify result not recorded: {exc}"))

    async def _apply(self, fetched: _Fetched) -> tuple[dict[str, GroupPlan], dict[str, ApplyResult]]:
        """The batch's groups through :func:`~zkcoord.migrate.apply_batch.apply_batch`: each group's
        plan (the one it was applied with, made from Kafka's offsets read after its migration record;
        for groups it made none for, already done or refused, one made now) and result."""
        options = ApplyOptions(self.spec.options.allow_rewind, self.spec.options.force,
                               self.spec.allow_active_kafka_members)

        def plan_for(legacy: LegacyGroup, committed, kafka_group) -> GroupPlan:
            return _plan_one(legacy, self.counts, self.ranges, committed, kafka_group, self.spec.options)

        legacy = {g: fetched.reads[g] for g in fetched.groups if isinstance(fetched.reads.get(g), LegacyGroup)}
        await self._log_ranges(legacy.values())
        names = list(legacy)
        size = max(1, -(-len(names) // self.spec.apply_concurrency))  # apply_concurrency parts, in flight at once
        parts = await asyncio.gather(*(
            apply_batch(self.adapters, {g: legacy[g] for g in names[i:i + size]}, plan_for, options,
                        multi_read=isinstance(self.reader, MultiReadLegacy),
                        slow_concurrency=self.spec.apply_concurrency)
            for i in range(0, len(names), size)))
        done = {g: outcome for part in parts for g, outcome in part.items()}
        plans = {g: plan for g, (_, plan) in done.items() if plan is not None}
        rest = [g for g in legacy if g not in plans]
        if rest:
            committed, states = await asyncio.gather(asyncio.to_thread(self.kafka.committed_offsets, rest),
                                                     asyncio.to_thread(self.kafka.groups, rest))
            plans.update({g: plan_for(legacy[g], committed.get(g, {}), states.get(g)) for g in rest})
        return plans, {g: result for g, (result, _) in done.items()}


def _row(row, status: str, summary: JobSummary, target: int | None = None) -> tuple:
    f, p = row.facts, row.plan
    summary.by_status[status] += 1
    return (f.group, f.topic, f.partition, f.legacy_raw, f.kafka_offset, f.log_start, f.log_end,
            p.decision.value, p.target_offset if target is None else target, p.note, status)


def _group_row(group: str, note: str, status: str, summary: JobSummary) -> tuple:
    summary.by_status[status] += 1
    return (group, None, None, None, None, None, None, None, None, note, status)


def _plan_rows(plan: GroupPlan, summary: JobSummary) -> list[tuple]:
    return [_row(row, plan_status(row.decision), summary) for row in plan.rows]


def _apply_rows(plan: GroupPlan, result: ApplyResult, summary: JobSummary) -> list[tuple]:
    summary.outcomes[result.outcome] += 1
    if result.outcome in ("refused", "failed"):
        (summary.errors if result.outcome == "failed" else summary.notes).append((plan.group, result.message))
    if result.outcome != "applied":
        return [_row(row, result.outcome, summary) for row in plan.rows]
    committed = {(t, p): offset for t, p, offset in result.committed}
    skipped = {(t, p) for t, p, _, _ in result.skipped}
    rows = []
    for row in plan.rows:
        key = (row.facts.topic, row.facts.partition)
        if key in committed:
            rows.append(_row(row, "committed", summary, committed[key]))
        else:
            rows.append(_row(row, "skipped" if key in skipped else "unchanged", summary))
    return rows


def no_rows(rows: Iterable) -> Iterator[tuple]:
    """``mapPartitions`` entry that yields nothing: starts a session's Python workers ahead of its first job."""
    return iter(())


def _batches(groups: list[str], size: int) -> list[list[str]]:
    return [groups[i:i + size] for i in range(0, len(groups), size)]


async def _next_batch(run: _PartitionRun, batch: list[str], prefetched: asyncio.Future | None):
    fetched = await prefetched if prefetched is not None else await run.fetch(batch)
    rows, summary = await run.decide(fetched)
    return rows, summary, len(batch)


def run_partition(spec: TaskSpec, summary, index: int, groups: Iterable[str]) -> Iterator[tuple]:
    """``mapPartitionsWithIndex`` entry: the report rows of ``groups`` (Spark partition ``index``),
    batch by batch; each batch's :class:`JobSummary` is added to the accumulator ``summary``. With
    ``spec.csv_dir`` the rows also go to the task's part of ``partitions.csv`` there
    (:class:`~zkcoord.migrate.spark_report.CsvPart`), renamed into place once Spark has taken the last row."""
    chosen = list(groups)
    if not chosen:
        return
    part = CsvPart(spec.csv_dir, index, REPORT_COLUMNS) if spec.csv_dir else None
    try:
        yield from _partition_rows(spec, summary, chosen, part)
    except BaseException:
        if part is not None:
            part.abort()
        raise
    if part is not None:
        part.close()


def _partition_rows(spec: TaskSpec, summary, chosen: list[str], part: CsvPart | None) -> Iterator[tuple]:
    thresholds = gc.get_threshold()
    # A task allocates millions of short-lived, acyclic objects (rows, facts, decoded answers) that
    # reference counting frees; CPython's default gen-0 threshold (700) still ran ~1,000 collections per
    # 500 groups, a few of them full ones over every imported module: 20-40% of a task's CPU. Rarer
    # collections for the task's duration; cyclic garbage is still collected, every 50,000 allocations.
    gc.set_threshold(max(thresholds[0], _GC_THRESHOLD), *thresholds[1:])
    loop = asyncio.new_event_loop()
    progress = ProgressReporter(spec.progress_address, spec.progress_token)
    try:
        run = loop.run_until_complete(_started(spec))
        try:
            batches = _batches(chosen, spec.batch_groups)
            ahead: asyncio.Future | None = None
            for i, batch in enumerate(batches):
                current, ahead = ahead, None
                if i + 1 < len(batches):  # the next batch's reads go out while this one is decided
                    ahead = loop.create_task(run.fetch(batches[i + 1]))
                rows, found, count = loop.run_until_complete(_next_batch(run, batch, current))
                summary.add(found)
                progress.report(count, found.partitions)
                if part is not None:
                    part.write(rows)
                yield from rows
        finally:
            _cancel_pending(loop)
            loop.run_until_complete(run.stop())
    finally:
        progress.close()
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
        gc.set_threshold(*thresholds)


async def _started(spec: TaskSpec) -> _PartitionRun:
    run = _PartitionRun(spec)  # made on the loop: its semaphore belongs to it
    try:
        await run.start()
    except BaseException:
        await run.stop()
        raise
    return run


def _cancel_pending(loop: asyncio.AbstractEventLoop) -> None:
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending))
