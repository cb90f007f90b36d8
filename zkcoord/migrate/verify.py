"""``migrate verify``: is Kafka behind ZooKeeper anywhere in a migrated group?

This module owns the comparison (:func:`compare`, pure: a plan's facts in,
the partitions behind out) and :func:`verify_group`, which gathers the facts
(ZooKeeper first, then Kafka: during ``dual`` the daemon commits ZooKeeper
first, so an offset seen in ZooKeeper is in Kafka by the time Kafka is read)
and records the result in the group's migration record.

The rule per partition with a legacy offset::

    legacy value          Kafka committed            result
    --------------------  -------------------------  ---------------------------------
    not a decimal         -                          note (not compared)
    topic / partition     -                          note (Kafka cannot hold it)
    gone from Kafka
    L                     none, or < min(L, log end) behind
    L                     >= min(L, log end)          fine

(min with the log end: a legacy offset beyond the log end cannot be
committed; ``apply --force`` commits the log end, which is then fine.)
A group is *clean* when nothing is behind. Groups not yet migrated
(phases ``zookeeper``, ``backed-up``) are not compared: ``clean`` is None.
"""

from __future__ import annotations

from dataclasses import dataclass

from zkcoord.core.migration import Decision, GroupPlan, parse_legacy_offset
from zkcoord.errors import NotFoundError
from zkcoord.migrate.apply import Adapters, plan_one
from zkcoord.migrate.plan import Selection
from zkcoord.migrate.status import Phase

__all__ = ["Behind", "VerifyResult", "MIGRATED", "compare", "verify_group", "verify_groups", "migrated_groups"]

MIGRATED = (Phase.KAFKA_COMMITTED, Phase.DUAL, Phase.KAFKA)


@dataclass(frozen=True)
class Behind:
    topic: str
    partition: int
    zookeeper: int
    kafka: int | None


@dataclass(frozen=True)
class VerifyResult:
    group: str
    phase: str
    clean: bool | None  # None: not migrated, not compared
    checked: int = 0
    behind: tuple[Behind, ...] = ()
    notes: tuple[str, ...] = ()
    at_ms: int | None = None

    def as_record(self) -> dict:
        return {"at_ms": self.at_ms, "clean": self.clean, "checked": self.checked,
                "behind": [[b.topic, b.partition, b.zookeeper, b.kafka] for b in self.behind]}


def compare(plan: GroupPlan) -> tuple[int, tuple[Behind, ...], tuple[str, ...]]:
    """(partitions compared, those behind, notes) of a group's plan.

    >>> from zkcoord.core.migration import PartitionFacts, plan_group
    >>> p = plan_group("g", [PartitionFacts("g", "t", 0, "7", kafka_offset=5, log_start=0, log_end=9),
    ...                      PartitionFacts("g", "t", 1, "90", kafka_offset=9, log_start=0, log_end=9),
    ...                      PartitionFacts("g", "t", 2, "x", log_start=0, log_end=9)])
    >>> checked, behind, notes = compare(p)
    >>> checked, behind, len(notes)
    (2, (Behind(topic='t', partition=0, zookeeper=7, kafka=5),), 1)
    """
    behind, notes, checked = [], [], 0
    for row in plan.rows:
        f = row.facts
        if row.decision in (Decision.TOPIC_MISSING, Decision.PARTITION_MISSING, Decision.UNPARSABLE):
            notes.append(f"{f.topic}-{f.partition}: {row.plan.note}; not compared")
            continue
        legacy = parse_legacy_offset(f.legacy_raw)
        checked += 1
        if f.kafka_offset is None or f.kafka_offset < min(legacy, f.log_end):
            behind.append(Behind(f.topic, f.partition, legacy, f.kafka_offset))
    return checked, tuple(behind), tuple(notes)


async def verify_group(adapters: Adapters, group: str, *, record: bool = True) -> VerifyResult:
    """Compare the group's two stores now; write the result into its record."""
    store = adapters.store
    current, version = await store.load(group)
    phase = Phase(current["phase"]) if current else Phase.ZOOKEEPER
    if phase not in MIGRATED:
        return VerifyResult(group, phase.value, None, notes=(f"not migrated (phase {phase.value}): run migrate apply",))
    now = adapters.clock()
    try:
        plan = await plan_one(adapters, group)
        checked, behind, notes = compare(plan)
    except NotFoundError:  # the legacy group is gone altogether: nothing in ZooKeeper to be behind
        checked, behind, notes = 0, (), (f"no legacy offsets under {adapters.zk_root}",)
    result = VerifyResult(group, phase.value, not behind, checked, behind, notes, now)
    if record:
        await store.advance(group, current, version, phase, now, verify=result.as_record())
    return result


async def migrated_groups(adapters: Adapters, selection: Selection, phases=MIGRATED) -> list[str]:
    """The selected groups among those with a migration record, any phase
    for named groups (so a typo or an unmigrated group is reported)."""
    recorded = await adapters.store.list_groups()
    if selection.groups:
        return selection.choose(set(recorded) | set(selection.groups), "/zkcoord/migrations")
    chosen = selection.choose(recorded, "/zkcoord/migrations")
    found = []
    for group in chosen:
        current, _ = await adapters.store.load(group)
        if current and Phase(current["phase"]) in phases:
            found.append(group)
    return found


async def verify_groups(adapters: Adapters, selection: Selection) -> list[VerifyResult]:
    return [await verify_group(adapters, g) for g in await migrated_groups(adapters, selection)]
