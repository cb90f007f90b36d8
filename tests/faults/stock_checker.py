"""Verdicts on stock clients' own event streams, as Kafka's system tests give them.

Pure: no I/O (except :func:`load_dir`, which only reads what it is given)
and no clock. The input is what the clients printed, one JSON object a line,
in the shape of Kafka's ``VerifiableConsumer`` / ``VerifiableProducer``
(``tools/src/main/java/org/apache/kafka/tools/Verifiable*.java``):

* consumers: ``partitions_assigned`` / ``partitions_revoked`` (and
  ``partitions_lost``, which only our librdkafka consumer prints; Kafka's
  VerifiableConsumer shows a lost partition as revoked), each with
  ``partitions: [{topic, partition}]``; ``records_consumed`` with one summary
  per partition (``topic, partition, count, minOffset, maxOffset``);
  ``offsets_committed`` with ``offsets: [{topic, partition, offset[, error]}]``,
  ``success`` and ``error``; each event with ``timestamp``, wall-clock
  milliseconds when the client printed it (every client of a run is on this
  machine: one clock);
* the producer: ``producer_send_success`` (``topic, partition, offset``) for
  each acknowledged record, ``producer_send_error`` for each failed one.

A consumer *process* is one :class:`MemberRun`: its events in the order it
printed them, and how its life ended (``clean``: it was asked to stop and
exited; ``killed``: SIGKILL, no callback, no commit; ``died``: it exited by
itself), at a moment at or after its death. A restarted consumer is a new
run (``c1#0``, ``c1#1``, ...): two incarnations of one static member are two
runs.

The verdicts (:func:`check_stock`), each a list of
:class:`tests.faults.checker.Violation` s, empty when the property holds:

* ``not-consumed``: a record the producer had acknowledged was consumed by
  nobody (Kafka's "every acked message consumed");
* ``commit-rewind``: per partition, the successful commits of every member
  in time order never go backwards (a commit counts against those printed
  strictly earlier: two members' commits in one millisecond are not ordered);
* ``commit-lost``: given the committed offsets read after the run, each
  partition's is at least every successful commit of it;
* ``double-owner``: no partition held by two live members at once, by their
  own callbacks (:func:`tests.support.ownership.double_owners`); a member's
  holding ends at its ``partitions_revoked`` / ``partitions_lost`` or, at
  the latest, when its process ended. Overlaps with a holding ended by
  ``partitions_lost`` (the member was fenced before its callback ran) are
  counted apart (:attr:`StockVerdict.lost_overlaps`), as
  :mod:`tests.support.ownership` does;
* ``consumed-behind-commit``: no member consumed a partition from below an
  offset some member had committed before (Kafka's ``_update_global_position``
  "Consumed position is behind the current committed offset");
* per member, Kafka's ``ConsumerEventHandler`` assertions:
  ``consumed-unassigned`` (records of a partition it did not hold),
  ``commit-unassigned`` (a successful commit of a partition it did not
  hold), ``commit-ahead`` (a commit past what it had consumed),
  ``position-jump`` (within one holding of a partition, a batch not starting
  where the last one ended);
* ``duplicate``: a record consumed again. Each is attributed to what made it
  possible, from the earlier consumer's run: ``hard-kill`` (it was killed or
  died, before the re-consumption, without a successful commit past the
  record), ``failed-commit`` (its commit past the record failed), ``lost``
  (its holding ended by ``partitions_lost``), else ``unexplained``; a
  failure or a loss counts when printed after the record was consumed,
  also after the re-consumption (a member fenced while the group moved on
  learns it late: Kafka accepts a fenced member's late callback). Counted
  per cause in :attr:`StockVerdict.duplicates`; a violation unless its cause
  is in ``allowed_duplicates`` (default: ``hard-kill`` only, as Kafka's
  tests allow duplicates only after a hard failure).
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.faults.checker import Violation
from tests.support.ownership import AssignmentChange, Overlap, double_owners

TopicPartition = tuple[str, int]
ENDS = ("clean", "killed", "died")
DUPLICATE_CAUSES = ("hard-kill", "failed-commit", "lost", "unexplained")
EXAMPLES = 5  # offsets named in a violation's detail


@dataclass(frozen=True)
class MemberRun:
    """One consumer process: ``member`` names the incarnation (``c1#0``),
    ``events`` are its JSON events in printed order; ``ended_ms`` is at or
    after its death (None: still running when the events were taken), ``end``
    how it ended (``clean``, ``killed``, ``died``; None while running)."""

    member: str
    events: tuple[dict, ...]
    ended_ms: int | None = None
    end: str | None = None
    client: str = ""  # e.g. "java-4.4.0", "librdkafka-2.16.0", for messages

    def __post_init__(self) -> None:
        object.__setattr__(self, "events", tuple(self.events))
        if self.end is not None and self.end not in ENDS:
            raise ValueError(f"end {self.end!r}: one of {ENDS}")
        if (self.end is None) != (self.ended_ms is None):
            raise ValueError(f"{self.member}: end and ended_ms go together ({self.end!r}, {self.ended_ms!r})")


@dataclass(frozen=True)
class Consumption:
    member: str
    ts: int
    tp: TopicPartition
    low: int
    high: int
    seq: int  # its place among all batches, to order ties


@dataclass(frozen=True)
class CommitResult:
    member: str
    ts: int
    tp: TopicPartition
    offset: int
    ok: bool


@dataclass
class StockVerdict:
    violations: list[Violation]
    duplicates: dict[str, int]  # cause -> records consumed again
    acked: int  # distinct records acknowledged
    consumed: int  # records consumed, duplicates included
    commits: int  # successful commits (partition offsets)
    members: int
    lost_overlaps: list[Overlap] = field(default_factory=list)

    def summary(self) -> dict:
        return {"acked": self.acked, "consumed": self.consumed, "commits": self.commits, "members": self.members,
                "duplicates": {c: n for c, n in self.duplicates.items() if n},
                "lost_overlaps": len(self.lost_overlaps), "violations": len(self.violations)}


# -- reading events ---------------------------------------------------------------------

def _name(event: Mapping) -> str | None:
    return event.get("name")


def _ts(event: Mapping) -> int:
    return int(event["timestamp"])


def _tps(items: Iterable[Mapping]) -> frozenset[TopicPartition]:
    return frozenset((p["topic"], int(p["partition"])) for p in items)


def acked_records(producer_events: Iterable[Mapping]) -> dict[TopicPartition, set[int]]:
    """Offsets of acknowledged records per partition (``producer_send_success``)."""
    acked: dict[TopicPartition, set[int]] = defaultdict(set)
    for event in producer_events:
        if _name(event) == "producer_send_success":
            acked[(event["topic"], int(event["partition"]))].add(int(event["offset"]))
    return dict(acked)


def changes(run: MemberRun) -> list[AssignmentChange]:
    """The run's assignment changes, its holdings closed when it ended."""
    kinds = {"partitions_assigned": "assigned", "partitions_revoked": "revoked", "partitions_lost": "lost"}
    found = []
    held: set[TopicPartition] = set()
    for event in run.events:
        kind = kinds.get(_name(event))
        if kind is None:
            continue
        parts = _tps(event["partitions"])
        found.append(AssignmentChange(run.member, kind, _ts(event), parts))
        held = held | parts if kind == "assigned" else held - parts
    if run.ended_ms is not None and held:
        found.append(AssignmentChange(run.member, "revoked", run.ended_ms, frozenset(held)))
    return found


def _consumptions(runs: Iterable[MemberRun]) -> list[Consumption]:
    found = []
    for run in runs:
        for event in run.events:
            if _name(event) != "records_consumed":
                continue
            for s in event["partitions"]:
                found.append(Consumption(run.member, _ts(event), (s["topic"], int(s["partition"])),
                                         int(s["minOffset"]), int(s["maxOffset"]), len(found)))
    return found


def _commits(runs: Iterable[MemberRun]) -> list[CommitResult]:
    found = []
    for run in runs:
        for event in run.events:
            if _name(event) != "offsets_committed":
                continue
            for o in event.get("offsets") or ():
                ok = bool(event.get("success")) and not o.get("error")
                found.append(CommitResult(run.member, _ts(event), (o["topic"], int(o["partition"])),
                                          int(o["offset"]), ok))
    return found


def _examples(offsets: Iterable[int]) -> str:
    ordered = sorted(offsets)
    shown = ", ".join(map(str, ordered[:EXAMPLES]))
    return shown + (f", ... ({len(ordered)} in all)" if len(ordered) > EXAMPLES else "")


def _tp(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


# -- the verdicts ---------------------------------------------------------------------------

def not_consumed(acked: Mapping[TopicPartition, set[int]], consumptions: Iterable[Consumption]) -> list[Violation]:
    seen: dict[TopicPartition, set[int]] = defaultdict(set)
    for c in consumptions:
        seen[c.tp].update(range(c.low, c.high + 1))
    found = []
    for tp in sorted(acked):
        gap = acked[tp] - seen.get(tp, set())
        if gap:
            found.append(Violation("not-consumed", f"{_tp(tp)}: acknowledged but never consumed: {_examples(gap)}"))
    return found


def commit_rewinds(commits: Iterable[CommitResult]) -> list[Violation]:
    by_tp: dict[TopicPartition, list[CommitResult]] = defaultdict(list)
    for c in commits:
        if c.ok:
            by_tp[c.tp].append(c)
    found = []
    for tp, ordered in sorted(by_tp.items()):
        ordered.sort(key=lambda c: c.ts)
        best: CommitResult | None = None  # the highest commit printed strictly before the current millisecond
        i = 0
        while i < len(ordered):
            j = i
            while j < len(ordered) and ordered[j].ts == ordered[i].ts:
                j += 1
            for c in ordered[i:j]:
                if best is not None and c.offset < best.offset:
                    found.append(Violation("commit-rewind", f"{_tp(tp)}: {c.member} committed {c.offset} at {c.ts} "
                                                            f"after {best.member} committed {best.offset} at {best.ts}"))
            for c in ordered[i:j]:
                if best is None or c.offset > best.offset:
                    best = c
            i = j
    return found


def commits_lost(commits: Iterable[CommitResult], final: Mapping[TopicPartition, int]) -> list[Violation]:
    highest: dict[TopicPartition, CommitResult] = {}
    for c in commits:
        if c.ok and (c.tp not in highest or c.offset > highest[c.tp].offset):
            highest[c.tp] = c
    found = []
    for tp, c in sorted(highest.items()):
        stored = final.get(tp)
        if stored is None or stored < c.offset:
            found.append(Violation("commit-lost", f"{_tp(tp)}: {c.member}'s commit of {c.offset} (at {c.ts}) was "
                                                  f"acknowledged, the committed offset at the end is {stored}"))
    return found


def consumed_behind_commit(consumptions: Iterable[Consumption], commits: Iterable[CommitResult]) -> list[Violation]:
    by_tp: dict[TopicPartition, list[CommitResult]] = defaultdict(list)
    for c in commits:
        if c.ok:
            by_tp[c.tp].append(c)
    # per partition: commit times, and the highest commit up to each (a prefix maximum)
    times: dict[TopicPartition, list[int]] = {}
    tops: dict[TopicPartition, list[CommitResult]] = {}
    for tp, ordered in by_tp.items():
        ordered.sort(key=lambda c: c.ts)
        times[tp] = [c.ts for c in ordered]
        running, best = [], ordered[0]
        for c in ordered:
            best = c if c.offset > best.offset else best
            running.append(best)
        tops[tp] = running
    found = []
    for batch in consumptions:
        before = bisect_left(times.get(batch.tp, ()), batch.ts)  # commits printed strictly earlier
        if before == 0:
            continue
        top = tops[batch.tp][before - 1]
        if batch.low < top.offset:
            found.append(Violation("consumed-behind-commit",
                                   f"{_tp(batch.tp)}: {batch.member} consumed {batch.low}..{batch.high} at {batch.ts}, "
                                   f"below {top.member}'s commit of {top.offset} at {top.ts}"))
    return found


def member_checks(run: MemberRun) -> list[Violation]:
    """Kafka's ConsumerEventHandler assertions on one run, with incremental
    assignments (eager ones revoke everything first, so they replay alike)."""
    found = []
    held: set[TopicPartition] = set()
    position: dict[TopicPartition, int] = {}
    for event in run.events:
        name = _name(event)
        if name == "partitions_assigned":
            for tp in _tps(event["partitions"]):
                held.add(tp)
                position.pop(tp, None)
        elif name in ("partitions_revoked", "partitions_lost"):
            for tp in _tps(event["partitions"]):
                held.discard(tp)
                position.pop(tp, None)
        elif name == "records_consumed":
            for s in event["partitions"]:
                tp, low, high = (s["topic"], int(s["partition"])), int(s["minOffset"]), int(s["maxOffset"])
                if tp not in held:
                    found.append(Violation("consumed-unassigned", f"{run.member} consumed {_tp(tp)} {low}..{high} at "
                                                                  f"{_ts(event)} holding {sorted(held)}"))
                elif tp in position and position[tp] != low:
                    found.append(Violation("position-jump", f"{run.member} consumed {_tp(tp)} from {low} at "
                                                            f"{_ts(event)}, its position was {position[tp]}"))
                position[tp] = high + 1
        elif name == "offsets_committed" and event.get("success"):
            for o in event.get("offsets") or ():
                if o.get("error"):
                    continue
                tp, offset = (o["topic"], int(o["partition"])), int(o["offset"])
                if tp not in held:
                    found.append(Violation("commit-unassigned", f"{run.member} committed {_tp(tp)} at {offset} "
                                                                f"(at {_ts(event)}) not holding it"))
                elif offset > position.get(tp, -1):
                    found.append(Violation("commit-ahead", f"{run.member} committed {_tp(tp)} at {offset} "
                                                           f"(at {_ts(event)}), its position was {position.get(tp)}"))
    return found


def duplicates(runs: Mapping[str, MemberRun], consumptions: Iterable[Consumption],
               commits: Iterable[CommitResult]) -> dict[tuple[TopicPartition, str], list[tuple[int, str, str]]]:
    """Records consumed again: (partition, cause) -> [(offset, earlier
    member, later member)] (see the module's causes)."""
    good: dict[tuple[str, TopicPartition], list[CommitResult]] = defaultdict(list)
    failed: dict[tuple[str, TopicPartition], list[CommitResult]] = defaultdict(list)
    for c in commits:
        (good if c.ok else failed)[(c.member, c.tp)].append(c)
    lost_at: dict[tuple[str, TopicPartition], list[int]] = defaultdict(list)
    for run in runs.values():
        for event in run.events:
            if _name(event) == "partitions_lost":
                for tp in _tps(event["partitions"]):
                    lost_at[(run.member, tp)].append(_ts(event))

    def cause(earlier: str, at: int, tp: TopicPartition, offset: int, now: int) -> str:
        run = runs[earlier]
        if any(c.offset > offset and c.ts <= now for c in good.get((earlier, tp), ())):
            return "unexplained"  # consumed again below a commit that covered it
        if run.end in ("killed", "died") and run.ended_ms is not None and run.ended_ms <= now:
            return "hard-kill"
        # A refused commit and a lost partition are printed when the member learns of them, which for a
        # member fenced while the group moved on is after the next owner consumed the records again.
        if any(c.offset > offset and c.ts >= at for c in failed.get((earlier, tp), ())):
            return "failed-commit"
        if any(ts >= at for ts in lost_at.get((earlier, tp), ())):
            return "lost"
        return "unexplained"

    by_tp: dict[TopicPartition, list[Consumption]] = defaultdict(list)
    for batch in consumptions:
        by_tp[batch.tp].append(batch)
    found: dict[tuple[TopicPartition, str], list[tuple[int, str, str]]] = defaultdict(list)
    for tp, batches in by_tp.items():
        last: dict[int, tuple[str, int]] = {}
        for batch in sorted(batches, key=lambda b: (b.ts, b.seq)):
            for offset in range(batch.low, batch.high + 1):
                if offset in last:
                    earlier, at = last[offset]
                    found[(tp, cause(earlier, at, tp, offset, batch.ts))].append((offset, earlier, batch.member))
                last[offset] = (batch.member, batch.ts)
    return dict(found)


def check_stock(runs: Iterable[MemberRun], producer_events: Iterable[Mapping], *,
                final_committed: Mapping[TopicPartition, int] | None = None,
                allowed_duplicates: Iterable[str] = ("hard-kill",)) -> StockVerdict:
    """Every verdict of the module over one run: the consumers' ``runs`` and
    the producers' events; ``final_committed`` (the group's committed offsets
    read at the end), when given, for ``commit-lost``."""
    runs = list(runs)
    by_member = {r.member: r for r in runs}
    if len(by_member) != len(runs):
        raise ValueError("two runs share a member name; name each incarnation (c1#0, c1#1, ...)")
    allowed = set(allowed_duplicates)
    unknown = allowed - set(DUPLICATE_CAUSES)
    if unknown:
        raise ValueError(f"allowed_duplicates {sorted(unknown)}: causes are {DUPLICATE_CAUSES}")
    acked = acked_records(producer_events)
    consumptions = _consumptions(runs)
    commits = _commits(runs)

    violations = not_consumed(acked, consumptions)
    violations += commit_rewinds(commits)
    if final_committed is not None:
        violations += commits_lost(commits, final_committed)
    all_changes = [c for r in runs for c in changes(r)]
    lost_overlaps = []
    for overlap in double_owners(all_changes, include_lost=True):
        if "lost" in (overlap.first.ended_by, overlap.second.ended_by):
            lost_overlaps.append(overlap)
        else:
            violations.append(Violation("double-owner", str(overlap)))
    violations += consumed_behind_commit(consumptions, commits)
    for run in runs:
        violations += member_checks(run)
    counts = Counter({cause: 0 for cause in DUPLICATE_CAUSES})
    for (tp, cause), found in sorted(duplicates(by_member, consumptions, commits).items()):
        counts[cause] += len(found)
        if cause not in allowed:
            pairs = sorted({(a, b) for _, a, b in found})
            violations.append(Violation("duplicate", f"{_tp(tp)}: {len(found)} record(s) consumed again ({cause}): "
                                                     f"{_examples(o for o, _, _ in found)}; by {pairs[:EXAMPLES]}"))
    return StockVerdict(violations, dict(counts), sum(map(len, acked.values())),
                        sum(c.high - c.low + 1 for c in consumptions), sum(1 for c in commits if c.ok), len(runs),
                        lost_overlaps)


# -- logs ----------------------------------------------------------------------------------

def read_events(path: Path) -> list[dict]:
    """The JSON objects of a client's stdout log (other lines skipped: a
    JVM may print warnings there)."""
    found = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                found.append(event)
    return found


def load_dir(directory: Path) -> tuple[list[MemberRun], list[dict]]:
    """What :class:`tests.support.verifiable.StockClients` wrote into
    ``directory``: each process's stdout (``<member>.jsonl``) and its life
    (``members.jsonl``: one ``{"member", "kind", "file", "ended_ms", "end",
    "client"}`` line per process, the last line of a member winning); the
    consumer runs and the producers' events."""
    lives: dict[str, dict] = {}
    for line in (directory / "members.jsonl").read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            lives[entry["member"]] = entry
    runs, produced = [], []
    for member, entry in lives.items():
        events = read_events(directory / entry["file"])
        if entry["kind"] == "producer":
            produced += events
        else:
            runs.append(MemberRun(member, tuple(events), entry.get("ended_ms"), entry.get("end"),
                                  entry.get("client", "")))
    return runs, produced
