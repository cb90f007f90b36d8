"""Migration decisions: what to do with each legacy ZooKeeper offset.

This module owns the rules that turn the facts about one partition (its
legacy offset in ``/consumers/<group>/offsets/<topic>/<partition>``, the
group's committed offset in Kafka, the partition's log start and end) into a
:class:`PartitionPlan`, the group-level view (:func:`plan_group`), the totals
of a whole plan (:func:`make_plan`) and the dual-commit fetch rule
(:func:`dual_fetch`). It reads nothing and writes nothing: the adapters in
:mod:`zkcoord.migrate` gather the facts and act on the decisions.

The decisions, checked in this order (first match wins)::

    decision                 writes  flagged  when
    -----------------------  ------  -------  ---------------------------------------------
    TOPIC_MISSING            no      yes      the topic does not exist in Kafka
    PARTITION_MISSING        no      yes      the topic has fewer partitions
    UNPARSABLE               no      yes      the legacy value is not an int64 decimal
    NO_POSITION              no      yes      the legacy value is negative (-1: "no offset";
                                              any negative: the consumer resets by its
                                              auto.offset.reset): nothing to copy
    BEYOND_LOG_END_REFUSED   no      yes      legacy > log end, without --force
    (legacy > log end with --force: the target is the log end, as
     kafka-consumer-groups --reset-offsets clamps; then compared with Kafka)
    (legacy < log start: the target is the log start; then compared with Kafka)
    EQUAL                    no      no       Kafka's committed offset == target
    KAFKA_AHEAD_KEPT         no      no       Kafka's committed offset > target
    REWIND                   yes     yes      ... and --allow-rewind
    CLAMPED_TO_LOG_START     yes     yes      Kafka has none or less; target = log start
    BEYOND_LOG_END_FORCED    yes     yes      Kafka has none or less; target = log end
    COPY                     yes     no       Kafka has none or less; target = legacy

Rules:

1. Never move Kafka backwards unless ``allow_rewind``: a consumer that
   already committed to Kafka has made progress the legacy value lacks.
2. A legacy offset beyond the log end means the log was truncated or the
   topic recreated; copying it would silently skip the records written up to
   that offset later, so it is refused, and ``force`` commits the log end.
3. A legacy offset below the log start points at deleted records; the target
   is the log start, which is where the consumer would restart anyway
   (``auto.offset.reset=earliest``), and the row is flagged.
4. Offsets equal to the log end are valid (everything consumed).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.legacy_values import Unparsable, read_legacy_value, shown
from zkcoord.errors import UsageError

__all__ = [
    "MAX_OFFSET", "Decision", "Options", "PartitionFacts", "PartitionPlan", "PlanRow", "GroupActivity",
    "GroupPlan", "Totals", "Plan", "parse_legacy_offset", "decide", "plan_group", "make_plan", "dual_fetch",
]

MAX_OFFSET = 2**63 - 1  # Kafka offsets are int64


class Decision(enum.Enum):
    """What the migration does with one partition (see the module's table)."""

    COPY = "copy"
    EQUAL = "equal"
    KAFKA_AHEAD_KEPT = "kafka-ahead-kept"
    REWIND = "rewind"
    CLAMPED_TO_LOG_START = "clamped-to-log-start"
    BEYOND_LOG_END_REFUSED = "beyond-log-end-refused"
    BEYOND_LOG_END_FORCED = "beyond-log-end-forced"
    TOPIC_MISSING = "topic-missing"
    PARTITION_MISSING = "partition-missing"
    UNPARSABLE = "unparsable"
    NO_POSITION = "no-position"

    @property
    def writes(self) -> bool:
        """True if applying the plan commits ``target_offset`` to Kafka."""
        return self in _WRITES

    @property
    def flagged(self) -> bool:
        """True if an operator should look at this partition before applying."""
        return self in _FLAGGED


_WRITES = frozenset({Decision.COPY, Decision.REWIND, Decision.CLAMPED_TO_LOG_START, Decision.BEYOND_LOG_END_FORCED})
_FLAGGED = frozenset(set(Decision) - {Decision.COPY, Decision.EQUAL, Decision.KAFKA_AHEAD_KEPT})


@dataclass(frozen=True)
class Options:
    """``allow_rewind``: move Kafka back to an older legacy offset;
    ``force``: commit the log end for legacy offsets beyond it."""

    allow_rewind: bool = False
    force: bool = False


def _check_offset(value: object, what: str, nullable: bool = True) -> None:
    if value is None and nullable:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_OFFSET:
        raise UsageError(f"{what} must be a whole number from 0 to {MAX_OFFSET}, got {value!r}")


def _is_offset(value: object) -> bool:
    """What _check_offset accepts (not None), without building its message."""
    return type(value) is int and 0 <= value <= MAX_OFFSET  # noqa: E721 (bool is not an offset)


@dataclass(frozen=True)
class PartitionFacts:
    """Everything known about one partition of one group.

    ``legacy_raw`` is the legacy znode's text as stored (None: the znode has
    no data); ``kafka_offset`` the group's committed offset in Kafka (None:
    none); ``log_start`` / ``log_end`` are required when the partition exists.
    """

    group: str
    topic: str
    partition: int
    legacy_raw: str | None
    kafka_offset: int | None = None
    log_start: int | None = None
    log_end: int | None = None
    topic_exists: bool = True
    partition_exists: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.partition, bool) or not isinstance(self.partition, int) or self.partition < 0:
            raise UsageError(f"partition must be a whole number >= 0, got {self.partition!r}")
        if self.kafka_offset is not None and not _is_offset(self.kafka_offset):  # the message only on failure
            _check_offset(self.kafka_offset, f"Kafka offset of {self.where}")
        if self.partition_exists and not self.topic_exists:
            raise UsageError(f"{self.where}: a partition cannot exist in a missing topic")
        if self.partition_exists:
            if not _is_offset(self.log_start):
                _check_offset(self.log_start, f"log start of {self.where}", nullable=False)
            if not _is_offset(self.log_end):
                _check_offset(self.log_end, f"log end of {self.where}", nullable=False)
            if self.log_start > self.log_end:
                raise UsageError(f"{self.where}: log start {self.log_start} is after log end {self.log_end}")

    @property
    def where(self) -> str:
        return f"group {self.group!r} {self.topic}-{self.partition}"


