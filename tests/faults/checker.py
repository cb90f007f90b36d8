"""The fault-run checker: pure functions over what a fault run logged.

Each process of a run writes JSON lines (``tests/faults/worker.py`` for the
consumers, the producer and the monitor of ``tests/faults/harness.py``);
the daemons' logs give the group's generation history. This module turns
those into plain records and checks, over the whole run:

* **exclusive ownership** - no partition assigned to two members of one
  generation, and no member assigned in a generation whose stored member
  list (when known) does not name it;
* **no stale commit accepted** - an acknowledged commit was sent with a
  generation that was current when it was sent: no later generation had
  been persisted before (``GenerationSeen.t`` is when the generation was
  first observed, an upper bound on when it was stored, so the check only
  flags commits that were certainly stale), by a member of that generation;
* **committed offsets never go backwards** - the ZooKeeper offsets sampled
  during the run, per partition; and the acknowledged commits of one
  generation, per partition, in the order they were sent;
* **acknowledged commits are durable** - the final committed offset of each
  partition is at least every acknowledged commit of it;
* **at-least-once delivery** - every record the producer had acknowledged
  was consumed by some member.

No I/O and no clock, except :func:`read_jsonl` and :func:`parse_daemon_log`
which only parse what they are given. Every check returns a list of
:class:`Violation` (empty when all is well), so a test asserts ``== []``
and a failure names each offending record.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path


@dataclass(frozen=True)
class Violation:
    kind: str  # double-owner, foreign-member, stale-commit, rewind, commit-rewind, commit-lost, not-consumed
    detail: str


@dataclass(frozen=True)
class Assignment:
    proc: str
    member: str
    generation: int
    partitions: tuple[int, ...]
    t: float


@dataclass(frozen=True)
class Commit:
    """One commit call. The generation it carried is known to lie in
    ``[gen_low, gen_high]`` (the member's generation read just before and
    just after the call; equal when nothing changed meanwhile)."""

    proc: str
    member: str
    gen_low: int
    gen_high: int
    offsets: dict[int, int]
    acked: bool
    t_sent: float
    t_done: float

    @property
    def exact(self) -> bool:
        return self.gen_low == self.gen_high


@dataclass(frozen=True)
class GenerationSeen:
    """A stored state of the group: its generation, members, and a time at
    or after which it was stored."""

    generation: int
    members: frozenset[str]
    state: str
    t: float


@dataclass(frozen=True)
class OffsetSample:
    t: float
    offsets: dict[int, int]  # partition -> committed offset (absent: none yet)


@dataclass
class RunLog:
    """Everything a run logged, as records."""

    assignments: list[Assignment] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    history: list[GenerationSeen] = field(default_factory=list)
    samples: list[OffsetSample] = field(default_factory=list)
    produced: set[tuple[int, int]] = field(default_factory=set)  # (partition, offset) acknowledged
    consumed: set[tuple[int, int]] = field(default_factory=set)
    final_offsets: dict[int, int] = field(default_factory=dict)
    torn_lines: int = 0  # lines cut short by a kill -9
    consumed_total: int = 0  # records returned by poll(), counting each time one was consumed again


# -- parsing -------------------------------------------------------------------------

def read_jsonl(text: str) -> tuple[list[dict], int]:
    """The JSON objects of ``text``, and how many lines did not parse (a
    process killed with -9 may leave its last line cut short)."""
    events, torn = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except ValueError:
            torn += 1
    return events, torn


_PERSISTED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO zkcoord\.server\.manager: group (\S+): "
                        r"(\w+), generation (-?\d+), leader (\S+), members \[(.*)\]$")


def parse_daemon_log(text: str, group: str) -> list[GenerationSeen]:
    """The states of ``group`` a daemon logged after persisting them
    (``group G: Stable, generation 3, leader m-1, members [m-1, m-2]``).
    Log times are local time with milliseconds."""
    seen = []
    for line in text.splitlines():
        found = _PERSISTED.match(line)
        if found is None or found.group(2) != group:
            continue
        stamp, _, state, generation, _, members = found.groups()
        t = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        names = frozenset(m.strip() for m in members.split(",") if m.strip())
        seen.append(GenerationSeen(int(generation), names, state, t))
    return seen


def run_log(events: Iterable[dict], history: Iterable[GenerationSeen] = (), torn_lines: int = 0) -> RunLog:
    """Sort logged events into a :class:`RunLog`. Event kinds: ``assigned``,
    ``commit``, ``records`` (consumers), ``acked`` (producer), ``zk_offsets``,
    ``state`` and ``final_offsets`` (the monitor)."""
    log = RunLog(history=list(history), torn_lines=torn_lines)
    for e in events:
        kind = e.get("ev")
        if kind == "assigned":
            log.assignments.append(Assignment(e["proc"], e["member"], e["gen"], tuple(sorted(e["partitions"])),
                                              e["t"]))
        elif kind == "commit":
            log.commits.append(Commit(e["proc"], e["member"], e["gen_low"], e["gen_high"],
                                      {int(p): o for p, o in e["offsets"].items()}, e["ok"], e["t_sent"],
                                      e["t_done"]))
        elif kind == "records":
            log.consumed.update((p, o) for p, o in e["recs"])
            log.consumed_total += len(e["recs"])
        elif kind == "acked":
            log.produced.update((p, o) for p, o in e["recs"])
        elif kind == "zk_offsets":
            log.samples.append(OffsetSample(e["t"], {int(p): o for p, o in e["offsets"].items()}))
        elif kind == "state":
            log.history.append(GenerationSeen(e["gen"], frozenset(e["members"]), e["state"], e["t"]))
        elif kind == "final_offsets":
            log.final_offsets = {int(p): o for p, o in e["offsets"].items()}
    log.history.sort(key=lambda g: g.t)
    log.samples.sort(key=lambda s: s.t)
    return log


# -- generation history ------------------------------------------------------------------

def first_seen(history: Iterable[GenerationSeen]) -> dict[int, float]:
    """Generation -> earliest time it was seen stored."""
    found: dict[int, float] = {}
    for g in history:
        found[g.generation] = min(found.get(g.generation, g.t), g.t)
    return found


def members_of(history: Iterable[GenerationSeen]) -> dict[int, frozenset[str]]:
    """Generation -> members its stored states named (union over the states
    logged with that generation that had members)."""
    found: dict[int, set[str]] = defaultdict(set)
    for g in history:
        if g.state in ("CompletingRebalance", "Stable"):
            found[g.generation] |= g.members
    return {gen: frozenset(m) for gen, m in found.items()}


# -- the checks --------------------------------------------------------------------------

def check_exclusive_ownership(assignments: Iterable[Assignment],
                              history: Iterable[GenerationSeen] = ()) -> list[Violation]:
    owners: dict[tuple[int, int], set[str]] = defaultdict(set)
    members = members_of(history)
    violations = []
    for a in assignments:
        for p in a.partitions:
            owners[(a.generation, p)].add(a.member)
        known = members.get(a.generation)
        if known is not None and a.partitions and a.member not in known:
            violations.append(Violation("foreign-member", f"{a.proc} ({a.member}) was assigned {list(a.partitions)} "
                                        f"in generation {a.generation}, whose stored members are {sorted(known)}"))
    for (generation, p), who in sorted(owners.items()):
        if len(who) > 1:
            violations.append(Violation("double-owner", f"partition {p} owned by {sorted(who)} in generation "
                                        f"{generation}"))
    return violations


def check_no_stale_commit(commits: Iterable[Commit], history: Iterable[GenerationSeen]) -> list[Violation]:
    history = list(history)
    seen, members = first_seen(history), members_of(history)
    violations = []
    for c in commits:
        if not c.acked:
            continue
        newer = sorted(g for g, t in seen.items() if g > c.gen_high and t < c.t_sent)
        if newer:
            violations.append(Violation("stale-commit", f"{c.proc} ({c.member}) commit {c.offsets} with generation "
                                        f"{c.gen_high} sent at {c.t_sent:.3f} was acknowledged, but generation "
                                        f"{newer[0]} was stored by {seen[newer[0]]:.3f}"))
        elif c.exact and c.gen_high in members and c.member not in members[c.gen_high]:
            violations.append(Violation("stale-commit", f"{c.proc} ({c.member}) commit {c.offsets} in generation "
                                        f"{c.gen_high} was acknowledged, but its members are "
                                        f"{sorted(members[c.gen_high])}"))
    return violations


def check_offsets_monotonic(samples: Iterable[OffsetSample], final_offsets: dict[int, int] | None = None
                            ) -> list[Violation]:
    last: dict[int, tuple[int, float]] = {}
    violations = []
    ordered = sorted(samples, key=lambda s: s.t)
    if final_offsets is not None:
        ordered.append(OffsetSample(float("inf"), final_offsets))
    for s in ordered:
        for p, offset in sorted(s.offsets.items()):
            before = last.get(p)
            if before is not None and offset < before[0]:
                violations.append(Violation("rewind", f"partition {p}: committed offset went from {before[0]} "
                                            f"(at {before[1]:.3f}) back to {offset} (at {s.t:.3f})"))
            last[p] = (offset, s.t)
    for p in sorted(set(last) - set(final_offsets or last)):
        violations.append(Violation("rewind", f"partition {p}: committed offset {last[p][0]} disappeared"))
    return violations


def check_commits_monotonic(commits: Iterable[Commit]) -> list[Violation]:
    """Acknowledged commits of one generation (exactly known) never go back
    on a partition, in the order they were sent."""
    last: dict[tuple[int, int], tuple[int, Commit]] = {}
    violations = []
    for c in sorted((c for c in commits if c.acked and c.exact), key=lambda c: c.t_sent):
        for p, offset in sorted(c.offsets.items()):
            before = last.get((c.gen_high, p))
            if before is not None and offset < before[0]:
                violations.append(Violation("commit-rewind", f"generation {c.gen_high}, partition {p}: "
                                            f"{before[1].proc} committed {before[0]}, then {c.proc} {offset}"))
            last[(c.gen_high, p)] = (offset, c)
    return violations


def check_commits_durable(commits: Iterable[Commit], final_offsets: dict[int, int]) -> list[Violation]:
    best: dict[int, tuple[int, Commit]] = {}
    for c in commits:
        if c.acked:
            for p, offset in c.offsets.items():
                if p not in best or offset > best[p][0]:
                    best[p] = (offset, c)
    return [Violation("commit-lost", f"partition {p}: {c.proc} had commit {offset} acknowledged, but the final "
                      f"committed offset is {final_offsets.get(p)}")
            for p, (offset, c) in sorted(best.items()) if final_offsets.get(p, -1) < offset]


def check_all_consumed(produced: set[tuple[int, int]], consumed: set[tuple[int, int]]) -> list[Violation]:
    missing = sorted(produced - consumed)
    if not missing:
        return []
    return [Violation("not-consumed", f"{len(missing)} acknowledged record(s) never consumed, first "
                      f"(partition, offset): {missing[:10]}")]


def check_run(log: RunLog) -> list[Violation]:
    """Every check over one run."""
    return [*check_exclusive_ownership(log.assignments, log.history),
            *check_no_stale_commit(log.commits, log.history),
            *check_offsets_monotonic(log.samples, log.final_offsets),
            *check_commits_monotonic(log.commits),
            *check_commits_durable(log.commits, log.final_offsets),
            *check_all_consumed(log.produced, log.consumed)]


def summary(log: RunLog) -> dict:
    generations = sorted({g.generation for g in log.history} | {a.generation for a in log.assignments})
    return {
        "produced": len(log.produced),
        "consumed_distinct": len(log.consumed),
        "consumed_again": log.consumed_total - len(log.consumed),  # duplicates (after kills, fencing)
        "assignments": len(log.assignments),
        "stored_states": len(log.history),
        "generations": len(generations),
        "max_generation": max(generations, default=-1),
        "commits": len(log.commits),
        "commits_acked": sum(c.acked for c in log.commits),
        "offset_samples": len(log.samples),
        "torn_lines": log.torn_lines,
    }


def verdicts(violations: Iterable[Violation]) -> dict[str, int]:
    """The checker's verdicts by name (0 each when all is well)."""
    names = {"double ownership": ("double-owner", "foreign-member"), "stale commits": ("stale-commit",),
             "offset regressions": ("rewind", "commit-rewind"), "acknowledged commits lost": ("commit-lost",),
             "acknowledged records not consumed": ("not-consumed",)}
    violations = list(violations)
    counted = {name: sum(1 for v in violations if v.kind in kinds) for name, kinds in names.items()}
    known = {k for kinds in names.values() for k in kinds}
    counted["other"] = sum(1 for v in violations if v.kind not in known)
    return counted


