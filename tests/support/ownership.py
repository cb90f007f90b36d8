"""Who owned which partition when, from the clients' own rebalance callbacks.

Pure: a test collects each member's :class:`AssignmentChange` s (from
Kafka's VerifiableConsumer or our AssignmentReporter, see
:mod:`tests.support.java4_tools`) and asks :func:`double_owners` whether
a partition was ever held by two members at once, as Kafka's system tests
check their consumers (``consumer_test.py``).

Rules, for both the eager classic protocol (revoke everything, then assign
the whole new assignment) and the incremental ones (cooperative classic,
KIP-848's consumer protocol: only what changes is revoked or assigned):

* a member owns a partition from the ``assigned`` callback that gives it to
  the member until the ``revoked`` or ``lost`` callback that takes it away
  (or until the end: still owned);
* two members' ownerships of one partition overlap when each began strictly
  before the other ended. Timestamps are milliseconds of one machine's clock,
  taken by each client when its callback ran; a revocation and the next
  owner's assignment in the same millisecond do not count as an overlap
  (the consumer protocol orders them: the coordinator assigns a revoked
  partition only after the old owner's heartbeat said it released it, which
  it sends after its callback returned);
* a ``lost`` partition was taken from a member that was fenced or left the
  group before its callback ran, so the next owner may legitimately have it
  before that callback: overlaps with an ownership ended by ``lost`` are
  left out unless ``include_lost``.

:func:`coverage` measures a window instead: per partition, the time no
member owned it (the longest such gap too) and the time two or more did,
e.g. the unowned partition-seconds of a handover (``bench/bench_handover.py``).

Example::

    a = [AssignmentChange("a", "assigned", 10, {("t", 0), ("t", 1)}),
         AssignmentChange("a", "revoked", 20, {("t", 1)})]
    b = [AssignmentChange("b", "assigned", 20, {("t", 1)})]
    double_owners([*a, *b]) == []          # handed over at 20
    double_owners([*a, AssignmentChange("b", "assigned", 19, {("t", 1)})])
    # -> one Overlap of ("t", 1): a from 10 to 20, b from 19
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

TopicPartition = tuple[str, int]
KINDS = ("assigned", "revoked", "lost")


@dataclass(frozen=True)
class AssignmentChange:
    """One callback of one member: ``kind`` is assigned, revoked or lost."""

    member: str  # who (a member id, or the test's name for the process)
    kind: str
    ts_ms: int
    partitions: frozenset[TopicPartition]

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r}: one of {KINDS}")
        object.__setattr__(self, "partitions", frozenset(self.partitions))


@dataclass(frozen=True)
class Ownership:
    member: str
    partition: TopicPartition
    start_ms: int
    end_ms: int | None  # None: still owned
    ended_by: str | None  # "revoked", "lost" or None


@dataclass(frozen=True)
class Overlap:
    partition: TopicPartition
    first: Ownership
    second: Ownership

    def __str__(self) -> str:
        def span(o: Ownership) -> str:
            return f"{o.member} {o.start_ms}..{o.end_ms if o.end_ms is not None else 'end'}"
        return f"{self.partition[0]}-{self.partition[1]} held by {span(self.first)} and {span(self.second)}"


def ownerships(changes: Iterable[AssignmentChange]) -> list[Ownership]:
    """Each member's spans of ownership, from its changes in the order it
    printed them (a member's own order; timestamps may tie)."""
    owned: dict[str, dict[TopicPartition, int]] = defaultdict(dict)
    spans: list[Ownership] = []
    for change in changes:
        held = owned[change.member]
        for tp in sorted(change.partitions):
            if change.kind == "assigned":
                held.setdefault(tp, change.ts_ms)
            elif tp in held:
                spans.append(Ownership(change.member, tp, held.pop(tp), change.ts_ms, change.kind))
    for member, held in owned.items():
        spans += [Ownership(member, tp, start, None, None) for tp, start in held.items()]
    return spans


def double_owners(changes: Iterable[AssignmentChange], include_lost: bool = False) -> list[Overlap]:
    """Every pair of two members' overlapping ownerships of one partition
    (see the module's rules); empty when no partition had two owners."""
    by_partition: dict[TopicPartition, list[Ownership]] = defaultdict(list)
    for span in ownerships(changes):
        by_partition[span.partition].append(span)
    found = []
    for tp, spans in sorted(by_partition.items()):
        spans.sort(key=lambda o: o.start_ms)
        for i, first in enumerate(spans):
            for second in spans[i + 1:]:
                if first.member == second.member:
                    continue
                if not include_lost and "lost" in (first.ended_by, second.ended_by):
                    continue
                if _before(first.start_ms, second.end_ms) and _before(second.start_ms, first.end_ms):
                    found.append(Overlap(tp, first, second))
    return found


def _before(start_ms: int, end_ms: int | None) -> bool:
    return end_ms is None or start_ms < end_ms


def current_owners(changes: Iterable[AssignmentChange]) -> dict[TopicPartition, set[str]]:
    """Who holds each partition after all ``changes`` (a partition with two
    members in its set has two owners now)."""
    owners: dict[TopicPartition, set[str]] = defaultdict(set)
    for span in ownerships(changes):
        if span.end_ms is None:
            owners[span.partition].add(span.member)
    return dict(owners)


@dataclass(frozen=True)
class Coverage:
    """One partition over a window: time with no owner, its longest stretch,
    time with two or more owners (in the changes' unit)."""

    unowned: int
    longest_gap: int
    shared: int


def coverage(changes: Iterable[AssignmentChange], partitions: Iterable[TopicPartition], start: int,
             end: int) -> dict[TopicPartition, Coverage]:
    """Per partition of ``partitions``, its :class:`Coverage` over ``[start,
    end)``. A release and the next owner's assignment at the same instant
    leave no gap and no overlap; an ownership still open runs to ``end``."""
    marks: dict[TopicPartition, list[tuple[int, int]]] = defaultdict(list)
    for span in ownerships(changes):
        marks[span.partition] += [(span.start_ms, 1), (end if span.end_ms is None else span.end_ms, -1)]
    found = {}
    for tp in partitions:
        owners, at, unowned, gap, longest, shared = 0, start, 0, 0, 0, 0
        for ts, step in sorted(marks.get(tp, []), key=lambda m: (m[0], m[1])):  # releases first at a tie
            ts = min(max(ts, start), end)
            if owners == 0:
                unowned, gap = unowned + ts - at, gap + ts - at
            else:
                longest, gap = max(longest, gap), 0
                if owners > 1:
                    shared += ts - at
            owners, at = owners + step, ts
        if owners == 0:
            unowned, gap = unowned + end - at, gap + end - at
        elif owners > 1:
            shared += end - at
        found[tp] = Coverage(unowned, max(longest, gap), shared)
    return found