@dataclass(frozen=True)
class PartitionPlan:
    """A decision, the offset it would commit to Kafka (None: nothing), and why."""

    decision: Decision
    target_offset: int | None
    note: str


def parse_legacy_offset(raw: str | None) -> int | None:
    """The offset in a legacy znode's text, or None if it is not one to migrate.

    The value is read by :func:`zkcoord.core.legacy_values.read_legacy_value`
    (decimal, whitespace tolerated, bounded before conversion); -1 (Kafka's
    "no offset") is not an offset to migrate either.

    >>> parse_legacy_offset("42"), parse_legacy_offset(" 7\\n"), parse_legacy_offset("-1")
    (42, 7, None)
    >>> parse_legacy_offset("9" * 5000) is None
    True
    """
    value = read_legacy_value(raw)
    return value if isinstance(value, int) and 0 <= value <= MAX_OFFSET else None


def _unparsable_note(raw: str | None) -> str:
    value = read_legacy_value(raw)
    if raw is None:
        return "the legacy znode holds no data"
    return f"legacy value {shown(raw)} is not an offset ({value.reason})"


def _no_position_note(value: int) -> str:
    if value == -1:
        return "legacy value -1 is Kafka's \"no offset\": nothing to copy"
    return (f"legacy value {value} is no position in any log (a consumer given it resets by its "
            "auto.offset.reset): nothing to copy")


