"""One consumer group run with a checker verdict, for single-fault tests.

The fault suite's parts (``tests/faults/harness.py``: producer, monitor,
``tests/faults/worker.py`` consumer processes; ``tests/faults/checker.py``)
put together for a test that injects one fault and checks the whole run:
:class:`GroupRun` creates the topic, starts the monitor, the consumers and
the producer, waits until every partition has a committed offset, lets the
test do its fault, then (:meth:`GroupRun.finish`) stops producing, waits
until the group drained what was produced, stops the consumers and returns
the checker's verdict over everything logged.

Processes can be started elsewhere than as they are: :class:`WrappedFleet`
(daemons) and :class:`WrappedPool` (consumers) pass a node's or a
consumer's command line through a function first (``ip netns exec ...``
from :mod:`tests.support.netns`, a clock shift from
:mod:`tests.support.clock_shift`); the process keeps its pid (each
wrapper execs in place), which is what the fleet checks a registration by.

``history_logs`` says whose daemon logs give the checker its generation
history: a daemon whose wall clock was moved logs shifted times, which
would mislead the stale-commit check; the monitor's own observations of
the state znode (true time) are always part of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kafka.admin import KafkaAdminClient, NewTopic

from tests.faults.checker import RunLog, Violation, check_run, load_dir, read_jsonl, summary
from tests.faults.harness import LIVENESS_S, REPO, ConsumerPool, JsonLines, Monitor, Producer, quiet
from tests.support.daemons import DaemonFleet, process_marker, wait_for

Wrap = Callable[[list[str]], list[str]]


@dataclass
class WrappedFleet(DaemonFleet):
    """A :class:`DaemonFleet` whose node ``n`` runs as ``wrappers[n](argv)``."""

    wrappers: dict[int, Wrap] = field(default_factory=dict)

    def command(self, node_id: int, **options) -> list[str]:
        argv = super().command(node_id, **options)
        wrap = self.wrappers.get(node_id)
        return wrap(argv) if wrap is not None else argv


class WrappedPool(ConsumerPool):
    """A :class:`ConsumerPool` whose consumer ``i`` runs as ``wrappers[i](argv)``."""

    def __init__(self, count: int, log_dir: Path, wrappers: dict[int, Wrap] | None = None, **worker_args):
        super().__init__(count, log_dir, **worker_args)
        self.wrappers = wrappers or {}

    def start(self, index: int, **overrides) -> None:  # ConsumerPool.start, wrapped
        n = self.incarnations.get(index, -1) + 1
        self.incarnations[index] = n
        argv = [sys.executable, "-X", process_marker(), "-m", "tests.faults.worker", "--name", f"c{index}",
                "--log", str(self.log_dir / f"consumer-{index}-{n}.jsonl")]
        for name, value in {**self.worker_args, **overrides}.items():
            argv += [f"--{name.replace('_', '-')}", str(value)]
        wrap = self.wrappers.get(index)
        with open(self.log_dir / f"consumer-{index}-{n}.out", "ab") as out:
            proc = subprocess.Popen(wrap(argv) if wrap else argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT)
        self.procs[index] = proc
        self._all.append(proc)


@dataclass
class Verdict:
    log: RunLog
    violations: list[Violation]
    figures: dict

    def __str__(self) -> str:
        lines = [f"figures: {json.dumps(self.figures)}"]
        lines += [f"VIOLATION {v.kind}: {v.detail}" for v in self.violations[:20]]
        return "\n".join(lines)


class GroupRun:
    """A group of ``consumers`` worker processes on a ``partitions``-partition
    topic, a producer and a monitor (module docstring). ``worker_args``: more
    ``tests/faults/worker.py`` options (``coordinators`` is required);
    ``consumer_bootstrap``: where the consumers fetch from (a gateway),
    default ``bootstrap``, which the producer and the topic's creation use."""

    def __init__(self, fleet: DaemonFleet, bootstrap: str, group: str, topic: str, events: Path, *,
                 partitions: int = 6, consumers: int = 3, wrappers: dict[int, Wrap] | None = None,
                 rate: float = 20.0, consumer_bootstrap: str | None = None, **worker_args) -> None:
        self.fleet, self.bootstrap, self.group, self.topic = fleet, bootstrap, group, topic
        self.partitions, self.events = partitions, events
        events.mkdir(parents=True, exist_ok=True)
        self.monitor = Monitor(fleet.zk_hosts, group, topic, partitions, JsonLines(events / "monitor.jsonl"),
                               every_s=0.5)
        self.producer: Producer | None = None
        self.rate = rate
        self.pool = WrappedPool(consumers, events, wrappers, bootstrap=consumer_bootstrap or bootstrap, group=group,
                                topic=topic, **worker_args)
        self.started = False
        self.monitor_stopped = False

    # -- life -----------------------------------------------------------------------------
    def start(self, create_topic: bool = True) -> GroupRun:
        """``create_topic``: False when the test made the topic (and, say, the group's offsets) itself."""
        if create_topic:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=30_000)
            try:
                admin.create_topics([NewTopic(self.topic, self.partitions, 1)])
            finally:
                admin.close()
        self.producer = Producer(self.bootstrap, self.topic, self.partitions,
                                 JsonLines(self.events / "producer.jsonl"), rate=self.rate)
        self.monitor.start()
        self.pool.start_all()
        self.producer.start()
        self.started = True
        wait_for(lambda: len(quiet(self.monitor.offsets) or {}) == self.partitions, LIVENESS_S,
                 "every partition has a committed offset")
        return self

    def close(self) -> None:
        """Stop everything still running (idempotent; finish() does it in order)."""
        if self.producer is not None and self.producer.ident is not None:
            self.producer.stop()
        elif self.producer is not None:
            self.producer.producer.close(10)
        if not self.monitor_stopped and self.monitor.ident is not None:
            self.monitor_stopped = True
            self.monitor.stop()
        self.pool.close()

    # -- what the run shows ---------------------------------------------------------------------
    def stored(self) -> tuple[int, str, list[str]] | None:
        """The group's stored (generation, state, members), None while unreadable."""
        from zkcoord.core.group import from_record

        data = quiet(lambda: self.fleet.zk.get(f"/coordinators/{self.group}/state")[0])
        if not data:
            return None
        group = from_record(self.group, json.loads(data))
        return group.generation_id, group.state.value, sorted(group.members)

    def owner(self) -> int | None:
        owners = quiet(lambda: self.fleet.contenders(self.group)) or []
        return owners[0] if owners else None

    def consumer_events(self, kind: str | None = None) -> list[dict]:
        found = []
        for path in sorted(self.events.glob("consumer-*.jsonl")):
            found += [e for e in read_jsonl(path.read_text(errors="replace"))[0] if kind is None or e["ev"] == kind]
        return found

    def acked_commits_since(self, t: float, partitions: set[int] | None = None) -> int:
        """Commits acknowledged that were sent at ``t`` or later (of one of
        ``partitions``, if given)."""
        return sum(1 for e in self.consumer_events("commit") if e["ok"] and e["t_sent"] >= t
                   and (partitions is None or partitions & {int(p) for p in e["offsets"]}))

    def consumed_since(self, t: float) -> list[int]:
        """The partition of each record consumed (logged at ``t`` or later)."""
        return [p for e in self.consumer_events("records") if e["t"] >= t for p, _ in e["recs"]]

    def produced_since(self, t: float) -> list[int]:
        """The partition of each record whose produce was acknowledged at ``t`` or later."""
        events = read_jsonl((self.events / "producer.jsonl").read_text(errors="replace"))[0]
        return [p for e in events if e["ev"] == "acked" and e["t"] >= t for p, _ in e["recs"]]

    def wait_progress(self, commits: int = 10, what: str = "") -> None:
        """Until ``commits`` more commits were acknowledged (from now)."""
        since = time.time()
        wait_for(lambda: self.acked_commits_since(since) >= commits, LIVENESS_S,
                 f"{commits} commits acknowledged{' ' + what if what else ''}", 0.2)

    # -- the end --------------------------------------------------------------------------------
    def finish(self, history_logs: list[Path] | None = None) -> Verdict:
        """Stop producing, drain, stop the consumers, check (module docstring).
        ``history_logs``: daemon logs for the generation history (default: every
        daemon's of the fleet)."""
        self.producer.stop()
        ends = dict(self.producer.ends)
        drained = True
        try:
            wait_for(lambda: len(quiet(self.monitor.offsets) or {}) == self.partitions
                     and all(o >= ends.get(p, 0) for p, o in (quiet(self.monitor.offsets) or {}).items()),
                     LIVENESS_S * 2, "the group drained what was produced", 0.5)
        except AssertionError as exc:
            drained = str(exc)
        exits = self.pool.stop_all()
        self.monitor.final()
        self.monitor_stopped = True
        self.monitor.stop()
        self.pool.close()
        if history_logs is None:
            history_logs = sorted(self.fleet.log_dir.glob("daemon-*.log"))
        log = load_dir(self.events, self.group, history_logs)
        violations = check_run(log)
        figures = {**summary(log), "produced_sent": self.producer.sent, "produce_failed": self.producer.failed,
                   "worker_exits": exits, "drained": drained, "violations": len(violations)}
        return Verdict(log, violations, figures)


def assert_clean(verdict: Verdict) -> None:
    """The checker found nothing, the group drained, every consumer left
    cleanly, and each check had material."""
    print(verdict)
    assert verdict.violations == [], f"{len(verdict.violations)} violation(s), first: {verdict.violations[0]}"
    assert verdict.figures["drained"] is True, verdict.figures["drained"]
    assert all(code == 0 for code in verdict.figures["worker_exits"].values()), verdict.figures["worker_exits"]
    log = verdict.log
    assert log.produced and log.assignments and log.history and log.samples
    assert any(c.acked for c in log.commits)
