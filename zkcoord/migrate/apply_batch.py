"""``migrate apply`` for many groups at once: the phases of :func:`apply_group`, pipelined across groups.

:func:`apply_group` moves one group through its phases with about twenty
ZooKeeper round trips and eight Kafka requests, one after the other. This
module moves a whole batch of groups through the *same* phases, each phase
one pipelined step for every group of the batch (the Spark job's apply
mode uses it, a batch of ``batch_groups`` at a time)::

    step  what, for every group of the batch                          requests for the batch
    ----  ----------------------------------------------------------  -------------------------------
    1     read its migration record and backup znode, and (for       multiRead (1 per 250 groups)
          step 7) which of its election's parents exist and its
          mode request (dual, kafka: ``already-done``)
    2     Kafka's view: members (DescribeGroups) and committed        1 DescribeGroups + 1 OffsetFetch
          offsets (OffsetFetch v8, many groups per request)           per coordinator
          (members: ``refused``, nothing written)
    3     the plan: the single-group path's own pure step             -
          (``plan._plan_one`` -> core.migration.plan_group)
    4     zookeeper -> backed-up: ONE multi per group: the record     one multi per group, all in
          claimed at the version read + the backup created            flight at once
    5     backed-up -> the commit: one OffsetCommit per group         pipelined on one connection per
                                                                      coordinator (commit_many)
    6     -> kafka-committed: the record, versioned                   one set per group, in flight
    7     -> dual. A group with no ``/coordinators/<group>`` at      one multi per group
          step 1 has never had an election: ONE multi creates that
          znode (fails if anybody did since) and the state in
          ``dual``, sets the record to dual at its version and
          deletes a stale mode request at its version.
          Any other group (or one whose multi failed), through its    one multi per group (the
          election, batched: a contender per group (created in one    contender and its missing
          multi with the parents step 1 found missing); where ours    parents) + multiRead of the
          is the lowest, ONE fenced multi (check our contender, set   contenders and states + one
          the state's mode at its version, the record to dual at its  multi per group
          version, delete our contender)

The rules of :mod:`zkcoord.migrate.apply` hold unchanged, and so do the
phases it records, so a kill at any point is resumed by either path:

1. The backup is written before anything changes, in the same multi that
   claims the record (a concurrent run's multi fails as a whole, before the
   backup), and never rewritten once the group is past ``zookeeper``.
2. The commit is planned from Kafka's committed offsets read in step 2 of
   this batch (after the records were read), with the same decisions; Kafka
   is never moved backwards without ``allow_rewind``; a resumed group plans
   ``equal`` for what an earlier run committed.
3. The mode is written only by the group's elected owner (fenced by its
   contender, exactly as :func:`~zkcoord.zk.modes.set_offset_storage`
   does directly), or, for a group that never had an election, in the
   multi that creates ``/coordinators/<group>`` (under which every
   contender lives): a daemon that owns the group is never written behind.
4. Anything unusual for a group (a daemon owns it, a version moved, a
   znode is corrupt, a lost answer, a retriable Kafka error) hands that
   group, wherever it stands, to :func:`apply_group` itself, which resumes
   it from its recorded phase; its errors are that group's ``failed``
   outcome, as in ``apply_groups``. The batch's other groups go on.

``on_step(group, phase)`` is called as each group reaches ``backed-up``,
``committed`` (Kafka answered the commit), ``kafka-committed`` and ``dual``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from zkcoord.core.migration import Decision, GroupPlan
from zkcoord.errors import ZkcoordError
from zkcoord.kafka.offsets import KafkaGroup, TopicPartition
from zkcoord.migrate.apply import Adapters, ApplyOptions, ApplyResult, OnStep, _active_message, apply_group
from zkcoord.zk.legacy import LegacyGroup
from zkcoord.zk.modes import TOOL_NODE_ID, ModeChange, _with_mode
from zkcoord.zk.bulk_reads import GET_CHILDREN, GET_DATA, read_znodes
from zkcoord.migrate.status import Phase, advanced, encode, tp_rows
from zkcoord.zk.migrations import decode_record
from zkcoord.zk import batch, election, paths
from zkcoord.zk.batch import Contenders, failed as _failed, missing
from zkcoord.zk.state_store import decode_state, encode_state

__all__ = ["apply_batch", "PlanFor"]

log = logging.getLogger(__name__)

# (legacy group as read, Kafka's committed offsets of the group, Kafka's view of it) -> its plan
PlanFor = Callable[[LegacyGroup, Mapping[TopicPartition, int], KafkaGroup], GroupPlan]
_TARGET = "dual"


@dataclass
class _Group:
    """One group on its way through the batch."""

    name: str
    legacy: LegacyGroup
    record: dict | None = None
    version: int = -1
    backup_version: int | None = None  # None: no backup znode
    phase: Phase = Phase.ZOOKEEPER
    plan: GroupPlan | None = None
    kafka_before: Mapping[TopicPartition, int] = field(default_factory=dict)  # Kafka's offsets for the backup
    committed: tuple = ()
    skipped: tuple = ()
    steps: list[str] = field(default_factory=list)
    contender: str | None = None  # our contender's path while we hold the group's election
    parents: tuple[str, ...] | None = None  # znodes its contender's multi creates first; None: not known
    state: tuple[dict | None, int] = (None, -1)
    request_version: int | None = None  # the mode request's version, None: none


async def apply_batch(adapters: Adapters, legacy: Mapping[str, LegacyGroup], plan_for: PlanFor,
                      options: ApplyOptions = ApplyOptions(), *, multi_read: bool = True,
                      on_step: OnStep | None = None, slow_concurrency: int = 8
                      ) -> dict[str, tuple[ApplyResult, GroupPlan | None]]:
    """Apply every group of ``legacy`` (as just read from the legacy layout);
    group -> (its result, the plan it was applied with, None if none was
    made). ``multi_read``: read with multiRead (ZooKeeper 3.6+)."""
    run = _Batch(adapters, plan_for, options, multi_read, on_step)
    groups = [_Group(name, found) for name, found in legacy.items()]
    results: dict[str, tuple[ApplyResult, GroupPlan | None]] = {}
    slow: list[_Group] = []
    try:
        await run.apply(groups, results, slow)
    finally:
        await run.release()
    slots = asyncio.Semaphore(slow_concurrency)

    async def slowly(group: _Group) -> None:
        async with slots:
            results[group.name] = (await run.slow_path(group), group.plan)

    await asyncio.gather(*(slowly(g) for g in slow))
    return {name: results[name] for name in legacy}


class _Batch:
    def __init__(self, adapters: Adapters, plan_for: PlanFor, options: ApplyOptions, multi_read: bool,
                 on_step: OnStep | None) -> None:
        self.adapters, self.plan_for, self.options = adapters, plan_for, options
        self.multi_read, self.on_step = multi_read, on_step
        self.conn = adapters.conn
        self.contenders = Contenders(self.conn, TOOL_NODE_ID)
        self.coordinators_exist = True  # /coordinators, as the records' read found it

    # ------------------------------------------------------------ the steps
    async def apply(self, groups: list[_Group], results: dict, slow: list[_Group]) -> None:
        def to_slow(group: _Group, why: str) -> None:
            log.debug("group %s: %s; applying it on its own", group.name, why)
            slow.append(group)

        clock = _Clock(len(groups))
        active = await self._load_records(groups, results, to_slow)
        clock.lap("records")
        active = await self._plan(active, results, to_slow)
        clock.lap("kafka+plan")
        if not active:
            return
        await self._back_up([g for g in active if g.phase is Phase.ZOOKEEPER], to_slow)
        clock.lap("backup")
        active = [g for g in active if g not in slow]
        await self._commit([g for g in active if g.phase is Phase.BACKED_UP], results, to_slow)
        clock.lap("commit")
        active = [g for g in active if g not in slow and g.name not in results]
        await self._mark_committed([g for g in active if g.phase is Phase.BACKED_UP], to_slow)
        clock.lap("kafka-committed")
        active = [g for g in active if g not in slow]
        await self._to_dual(active, results, to_slow)
        clock.lap("dual")
        clock.log(len(slow))

    async def _load_records(self, groups: list[_Group], results: dict, to_slow) -> list[_Group]:
        """Each group's record and backup, and (for step 7) which of its election's parents exist."""
        ops = [(op, p) for g in groups for op, p in ((GET_DATA, paths.migration(g.name)),
                                                     (GET_DATA, paths.migration_backup(g.name)),
                                                     (GET_CHILDREN, paths.coordinator(g.name)),
                                                     (GET_DATA, paths.mode_request(g.name)))]
        outcomes = await read_znodes(self.conn, ops + [(GET_DATA, paths.COORDINATORS)], multi=self.multi_read,
                                     stats=True)
        self.coordinators_exist = isinstance(outcomes[-1], tuple)
        active = []
        for i, group in enumerate(groups):
            record, backup, coordinator, request = outcomes[4 * i:4 * i + 4]
            if _failed(record) or _failed(backup):
                to_slow(group, "its migration record could not be read")
                continue
            if missing(coordinator) and not _failed(request):
                group.parents = (paths.coordinator(group.name), paths.owner_dir(group.name))
                group.request_version = request[1].version if isinstance(request, tuple) else None
            elif isinstance(coordinator, list):
                group.parents = () if "owner" in coordinator else (paths.owner_dir(group.name),)
            if isinstance(backup, tuple):
                group.backup_version = backup[1].version
            if isinstance(record, tuple):
                data, stat = record
                group.version = stat.version
                try:
                    group.record = decode_record(paths.migration(group.name), data) if data else None
                except ZkcoordError:
                    to_slow(group, "its migration record is corrupt")  # apply_group reports it
                    continue
            group.phase = Phase((group.record or {}).get("phase", Phase.ZOOKEEPER.value))
            if group.phase in (Phase.DUAL, Phase.KAFKA):
                results[group.name] = (ApplyResult(group.name, "already-done", group.phase.value,
                                                   message=f"already applied (phase {group.phase.value})"), None)
                continue
            active.append(group)
        return active

    async def _plan(self, groups: list[_Group], results: dict, to_slow) -> list[_Group]:
        if not groups:
            return []
        names = [g.name for g in groups]
        kafka = self.adapters.kafka
        states, committed = await asyncio.gather(asyncio.to_thread(kafka.groups, names),
                                                 asyncio.to_thread(kafka.committed_offsets, names))
        active = []
        for group in groups:
            kafka_group = states[group.name]
            if kafka_group.members and not self.options.allow_active_kafka_members:
                results[group.name] = (ApplyResult(group.name, "refused", group.phase.value,
                                                   message=_active_message(kafka_group)), None)
                continue
            if group.phase is Phase.KAFKA_COMMITTED:
                active.append(group)  # committed by an earlier run: only the mode is left
                continue
            try:
                group.plan = self.plan_for(group.legacy, committed.get(group.name, {}), kafka_group)
            except ZkcoordError:
                to_slow(group, "its plan could not be made")
                continue
            group.skipped = tuple((r.facts.topic, r.facts.partition, r.decision.value, r.plan.note)
                                  for r in group.plan.rows if not r.decision.writes and r.decision is not Decision.EQUAL)
            if group.phase is Phase.ZOOKEEPER:
                group.kafka_before = committed.get(group.name, {})
            active.append(group)
        return active

    async def _back_up(self, groups: list[_Group], to_slow) -> None:
        """zookeeper -> backed-up: the claim and the backup in one multi per group."""
        now, zk_root = self.adapters.clock(), self.adapters.zk_root
        if any(g.version < 0 for g in groups):  # the records' parent, which a multi cannot create
            await batch.ensure_path(self.conn, paths.MIGRATIONS)  # if not, the multis fail: apply_group says why
        txns, run = [], uuid.uuid4().hex
        for i, group in enumerate(groups):
            base = dict(group.record or {"v": 1, "phase": Phase.ZOOKEEPER.value, "history": []},
                        run=f"{run}-{i}")  # unique per claim, as apply_group's uuid4
            zookeeper = {(r.facts.topic, r.facts.partition): r.facts.legacy_raw for r in group.plan.rows}
            backup = {"v": 1, "group": group.name, "at_ms": now, "zk_root": zk_root,
                      "kafka": tp_rows(group.kafka_before), "zookeeper": tp_rows(zookeeper)}
            try:
                record = advanced(group.name, base, Phase.BACKED_UP, now, zk_root=zk_root)
                record_data = encode(f"the migration record of {group.name!r}", record)
                backup_data = encode(f"the backup of group {group.name!r}", backup)
            except ZkcoordError:
                to_slow(group, "its record or backup cannot be written")  # apply_group reports why
                continue
            txns.append((group, record, [
                batch.put(paths.migration(group.name), record_data, group.version),
                batch.put(paths.migration_backup(group.name), backup_data,
                          -1 if group.backup_version is None else group.backup_version)]))
        outcomes = await batch.multis(self.conn, [ops for _, _, ops in txns])
        for (group, record, _), outcome in zip(txns, outcomes):
            if not outcome.ok:
                to_slow(group, f"its backup multi failed ({outcome.why})")
                continue
            group.record, group.version = record, _new_version(group.version)
            group.phase = Phase.BACKED_UP
            self._reached(group, Phase.BACKED_UP.value)

    async def _commit(self, groups: list[_Group], results: dict, to_slow) -> None:
        writes = {}
        for group in groups:
            found = {(r.facts.topic, r.facts.partition): r.plan.target_offset
                     for r in group.plan.rows if r.decision.writes}
            group.committed = tuple((t, p, o) for (t, p), o in sorted(found.items()))
            writes[group.name] = found
        if not writes:
            return
        try:
            errors = await asyncio.to_thread(self.adapters.kafka.commit_many, writes)
        except ZkcoordError as exc:  # Kafka unreachable: every group's outcome, as apply_group's would be
            errors = {name: exc for name in writes}
        for group in groups:
            error = errors.get(group.name)
            if error is not None:
                results[group.name] = (ApplyResult(group.name, "failed", group.phase.value, message=str(error)),
                                       group.plan)
            elif group.committed:
                self._reached(group, "committed", step=False)

    async def _mark_committed(self, groups: list[_Group], to_slow) -> None:
        now = self.adapters.clock()
        sent = []
        for group in groups:
            applied = {"at_ms": now, "committed": [list(c) for c in group.committed],
                       "skipped": [list(s) for s in group.skipped]}
            try:
                record = advanced(group.name, group.record, Phase.KAFKA_COMMITTED, now, applied=applied)
                data = encode(f"the migration record of group {group.name!r}", record)
            except ZkcoordError:
                to_slow(group, "its record cannot be advanced")
                continue
            sent.append((group, record, (paths.migration(group.name), data, group.version)))
        outcomes = await batch.set_many(self.conn, [w for _, _, w in sent])
        for (group, record, _), outcome in zip(sent, outcomes):
            if isinstance(outcome, BaseException):
                to_slow(group, f"its record was not advanced ({outcome!r})")
                continue
            group.record, group.version, group.phase = record, outcome, Phase.KAFKA_COMMITTED
            self._reached(group, Phase.KAFKA_COMMITTED.value)

    async def _to_dual(self, groups: list[_Group], results: dict, to_slow) -> None:
        """kafka-committed -> dual through the groups' elections (module docstring, step 7)."""
        if not groups:
            return
        free = await self._first_owner(groups, results)  # the rest: the election, as set_offset_storage
        if not free:
            return
        # contend for each at once: where a daemon owns it, ours is not the lowest
        contended = await self.contenders.contend({g.name: g.parents for g in free},
                                                  root_missing=not self.coordinators_exist)
        mine = []
        for group in free:
            outcome = contended[group.name]
            if isinstance(outcome, BaseException):
                to_slow(group, f"its contender was not created ({outcome!r})")
            else:
                group.contender = outcome
                mine.append(group)
        ops = [op for g in mine for op in ((GET_CHILDREN, paths.owner_dir(g.name)), (GET_DATA, paths.state(g.name)),
                                           (GET_DATA, paths.mode_request(g.name)))]
        outcomes = await read_znodes(self.conn, ops, multi=self.multi_read, stats=True)
        owned = []
        for i, group in enumerate(mine):
            children, state, request = outcomes[3 * i:3 * i + 3]
            ours = group.contender.rsplit("/", 1)[1]
            if not isinstance(children, list) or election.ordered(children)[:1] != [ours]:
                to_slow(group, "a daemon or another command holds its election")  # set_offset_storage asks it
                continue
            if _failed(state) or _failed(request):
                to_slow(group, "its state could not be read")
                continue
            try:
                record = decode_state(group.name, paths.state(group.name), state[0]) if isinstance(state, tuple) \
                    else None
                group.state = (record, state[1].version if isinstance(state, tuple) else -1)
            except ZkcoordError:
                to_slow(group, "its state record is corrupt")  # set_offset_storage reports it
                continue
            group.request_version = request[1].version if isinstance(request, tuple) else None
            owned.append(group)
        now = self.adapters.clock()
        sent = []
        for group in owned:
            record, version = group.state
            before = str(record.get("os", "zookeeper")) if record else "zookeeper"
            ops = [self.contenders.fence(group.name)]  # the fence: our contender, the lowest
            if group.request_version is not None:
                ops.append(batch.delete(paths.mode_request(group.name), group.request_version))
            try:
                state = encode_state(group.name, _with_mode(group.name, record, _TARGET)) \
                    if before != _TARGET else None
                migration = encode(f"the migration record of group {group.name!r}",
                                   advanced(group.name, group.record, Phase.DUAL, now))
            except ZkcoordError:
                to_slow(group, "its state or record cannot take the change")  # apply_group reports why
                continue
            if state is not None:
                ops.append(batch.put(paths.state(group.name), state, version))
            ops.append(batch.put(paths.migration(group.name), migration, group.version))
            ops.append(self.contenders.resign(group.name))  # and the election released, in the same multi
            sent.append((group, before, ops))
        outcomes = await batch.multis(self.conn, [ops for _, _, ops in sent])
        for (group, before, _), outcome in zip(sent, outcomes):
            if not outcome.ok:
                to_slow(group, f"its mode multi failed ({outcome.why})")
                continue
            self.contenders.resigned(group.name)
            group.phase, group.contender = Phase.DUAL, None  # the multi deleted it
            self._reached(group, Phase.DUAL.value)
            via = "direct" if before != _TARGET else "unchanged"
            results[group.name] = (ApplyResult(group.name, "applied", Phase.DUAL.value, group.committed,
                                               group.skipped, ModeChange(group.name, before, _TARGET, via),
                                               steps=tuple(group.steps)), group.plan)
        await self.release()

    async def _first_owner(self, groups: list[_Group], results: dict) -> list[_Group]:
        """kafka-committed -> dual for the groups that had no ``/coordinators/<group>`` when step 1
        read their records: nobody has ever contended for them (every contender lives under that
        znode), so ONE multi that creates it is fenced exactly as the election's would be: it
        fails as a whole if anybody created it since, and whoever contends afterwards finds the
        state written. The multi creates the znode and the state (an Empty group in ``dual``),
        sets the record to dual at its version and deletes a stale mode request at its version.
        The groups it did not do (the others, and any whose multi failed) are returned for the
        election."""
        fresh = [g for g in groups if g.parents and g.parents[0] == paths.coordinator(g.name)]
        if not fresh:
            return groups
        if not self.coordinators_exist:
            await batch.ensure_path(self.conn, paths.COORDINATORS)  # if not, the groups take the election
        now, sent, rest = self.adapters.clock(), [], [g for g in groups if g not in fresh]
        for group in fresh:
            try:
                state = encode_state(group.name, _with_mode(group.name, None, _TARGET))
                migration = encode(f"the migration record of group {group.name!r}",
                                   advanced(group.name, group.record, Phase.DUAL, now))
            except ZkcoordError:
                rest.append(group)  # the election's path says why
                continue
            ops = [batch.create(paths.coordinator(group.name)),  # the fence: nobody has contended, nobody does
                   batch.create(paths.state(group.name), state)]
            if group.request_version is not None:
                ops.append(batch.delete(paths.mode_request(group.name), group.request_version))
            ops.append(batch.put(paths.migration(group.name), migration, group.version))
            sent.append((group, ops))
        outcomes = await batch.multis(self.conn, [ops for _, ops in sent])
        for (group, _), outcome in zip(sent, outcomes):
            if not outcome.ok:
                log.debug("group %s: the first owner's multi failed (%s); taking its election", group.name,
                          outcome.why)
                group.parents, group.request_version = None, None  # not known any more
                rest.append(group)
                continue
            group.phase = Phase.DUAL
            self._reached(group, Phase.DUAL.value)
            results[group.name] = (ApplyResult(group.name, "applied", Phase.DUAL.value, group.committed,
                                               group.skipped, ModeChange(group.name, "zookeeper", _TARGET, "direct"),
                                               steps=tuple(group.steps)), group.plan)
        return rest

    async def release(self) -> None:
        """Delete every contender this batch created (by our prefix where an answer was lost)."""
        await self.contenders.release()

    # ------------------------------------------------------------ the rest
    async def slow_path(self, group: _Group) -> ApplyResult:
        """:func:`apply_group` for one group, from wherever it stands (rule 4)."""
        try:
            result = await apply_group(self.adapters, group.name, self.options, on_step=self.on_step)
        except ZkcoordError as exc:
            try:
                record, _ = await self.adapters.store.load(group.name)
            except ZkcoordError:
                record = None
            return ApplyResult(group.name, "failed", (record or {}).get("phase", Phase.ZOOKEEPER.value),
                               message=str(exc))
        if result.outcome == "applied" and group.steps:  # this batch got it part of the way
            return ApplyResult(result.group, result.outcome, result.phase, result.committed or group.committed,
                               result.skipped or group.skipped, result.mode, result.message,
                               tuple(group.steps) + result.steps)
        return result

    def _reached(self, group: _Group, phase: str, step: bool = True) -> None:
        if step:
            group.steps.append(phase)
        if self.on_step is not None:
            self.on_step(group.name, phase)


class _Clock:
    """Wall time of each step of a batch, logged at debug level."""

    def __init__(self, groups: int) -> None:
        self.groups, self.laps, self.last = groups, [], time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps.append((name, now - self.last))
        self.last = now

    def log(self, slow: int) -> None:
        log.debug("apply batch of %d group(s), %d on their own: %s", self.groups, slow,
                  ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in self.laps))


def _new_version(version: int) -> int:
    return 0 if version < 0 else version + 1