def decide(facts: PartitionFacts, options: Options = Options()) -> PartitionPlan:
    """The decision for one partition (rules in the module docstring).

    Worked examples (log 10..100, i.e. start 10, end 100)::

        legacy 42, Kafka none          -> COPY 42
        legacy 42, Kafka 30            -> COPY 42 (moves Kafka forward)
        legacy 42, Kafka 42            -> EQUAL
        legacy 42, Kafka 50            -> KAFKA_AHEAD_KEPT (REWIND 42 with allow_rewind)
        legacy 5,  Kafka none          -> CLAMPED_TO_LOG_START 10
        legacy 5,  Kafka 60            -> KAFKA_AHEAD_KEPT
        legacy 120                     -> BEYOND_LOG_END_REFUSED (BEYOND_LOG_END_FORCED 100 with force)
        legacy 100                     -> COPY 100 (everything consumed)
        legacy "abc"                   -> UNPARSABLE

    >>> f = PartitionFacts("g", "t", 0, "42", kafka_offset=30, log_start=10, log_end=100)
    >>> decide(f).decision, decide(f).target_offset
    (<Decision.COPY: 'copy'>, 42)
    """
    if not facts.topic_exists:
        return PartitionPlan(Decision.TOPIC_MISSING, None, f"topic {facts.topic!r} does not exist in Kafka")
    if not facts.partition_exists:
        return PartitionPlan(Decision.PARTITION_MISSING, None,
                             f"topic {facts.topic!r} has no partition {facts.partition} in Kafka")
    legacy = parse_legacy_offset(facts.legacy_raw)
    if legacy is None:
        value = read_legacy_value(facts.legacy_raw)
        if isinstance(value, int):  # negative
            return PartitionPlan(Decision.NO_POSITION, None, _no_position_note(value))
        return PartitionPlan(Decision.UNPARSABLE, None, _unparsable_note(facts.legacy_raw))
    start, end, kafka = facts.log_start, facts.log_end, facts.kafka_offset
    if legacy > end and not options.force:
        return PartitionPlan(Decision.BEYOND_LOG_END_REFUSED, None,
                             f"legacy {legacy} is beyond the log end {end} (log truncated or topic "
                             f"recreated?); --force commits the log end {end}")
    if legacy > end:
        target, kind, why = end, Decision.BEYOND_LOG_END_FORCED, f"legacy {legacy} is beyond the log end {end}"
    elif legacy < start:
        target, kind, why = start, Decision.CLAMPED_TO_LOG_START, \
            f"legacy {legacy} is below the log start {start} (records deleted)"
    else:
        target, kind, why = legacy, Decision.COPY, ""
    return _against_kafka(target, kind, why, kafka, options)


def _against_kafka(target: int, kind: Decision, why: str, kafka: int | None, options: Options) -> PartitionPlan:
    """Compare the target with what the group already committed in Kafka."""
    prefix = why + "; " if why else ""
    if kafka == target:
        return PartitionPlan(Decision.EQUAL, None, f"{prefix}Kafka already at {kafka}")
    if kafka is not None and kafka > target:
        if options.allow_rewind:
            return PartitionPlan(Decision.REWIND, target, f"{prefix}rewinds Kafka from {kafka} to {target}")
        return PartitionPlan(Decision.KAFKA_AHEAD_KEPT, None,
                             f"{prefix}Kafka at {kafka} is ahead of {target}; kept (--allow-rewind rewinds)")
    was = "Kafka has no offset" if kafka is None else f"Kafka at {kafka}"
    if kind is Decision.CLAMPED_TO_LOG_START:
        return PartitionPlan(kind, target, f"{why}; commits the log start {target} ({was})")
    if kind is Decision.BEYOND_LOG_END_FORCED:
        return PartitionPlan(kind, target, f"{why}; commits the log end {target} (--force; {was})")
    return PartitionPlan(Decision.COPY, target, f"copies {target} ({was})")


