"""``migrate verify``: do a migrated group's two stores agree?

This module owns the comparison (:func:`compare`, pure: a plan's facts in,
the partitions that differ out, in both directions) and
:func:`verify_group`, which gathers the facts and records the result in the
group's migration record.

The rule per partition with a legacy offset ``L`` (log start ``S``, log
end ``N``, Kafka's committed offset ``K``)::

    legacy value          Kafka committed            result
    --------------------  -------------------------  ---------------------------------
    not a decimal         -                          note (not compared)
    topic / partition     -                          note (Kafka cannot hold it)
    gone from Kafka
    L                     none, or K < min(L, N)     Kafka behind ZooKeeper
    L                     K > max(L, S)              ZooKeeper behind Kafka (phases
                                                     kafka-committed and dual)
    L                     otherwise                  fine
    none                  K                          ZooKeeper behind Kafka (phases
                                                     kafka-committed and dual)

(min with the log end: a legacy offset beyond the log end cannot be
committed; ``apply --force`` commits the log end, which is then fine; max
with the log start: a legacy offset below it resumes at the log start,
which ``apply`` commits, also fine.) ZooKeeper behind Kafka is a commit that
reached Kafka only: a daemon stopped or deposed between its two writes
(:mod:`zkcoord.server.dual_commit`, which repairs it when the group is next
loaded), a consumer committing through Kafka's own coordinator, or Kafka
ahead before the migration (kept by apply). In phase ``kafka`` ZooKeeper is
no longer written, so only Kafka behind is looked for.

A group is *clean* when nothing differs. Groups not yet migrated (phases
``zookeeper``, ``backed-up``) are not compared: ``clean`` is None.
Reading: ZooKeeper first, then Kafka (the daemon commits Kafka first, so an
offset seen in ZooKeeper is in Kafka by the time Kafka is read).
"""

from __future__ import annotations

from dataclasses import dataclass

from zkcoord.core.migration import Decision, GroupPlan, parse_legacy_offset
from zkcoord.errors import NotFoundError
from zkcoord.migrate.apply import Adapters, plan_one
from zkcoord.migrate.plan import Selection
from zkcoord.migrate.status import Phase

__all__ = ["Behind", "Comparison", "VerifyResult", "MIGRATED", "compare", "verify_group", "verify_groups", "migrated_groups"]

MIGRATED = (Phase.KAFKA_COMMITTED, Phase.DUAL, Phase.KAFKA)


@dataclass(frozen=True)
class Behind:
    """One partition where the stores differ (``zookeeper`` None: ZooKeeper
    has no offset; ``kafka`` None: Kafka has none)."""

    topic: str
    partition: int
    zookeeper: int | None
    kafka: int | None


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` found: partitions compared, those where Kafka is
    behind ZooKeeper, those where ZooKeeper is behind Kafka, notes."""

    checked: int
    behind: tuple[Behind, ...]
    zookeeper_behind: tuple[Behind, ...]
    notes: tuple[str, ...]

    @property
    def clean(self) -> bool:
        return not self.behind and not self.zookeeper_behind


@dataclass(frozen=True)
class VerifyResult:
    group: str
    phase: str
    clean: bool | None  # None: not migrated, not compared
    checked: int = 0
    behind: tuple[Behind, ...] = ()  # Kafka behind ZooKeeper
    notes: tuple[str, ...] = ()
    at_ms: int | None = None
    zookeeper_behind: tuple[Behind, ...] = ()  # ZooKeeper behind (or without) Kafka's offset

    @classmethod
    def of(cls, group: str, phase: str, found: Comparison, at_ms: int | None,
           notes: tuple[str, ...] | None = None) -> VerifyResult:
        return cls(group, phase, found.clean, found.checked, found.behind,
                   found.notes if notes is None else notes, at_ms, found.zookeeper_behind)

    @property
    def differing(self) -> int:
        return len(self.behind) + len(self.zookeeper_behind)

    def as_record(self) -> dict:
        return {"at_ms": self.at_ms, "clean": self.clean, "checked": self.checked,
                "behind": [[b.topic, b.partition, b.zookeeper, b.kafka] for b in self.behind],
                "zookeeper_behind": [[b.topic, b.partition, b.zookeeper, b.kafka] for b in self.zookeeper_behind]}


def compare(plan: GroupPlan, both_ways: bool = True) -> Comparison:
    """Compare a group's plan by the module's rule (``both_ways`` False: only
    look for Kafka behind, as in phase ``kafka``).

    >>> from zkcoord.core.migration import PartitionFacts, plan_group
    >>> p = plan_group("g", [PartitionFacts("g", "t", 0, "7", kafka_offset=5, log_start=0, log_end=9),
    ...                      PartitionFacts("g", "t", 1, "3", kafka_offset=8, log_start=0, log_end=9),
    ...                      PartitionFacts("g", "t", 2, "x", log_start=0, log_end=9)], kafka_only={("t", 3): 4})
    >>> found = compare(p)
    >>> found.checked, found.behind, len(found.notes), found.clean
    (3, (Behind(topic='t', partition=0, zookeeper=7, kafka=5),), 1, False)
    >>> [(b.partition, b.zookeeper, b.kafka) for b in found.zookeeper_behind]
    [(1, 3, 8), (3, None, 4)]
    """
    behind, ahead, notes, checked = [], [], [], 0
    for row in plan.rows:
        f = row.facts
        if row.decision in (Decision.TOPIC_MISSING, Decision.PARTITION_MISSING, Decision.UNPARSABLE,
                            Decision.NO_POSITION):
            notes.append(f"{f.topic}-{f.partition}: {row.plan.note}; not compared")
            continue
        legacy = parse_legacy_offset(f.legacy_raw)
        checked += 1
        if f.kafka_offset is None or f.kafka_offset < min(legacy, f.log_end):
            behind.append(Behind(f.topic, f.partition, legacy, f.kafka_offset))
        elif both_ways and f.kafka_offset > max(legacy, f.log_start):
            ahead.append(Behind(f.topic, f.partition, legacy, f.kafka_offset))
    if both_ways:
        checked += len(plan.kafka_only)
        ahead.extend(Behind(t, p, None, k) for t, p, k in plan.kafka_only)
        ahead.sort(key=lambda b: (b.topic, b.partition))
    return Comparison(checked, tuple(behind), tuple(ahead), tuple(notes))


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
        found = compare(plan, both_ways=phase is not Phase.KAFKA)
    except NotFoundError:  # the legacy group is gone altogether: nothing in ZooKeeper to compare
        found = Comparison(0, (), (), (f"no legacy offsets under {adapters.zk_root}",))
    result = VerifyResult.of(group, phase.value, found, now)
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