@dataclass(frozen=True)
class ClockShift:
    """A daemon's wall clock moved by ``offset_s`` between the true times
    ``real_from`` and ``real_to`` (the fault run's ``clock-shift`` events)."""

    node: int
    offset_s: float
    real_from: float
    real_to: float


def unshift(seen: Iterable[GenerationSeen], shifts: Iterable[ClockShift], margin_s: float = 1.0) -> list[GenerationSeen]:
    """A shifted daemon's log times back in true time: an entry logged while
    its clock was ``offset_s`` off reads ``[real_from, real_to] + offset_s``
    (offsets of an hour and more, windows of seconds: no true time of the
    run falls there); it is moved back by ``offset_s``. Others are kept.

    >>> g = GenerationSeen(3, frozenset(), "Stable", 1000.0 + 3600)
    >>> unshift([g, GenerationSeen(4, frozenset(), "Stable", 1010.0)], [ClockShift(1, 3600, 999, 1005)])[0].t
    1000.0"""
    out = []
    for g in seen:
        for s in shifts:
            if s.real_from + s.offset_s - margin_s <= g.t <= s.real_to + s.offset_s + margin_s:
                g = GenerationSeen(g.generation, g.members, g.state, g.t - s.offset_s)
                break
        out.append(g)
    return out


