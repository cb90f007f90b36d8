"""``migrate plan``: gather the facts of the selected groups and decide.

This module owns choosing the groups (:class:`Selection`: named groups, all
legacy groups under the root, or those whose name matches a regular
expression) and turning what ZooKeeper (:mod:`zkcoord.zk.legacy`) and
Kafka (:mod:`zkcoord.kafka.offsets`) say into the
:class:`~zkcoord.core.migration.PartitionFacts` the pure rules of
:mod:`zkcoord.core.migration` decide on. It changes nothing anywhere.

Rules:

1. Rows are the partitions with a legacy offset. Partitions with an offset
   in Kafka only are counted in the group's notes, not planned (they are
   kept as they are).
2. Kafka is asked once per question for all selected groups: partition
   counts of every topic seen, log ranges of the partitions that exist,
   committed offsets, group states.
3. A group named with ``--group`` that has nothing under the root is a
   NotFoundError (a typo must not plan nothing quietly); ``--pattern`` uses
   :func:`re.fullmatch` (``'orders-.*'``) and may match nothing.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from zkcoord.core.migration import GroupActivity, Options, PartitionFacts, Plan, make_plan, plan_group
from zkcoord.errors import NotFoundError, UsageError
from zkcoord.kafka.offsets import KafkaGroup, LogRange, TopicPartition
from zkcoord.zk.legacy import LegacyGroup, LegacyOffsets

__all__ = ["Selection", "KafkaFacts", "gather_plan", "select_groups"]


@dataclass(frozen=True)
class Selection:
    """Which groups: ``groups`` named, ``all_groups``, or ``pattern``; exactly one."""

    groups: tuple[str, ...] = ()
    all_groups: bool = False
    pattern: str | None = None

    def __post_init__(self) -> None:
        chosen = sum([bool(self.groups), self.all_groups, self.pattern is not None])
        if chosen != 1:
            raise UsageError("choose the groups with exactly one of --group G (repeatable), --all or --pattern REGEX")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise UsageError(f"--pattern {self.pattern!r} is not a regular expression: {exc}") from None

    def choose(self, legacy_groups: Iterable[str], root: str) -> list[str]:
        """The selected groups among those under ``root``, in order."""
        present = sorted(set(legacy_groups))
        if self.all_groups:
            return present
        if self.pattern is not None:
            regex = re.compile(self.pattern)
            return [g for g in present if regex.fullmatch(g)]
        missing = [g for g in self.groups if g not in set(present)]
        if missing:
            shown = ", ".join(repr(g) for g in missing)
            raise NotFoundError(f"no legacy group {shown} under {root} (it has {len(present)} group(s)); "
                                "check the name and --zk-root")
        return list(dict.fromkeys(self.groups))


class KafkaFacts(Protocol):
    """What the plan asks Kafka (:class:`~zkcoord.kafka.offsets.KafkaOffsets` answers it)."""

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int | None]: ...

    def log_ranges(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, LogRange]: ...

    def committed_offsets(self, groups: Iterable[str]) -> dict[str, dict[TopicPartition, int]]: ...

    def groups(self, groups: Iterable[str]) -> dict[str, KafkaGroup]: ...


async def select_groups(legacy: LegacyOffsets, selection: Selection) -> list[str]:
    """The selected legacy groups. Named groups are checked one by one rather
    than by listing the whole root (a per-group apply over thousands of
    groups would list it thousands of times); only when one is missing is the
    root listed, for the error message."""
    if selection.groups and not selection.all_groups and selection.pattern is None:
        named = list(dict.fromkeys(selection.groups))
        if all(await asyncio.gather(*(legacy.group_exists(g) for g in named))):
            return named
    return selection.choose(await legacy.list_groups(), legacy.root)


async def gather_plan(legacy: LegacyOffsets, kafka: KafkaFacts, selection: Selection,
                      options: Options = Options()) -> Plan:
    """Read everything about the selected groups, decide, total. Writes nothing."""
    groups = await select_groups(legacy, selection)
    found = await legacy.read_groups(groups)
    topics = {t for g in found.values() for t, _ in g.offsets}
    counts = await asyncio.to_thread(kafka.partition_counts, topics)
    existing = {(t, p) for g in found.values() for t, p in g.offsets if p < (counts.get(t) or 0)}
    ranges = await asyncio.to_thread(kafka.log_ranges, existing)
    committed = await asyncio.to_thread(kafka.committed_offsets, groups)
    states = await asyncio.to_thread(kafka.groups, groups)
    plans = [_plan_one(found[g], counts, ranges, committed.get(g, {}), states.get(g), options) for g in groups]
    return make_plan(plans, options)


def _plan_one(group: LegacyGroup, counts: Mapping[str, int | None], ranges: Mapping[TopicPartition, LogRange],
              committed: Mapping[TopicPartition, int], kafka_group: KafkaGroup | None, options: Options):
    facts, name, range_of, kafka_of = [], group.group, ranges.get, committed.get  # (called per partition)
    for key, raw in sorted(group.offsets.items()):
        topic, partition = key
        log_range = range_of(key)
        facts.append(PartitionFacts(name, topic, partition, raw, kafka_offset=kafka_of(key),
                                    log_start=log_range.start if log_range else None,
                                    log_end=log_range.end if log_range else None,
                                    topic_exists=counts.get(topic) is not None,
                                    partition_exists=log_range is not None))
    activity = GroupActivity(
        kafka_state=kafka_group.state if kafka_group else None,
        kafka_members=kafka_group.members if kafka_group else 0,
        zkcoord_members=group.zkcoord_members,
        offset_storage=group.offset_storage,
        legacy_consumers=group.legacy_consumers,
        state_error=group.state_error,
    )
    kafka_only = {tp: offset for tp, offset in committed.items() if tp not in group.offsets}
    return plan_group(group.group, facts, options, activity, kafka_only)