@dataclass(frozen=True)
class PlanRow:
    """One partition: its facts and its plan."""

    facts: PartitionFacts
    plan: PartitionPlan

    @property
    def decision(self) -> Decision:
        return self.plan.decision


@dataclass(frozen=True)
class GroupActivity:
    """Who is using a group now.

    ``kafka_state`` is the group's state in Kafka (``Empty``, ``Stable``,
    ``Dead`` for a group Kafka does not know ...; None: not asked);
    ``zkcoord_members`` the members in its zkcoord state record (None: no
    record), whose ``offset_storage`` is ``zookeeper``, ``dual`` or ``kafka``;
    ``legacy_consumers`` the old ZooKeeper consumers registered under
    ``<root>/<group>/ids``; ``state_error`` what is wrong with a zkcoord
    state znode that is not a valid record (None: none, or valid).
    """

    kafka_state: str | None = None
    kafka_members: int = 0
    zkcoord_members: int | None = None
    offset_storage: str | None = None
    legacy_consumers: int = 0
    state_error: str | None = None

    @property
    def active(self) -> bool:
        return bool(self.kafka_members or self.zkcoord_members or self.legacy_consumers)

    def warnings(self) -> tuple[str, ...]:
        found = []
        if self.state_error:
            found.append(f"zkcoord state unreadable, members and offset storage unknown; apply refuses the "
                         f"group until it is repaired: {self.state_error}")
        if self.kafka_members:
            found.append(f"{self.kafka_members} active member(s) in Kafka (state {self.kafka_state}): Kafka "
                         "refuses offset commits from outside the group; stop them before applying")
        if self.zkcoord_members:
            found.append(f"{self.zkcoord_members} active member(s) in zkcoord (offset storage "
                         f"{self.offset_storage}): they keep committing, so legacy offsets move on")
        if self.legacy_consumers:
            found.append(f"{self.legacy_consumers} legacy ZooKeeper consumer(s) registered: they keep "
                         "committing to ZooKeeper")
        return tuple(found)


@dataclass(frozen=True)
class GroupPlan:
    """The plan of one group: its rows (sorted by topic, partition) and notes."""

    group: str
    rows: tuple[PlanRow, ...]
    activity: GroupActivity = GroupActivity()
    notes: tuple[str, ...] = ()
    # (topic, partition, Kafka's committed offset) where Kafka has an offset and ZooKeeper none
    kafka_only: tuple[tuple[str, int, int], ...] = ()

    def count(self, decision: Decision) -> int:
        return sum(1 for row in self.rows if row.decision is decision)

    @property
    def to_write(self) -> int:
        return sum(1 for row in self.rows if row.decision.writes)

    @property
    def flagged(self) -> int:
        return sum(1 for row in self.rows if row.decision.flagged)


def plan_group(group: str, facts: Iterable[PartitionFacts], options: Options = Options(),
               activity: GroupActivity = GroupActivity(),
               kafka_only: int | Mapping[tuple[str, int], int] = 0) -> GroupPlan:
    """Decide every partition of ``group``; ``kafka_only`` counts (or maps to
    Kafka's committed offset) the partitions with an offset in Kafka but none
    in ZooKeeper (kept as they are; ``migrate verify`` reports them).

    >>> p = plan_group("g", [PartitionFacts("g", "t", 1, "x", log_start=0, log_end=5),
    ...                      PartitionFacts("g", "t", 0, "3", log_start=0, log_end=5)])
    >>> [(r.facts.partition, r.decision.value) for r in p.rows], p.to_write, p.flagged
    ([(0, 'copy'), (1, 'unparsable')], 1, 1)
    """
    rows = []
    add = rows.append
    for item in facts:
        if item.group != group:
            raise UsageError(f"facts of group {item.group!r} given to the plan of group {group!r}")
        add(PlanRow(item, decide(item, options)))
    keys = [(row.facts.topic, row.facts.partition) for row in rows]
    rows = [row for _, _, row in sorted(zip(keys, range(len(rows)), rows))]  # by topic, partition; stable
    if len(set(keys)) != len(keys):
        seen = set()
        for row in rows:
            key = (row.facts.topic, row.facts.partition)
            if key in seen:
                raise UsageError(f"group {group!r} {key[0]}-{key[1]} is given twice")
            seen.add(key)
    notes = list(activity.warnings())
    only = () if isinstance(kafka_only, int) else tuple(sorted((t, p, o) for (t, p), o in kafka_only.items()))
    count = kafka_only if isinstance(kafka_only, int) else len(only)
    if count:
        notes.append(f"Kafka also has offsets for {count} partition(s) without a legacy offset; kept")
    return GroupPlan(group, tuple(rows), activity, tuple(notes), only)