def clock_shifts(events: Iterable[dict]) -> dict[int, list[ClockShift]]:
    """The ``clock-shift`` events of a run, per daemon node id."""
    found: dict[int, list[ClockShift]] = defaultdict(list)
    for e in events:
        if e.get("ev") == "clock-shift":
            found[e["node"]].append(ClockShift(e["node"], e["offset_s"], e["real_from"], e["real_to"]))
    return dict(found)


def load_dir(directory: Path, group: str, daemon_logs: Iterable[Path] = ()) -> RunLog:
    """A :class:`RunLog` from every ``*.jsonl`` in ``directory`` and the
    given daemon logs (reads files; the parsing is the pure functions above).
    A daemon log named ``daemon-<n>.log`` whose clock the run shifted
    (``clock-shift`` events) is read back in true time (:func:`unshift`)."""
    events, torn = [], 0
    for path in sorted(directory.glob("*.jsonl")):
        found, bad = read_jsonl(path.read_text(errors="replace"))
        events += found
        torn += bad
    shifts = clock_shifts(events)
    history = []
    for path in daemon_logs:
        seen = parse_daemon_log(path.read_text(errors="replace"), group)
        node = re.fullmatch(r"daemon-(\d+)\.log", path.name)
        if node is not None and int(node.group(1)) in shifts:
            seen = unshift(seen, shifts[int(node.group(1))])
        history += seen
    return run_log(events, history, torn)