@dataclass(frozen=True)
class Totals:
    """Counts over a whole plan; ``by_decision`` has every decision, 0 included."""

    groups: int
    partitions: int
    to_write: int
    flagged: int
    active_groups: int
    by_decision: Mapping[Decision, int] = field(default_factory=FrozenMap)

    def as_dict(self) -> dict[str, object]:
        return {"groups": self.groups, "partitions": self.partitions, "to_write": self.to_write,
                "flagged": self.flagged, "active_groups": self.active_groups,
                "by_decision": {d.value: n for d, n in self.by_decision.items()}}


@dataclass(frozen=True)
class Plan:
    """Every group's plan, in group order, and the totals."""

    groups: tuple[GroupPlan, ...]
    totals: Totals
    options: Options = Options()

    @property
    def rows(self) -> tuple[PlanRow, ...]:
        return tuple(row for g in self.groups for row in g.rows)


def make_plan(groups: Iterable[GroupPlan], options: Options = Options()) -> Plan:
    """A plan of ``groups`` (sorted by name) with its totals.

    >>> g = plan_group("g", [PartitionFacts("g", "t", 0, "3", kafka_offset=3, log_start=0, log_end=5)])
    >>> t = make_plan([g]).totals
    >>> t.partitions, t.to_write, t.by_decision[Decision.EQUAL], t.by_decision[Decision.COPY]
    (1, 0, 1, 0)
    """
    ordered = tuple(sorted(groups, key=lambda g: g.group))
    names = [g.group for g in ordered]
    if len(set(names)) != len(names):
        raise UsageError(f"a plan lists group(s) twice: {sorted({n for n in names if names.count(n) > 1})}")
    counts = Counter(row.decision for g in ordered for row in g.rows)
    totals = Totals(
        groups=len(ordered),
        partitions=sum(len(g.rows) for g in ordered),
        to_write=sum(g.to_write for g in ordered),
        flagged=sum(g.flagged for g in ordered),
        active_groups=sum(1 for g in ordered if g.activity.active),
        by_decision=FrozenMap({d: counts.get(d, 0) for d in Decision}),
    )
    return Plan(ordered, totals, options)


def dual_fetch(zk_offset: int | None, kafka_offset: int | None) -> int | None:
    """The offset a dual-commit consumer resumes from: the larger of the two.

    During the dual-commit phase (``offsets.storage=kafka`` with
    ``dual.commit.enabled=true``) commits go to both stores, but a member
    that has not been bounced yet commits to ZooKeeper only; the larger
    offset is the furthest the group has got, as Kafka's old consumer did.
    None means "no offset in that store".

    >>> dual_fetch(42, 40), dual_fetch(None, 7), dual_fetch(3, None), dual_fetch(None, None)
    (42, 7, 3, None)
    """
    _check_offset(zk_offset, "ZooKeeper offset")
    _check_offset(kafka_offset, "Kafka offset")
    if zk_offset is None:
        return kafka_offset
    if kafka_offset is None:
        return zk_offset
    return max(zk_offset, kafka_offset)
