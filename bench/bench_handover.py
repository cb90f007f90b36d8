"""Moving a running group off legacy ZooKeeper consumers, member by member:
what each replaced member costs (issue 26).

A group of ``--members`` (3) legacy consumers (Kafka 1.1.1's
``ZookeeperConsumerConnector``, real, one JVM: :mod:`zkcoord.local.legacy`)
consumes ``--topics`` (2) topics of ``--partitions`` (6) partitions each
while a producer writes ``--rate`` records/s to them. They are replaced by
as many modern consumers with the same group id, of ``--modern-client``:
``librdkafka`` (the default: ``confluent_kafka.Consumer``,
:class:`tests.support.rdkafka_members.RdkafkaMember`), a stock consumer, or
``zkcoord`` (zkcoord's own consumer, ``zkcoord.client.Consumer``,
:class:`tests.support.zkcoord_client_members.ZkcoordClientMember`: its
coordinator is the daemon, which it asks as ``zkcoord consume`` does, and it
fetches from the broker; it hears of a rebalance through the daemon's
rebalance notice). Three ways, each on topics and a group of its own:

* ``stop`` (a): Kafka's documented procedure: stop every legacy consumer,
  move the offsets (``zkcoord migrate apply``: ZooKeeper's offsets into
  Kafka's ``__consumer_offsets``), start the modern consumers against the
  broker. One step for all the members.
* ``rolling`` (b): an unmanaged rolling move: offsets copied once
  (``zkcoord migrate apply``, while the legacy consumers run), then per
  member: a modern consumer starts against the broker beside the legacy ones,
  a legacy consumer stops. The two kinds do not see each other.
* ``managed`` (c): the same steps, the modern consumers coordinated by a
  zkcoord daemon (the daemon in the brokers' ZooKeeper root, where the legacy
  group lives): librdkafka ones bootstrapping from its gateway, zkcoord's
  own with the daemon as their coordinator. Whatever handover the daemon
  does is what is measured.

In (a) and (b) zkcoord's consumer has the broker as its coordinator (it is
then kafka-python's consumer against Kafka's group coordinator).

Before them, the ``yardstick``: one legacy rebalance of the same group, a
member leaving cleanly (``--yardstick-rounds`` times, from a group of
``--members`` + rounds down to ``--members``).

Per step, from the members' own callbacks and events (a legacy member's
claim after its owner znodes were written, its release before they go; a
modern member's assign and revoke callbacks; one machine's wall clock):
partition-seconds in which no member owned a partition, the longest such
gap, partition-seconds owned by two members at once; from the record logs
(:mod:`zkcoord.local.record_log`; every member writes one): records handed
over more than once (each extra delivery counted in the step whose window
it fell in), to two members, and records nobody got. A step's window runs
from its first action until the group settled: every partition owned, the
newcomers assigned, nothing changed for ``--quiet-s``; its figures count
until the next step begins (the last step's: until that wait ended), so
the ``--quiet-s`` in which a rolling move's newcomer consumes beside the
legacy members is in them.
Per scenario, its unowned time split by hand-off (:func:`unowned_by_handoff`:
a legacy member's partition to a legacy one, to a modern one, between modern
ones), which tells the legacy consumers' own rebalances from the wait for
the modern members.

Run by hand, never by the tests; prints tables and ratios, never asserts on
time. Everything it starts is stopped on exit, error, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

# This checkout's code, in this process and in the ones it starts (zkcoord local, run, migrate).
REPOSITORY = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(Path(__file__).resolve().parent), str(REPOSITORY)]
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))

from bench_env import Environment, bad_key_values, bench_main, create_topics, zkcoord_cli  # noqa: E402  (after the path tweak)
from group_client import BenchError  # noqa: E402

from tests.support.ownership import AssignmentChange, coverage, current_owners, ownerships  # noqa: E402
from tests.support.rdkafka_members import RdkafkaMember  # noqa: E402
from tests.support.zkcoord_client_members import ZkcoordClientMember, member_config  # noqa: E402
from zkcoord.errors import ConfigError  # noqa: E402
from zkcoord.local import legacy  # noqa: E402
from zkcoord.local.record_log import Delivery, RecordLogWriter, check_deliveries, read_record_logs  # noqa: E402

SCENARIOS = {
    "stop": "(a) stop-the-world: stop every legacy consumer, zkcoord migrate apply, start the modern ones",
    "rolling": "(b) unmanaged rolling move: modern consumers on the broker beside the legacy ones",
    "managed": "(c) managed by zkcoord: modern consumers coordinated by the daemon",
}
MODERN_CLIENTS = {
    "librdkafka": "librdkafka (confluent-kafka), a stock consumer; in (c) through the daemon's gateway",
    "zkcoord": "zkcoord's consumer (zkcoord.client), in (c) with the daemon as its coordinator",
}
TopicPartition = tuple[str, int]
HANDOFFS = ("legacy -> legacy", "legacy -> modern", "modern -> modern", "modern -> legacy")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


# -- the producer -------------------------------------------------------------------------------

class Producer:
    """``rate`` records/s round-robin over ``partitions`` (librdkafka, acks=all), in a thread;
    ``produced()``: per partition the offsets acknowledged, as ``range(0, end)`` (fresh topics)."""

    def __init__(self, bootstrap: str, partitions: list[TopicPartition], rate: int):
        self.bootstrap, self.partitions, self.rate = bootstrap, partitions, rate
        self.ends: dict[TopicPartition, int] = {}
        self.acked = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self._left = 0
        self.sent = 0

    def start(self) -> "Producer":
        self._thread.start()
        return self

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.failures.append(str(error))
            return
        tp = (message.topic(), message.partition())
        self.ends[tp] = max(self.ends.get(tp, 0), message.offset() + 1)
        self.acked += 1

    def _run(self) -> None:
        from confluent_kafka import Producer as RdProducer

        producer = RdProducer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5}, logger=None)
        sent, started = 0, time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while sent < due:
                topic, partition = self.partitions[sent % len(self.partitions)]
                producer.produce(topic, value=b"r%d" % sent, partition=partition, on_delivery=self._delivered)
                sent += 1
            producer.poll(0.01)
        self._left = producer.flush(30)
        self.sent = sent

    def stop(self) -> dict[TopicPartition, range]:
        self._stop.set()
        self._thread.join(60)
        if self.failures or self._left or self.acked != self.sent:
            raise BenchError(f"the producer: {self.acked} of {self.sent} records acknowledged, "
                             f"{self._left} unsent, failures: {self.failures[:3]}")
        return self.produced()

    def halt(self) -> None:
        """Stop producing, whatever was acknowledged (on an error)."""
        self._stop.set()

    def produced(self) -> dict[TopicPartition, range]:
        return {tp: range(0, end) for tp, end in self.ends.items()}


# -- one scenario's group ----------------------------------------------------------------------

@dataclass
class Step:
    label: str
    replaced: int  # legacy members this step replaces
    start_ms: int
    end_ms: int | None = None  # the last change once settled (or when it gave up)
    window_end_ms: int | None = None  # the next step's start; the last step's: when its wait ended
    settled: bool = True  # every wait of the step ended settled
    marks: list[tuple[str, int]] = field(default_factory=list)  # (what, ms since start)
    unowned_ps: float = 0.0
    longest_gap_s: float = 0.0
    shared_ps: float = 0.0
    extra_deliveries: int = 0
    to_two_members: int = 0


class Scene:
    """One group on topics of its own: its legacy JVM, its modern members,
    their events and record logs, the producer, the steps measured."""

    def __init__(self, name: str, args, env: Environment, workdir: Path, classpath: str):
        tag = uuid.uuid4().hex[:6]
        self.name, self.args, self.env, self.classpath = name, args, env, classpath
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.topics = [f"ho-{name}-{chr(ord('a') + i)}-{tag}" for i in range(args.topics)]
        self.group = f"bench-ho-{name}-{tag}"
        self.partitions = [(t, p) for t in self.topics for p in range(args.partitions)]
        self.legacy: legacy.LegacyGroup | None = None
        self.modern: dict[str, RdkafkaMember] = {}  # or ZkcoordClientMember s, which report alike
        self.modern_log = RecordLogWriter(self.dir / "modern.records")
        self.producer: Producer | None = None
        self.steps: list[Step] = []
        self.notes: list[str] = []
        self.check = None
        self.outside = 0  # extra deliveries in no step's window
        self.handoffs: dict[str, float] = {}  # unowned partition-s by hand-off (unowned_by_handoff)

    @property
    def broker(self) -> str:
        return "%s:%d" % self.env.kafka_address

    @property
    def zookeeper(self) -> str:
        return f"127.0.0.1:{self.env.zk_port}"

    def start_legacy(self, members: int) -> None:
        create_topics(self.broker, self.topics, self.args.partitions)
        properties = (("zookeeper.session.timeout.ms", str(self.args.session_timeout_ms)),
                      ("auto.commit.enable", "true"), ("auto.commit.interval.ms", "1000"),
                      *(tuple(p.split("=", 1)) for p in self.args.legacy_property))
        settings = legacy.LegacySettings(self.zookeeper, self.group, self.topics[0], members=members,
                                         topics=tuple(self.topics[1:]), properties=properties,
                                         record_log=self.dir / "legacy.records")
        self.legacy = legacy.LegacyGroup(settings, self.classpath, self.dir / "legacy.log",
                                         jvm_args=(f"-Dzkcoord.bench={self.dir}",)).start()
        started = wall_ms()
        names = settings.member_names()
        if self.wait_settled(started, names) is None:
            raise BenchError(f"{self.name}: the {members} legacy consumers did not settle within "
                             f"{self.args.settle_timeout_s:g} s; see {self.dir / 'legacy.log'}")
        print(f"  {self.name}: {members} legacy consumers settled {(wall_ms() - started) / 1000:.1f} s after start "
              f"(group {self.group}, topics {', '.join(self.topics)})", flush=True)
        self.producer = Producer(self.broker, self.partitions, self.args.rate).start()
        time.sleep(self.args.warmup_s)

    def start_modern(self, name: str, managed: bool) -> RdkafkaMember:
        """A modern member of ``--modern-client``, coordinated by the daemon
        (``managed``) or by the broker."""
        settings = dict(p.split("=", 1) for p in self.args.modern_property)
        if self.args.modern_client == "zkcoord":
            coordinators = "%s:%d" % self.env.daemon_address if managed else self.broker
            member = ZkcoordClientMember(name, coordinators, self.broker, self.topics, self.group, settings,
                                         record_log=self.modern_log, clock=wall_ms)
        else:
            bootstrap = "%s:%d" % self.env.gateway_address if managed else self.broker
            member = RdkafkaMember(name, bootstrap, self.topics, self.group, settings, record_log=self.modern_log,
                                   clock=wall_ms)
        self.modern[name] = member.start()
        return member

    def changes(self) -> list[AssignmentChange]:
        found = []
        if self.legacy is not None:
            for event in self.legacy.events():
                if event.event in ("claim", "release"):
                    found.append(AssignmentChange(event.member, "assigned" if event.event == "claim" else "revoked",
                                                  event.ts_ms, event.topic_partitions()))
        for member in self.modern.values():
            found += member.changes()
        return sorted(found, key=lambda c: c.ts_ms)

    def wait_settled(self, since_ms: int, newcomers=()) -> int | None:
        """The last change's time once every partition is owned, each of
        ``newcomers`` was assigned and nothing changed for ``--quiet-s``;
        None on time-out (noted)."""
        deadline = time.monotonic() + self.args.settle_timeout_s
        while time.monotonic() < deadline:
            if self.legacy is not None:
                errors = [e for e in self.legacy.events() if e.event == "error"]
                if errors:
                    raise BenchError(f"{self.name}: legacy member {errors[0].member}: {errors[0].data.get('error')}")
                if not self.legacy.alive() and self.legacy.proc.returncode not in (0, 143, -15):
                    raise BenchError(f"{self.name}: the legacy JVM exited ({self.legacy.proc.returncode}); "
                                     f"see {self.dir / 'legacy.log'}")
            changes = self.changes()
            owners = current_owners(changes)
            assigned = {c.member for c in changes if c.kind == "assigned" and c.ts_ms >= since_ms}
            last = max([since_ms, *(c.ts_ms for c in changes)])
            if (all(owners.get(tp) for tp in self.partitions) and set(newcomers) <= assigned
                    and wall_ms() - last >= self.args.quiet_s * 1000):
                return last
            time.sleep(0.1)
        self.notes.append(f"not settled within {self.args.settle_timeout_s:g} s after "
                          f"{self.steps[-1].label if self.steps else 'start'}")
        print(f"  {self.name}: {self.notes[-1]}", flush=True)
        return None

    # -- steps
    def begin(self, label: str, replaced: int) -> Step:
        step = Step(label, replaced, wall_ms())
        if self.steps:
            self.steps[-1].window_end_ms = step.start_ms
        self.steps.append(step)
        return step

    def mark(self, step: Step, what: str) -> None:
        step.marks.append((what, wall_ms() - step.start_ms))

    def settle(self, step: Step, newcomers=()) -> None:
        at = self.wait_settled(step.start_ms, newcomers)
        step.settled, step.end_ms = step.settled and at is not None, at if at is not None else wall_ms()
        step.window_end_ms = wall_ms()
        print(f"  {self.name}: {step.label}: {'settled' if at is not None else 'NOT settled'} "
              f"{(step.end_ms - step.start_ms) / 1000:.1f} s after the step began", flush=True)

    def migrate(self, step: Step | None) -> None:
        """``zkcoord migrate apply``: ZooKeeper's offsets of the group into Kafka."""
        out = zkcoord_cli("migrate", "apply", "--group", self.group, "--zookeeper", self.zookeeper,
                          "--bootstrap-servers", self.broker, "--output", "json")
        results = json.loads(out)["groups"]
        outcome = [(r["outcome"], r.get("message")) for r in results]
        if [o for o, _ in outcome] != ["applied"]:
            raise BenchError(f"{self.name}: zkcoord migrate apply --group {self.group}: {outcome}")
        if step is not None:
            self.mark(step, "offsets moved")

    # -- the end
    def drain(self) -> dict[TopicPartition, range]:
        """Stop the producer, wait until every record it wrote was handed to
        someone (or ``--drain-timeout-s``), return what it wrote."""
        produced = self.producer.stop()
        deadline = time.monotonic() + self.args.drain_timeout_s
        while time.monotonic() < deadline:
            if not check_deliveries(self.deliveries(), produced).missed:
                break
            time.sleep(0.2)
        return produced

    def deliveries(self) -> list[Delivery]:
        self.modern_log.flush()
        return read_record_logs([self.dir / "legacy.records", self.dir / "modern.records"])

    def close(self) -> None:
        if self.producer is not None:
            self.producer.halt()
        closers = [threading.Thread(target=m.close, daemon=True) for m in self.modern.values()]
        for closer in closers:
            closer.start()
        for closer in closers:
            closer.join(70)
        if self.legacy is not None:
            self.legacy.stop()
        self.modern_log.close()

    def analyse(self, produced: dict[TopicPartition, range]) -> None:
        changes = self.changes()
        with open(self.dir / "ownership.jsonl", "w") as out:  # for reading a run's timeline afterwards
            for c in changes:
                out.write(json.dumps({"ts": c.ts_ms, "member": c.member, "kind": c.kind,
                                      "partitions": sorted(c.partitions)}) + "\n")
        for step in self.steps:
            cover = coverage(changes, self.partitions, step.start_ms, step.window_end_ms).values()
            step.unowned_ps = sum(c.unowned for c in cover) / 1000
            step.longest_gap_s = max((c.longest_gap for c in cover), default=0) / 1000
            step.shared_ps = sum(c.shared for c in cover) / 1000
        if self.steps:
            self.handoffs = unowned_by_handoff(changes, self.partitions, self.steps[0].start_ms,
                                               self.steps[-1].window_end_ms)
        self.check = check_deliveries(self.deliveries(), produced)
        for deliveries in self.check.duplicates.values():
            first = deliveries[0]
            for again in deliveries[1:]:
                step = next((s for s in self.steps if s.start_ms <= again.ts_ms < s.window_end_ms), None)
                if step is None:
                    self.outside += 1
                    continue
                step.extra_deliveries += 1
                step.to_two_members += again.member != first.member
        errors = sorted({e for m in self.modern.values() for e in m.errors() if not e.startswith("commit:")})
        self.notes += [f"modern member error: {e}" for e in errors[:5]]


def unowned_by_handoff(changes: list[AssignmentChange], partitions: list[TopicPartition], start: int,
                       end: int) -> dict[str, float]:
    """The unowned partition-seconds of ``[start, end)`` by hand-off: each
    stretch in which a partition had no owner, under "<kind of the member
    that let it go> -> <kind of the next owner>" (``legacy`` members are
    named m1.., ``modern`` ones n1..; ``nobody`` before a first owner or
    after the last). Sums to :func:`coverage`'s unowned time over the window."""
    kind = {"m": "legacy", "n": "modern"}
    spans: dict[TopicPartition, list] = {}
    for span in ownerships(changes):
        spans.setdefault(span.partition, []).append(span)
    found: dict[str, float] = {}

    def add(before: str | None, after: str | None, a: int, b: int) -> None:
        a, b = max(a, start), min(b, end)
        if b > a:
            key = f"{kind.get((before or ' ')[0], 'nobody')} -> {kind.get((after or ' ')[0], 'nobody')}"
            found[key] = found.get(key, 0.0) + (b - a) / 1000

    for tp in partitions:
        covered_to, last = float("-inf"), None  # the end of the ownership so far, who held it last
        for span in sorted(spans.get(tp, []), key=lambda s: s.start_ms):
            add(last, span.member, covered_to, span.start_ms)
            span_end = end if span.end_ms is None else span.end_ms
            if span_end >= covered_to:
                covered_to, last = span_end, span.member
        add(last, None, covered_to, end)
    return found


# -- the scenarios ------------------------------------------------------------------------------

def yardstick(scene: Scene, args) -> None:
    """One legacy rebalance of the group: a member of N + 1 leaves cleanly."""
    scene.start_legacy(args.members + args.yardstick_rounds)
    for r in range(args.yardstick_rounds):
        member = f"m{args.members + args.yardstick_rounds - r}"
        step = scene.begin(f"legacy {member} leaves", 0)
        scene.legacy.stop_member(member)
        scene.settle(step)


def stop_the_world(scene: Scene, args) -> None:
    scene.start_legacy(args.members)
    step = scene.begin(f"all {args.members} at once", args.members)
    scene.legacy.stop()  # SIGTERM: every connector commits (auto-commit) and leaves
    scene.mark(step, "legacy stopped")
    scene.migrate(step)
    names = [f"n{i}" for i in range(1, args.members + 1)]
    for name in names:
        scene.start_modern(name, managed=False)
    scene.settle(step, names)


def rolling(scene: Scene, args, managed: bool) -> None:
    scene.start_legacy(args.members)
    if not managed:
        scene.migrate(None)  # once, while the legacy consumers run: the modern ones start near their position
    for i in range(1, args.members + 1):
        step = scene.begin(f"n{i} in, m{i} out", 1)
        scene.start_modern(f"n{i}", managed)
        scene.settle(step, [f"n{i}"])
        scene.mark(step, f"n{i} settled")
        scene.legacy.stop_member(f"m{i}")
        scene.mark(step, f"m{i} stopped")
        scene.settle(step)


def run_scene(name: str, args, env: Environment, workdir: Path, classpath: str, body) -> Scene:
    print(f"\n{name}: {SCENARIOS.get(name, 'one legacy rebalance (the yardstick)')}", flush=True)
    scene = Scene(name, args, env, workdir, classpath)
    try:
        body(scene)
        produced = scene.drain()
        scene.analyse(produced)
    finally:
        scene.close()
    return scene


# -- report -------------------------------------------------------------------------------------

def divisor(scene: Scene) -> int:
    """The members a scenario replaced (the yardstick: its rebalances)."""
    return sum(s.replaced for s in scene.steps) or len(scene.steps) or 1


def per_member(scene: Scene) -> dict[str, float]:
    """The scenario's figures per replaced member (the yardstick: per rebalance)."""
    steps, count = scene.steps, divisor(scene)
    return {"unowned_ps": sum(s.unowned_ps for s in steps) / count,
            "longest_gap_s": max((s.longest_gap_s for s in steps), default=0.0),
            "shared_ps": sum(s.shared_ps for s in steps) / count,
            "extra_deliveries": sum(s.extra_deliveries for s in steps) / count,
            "to_two_members": sum(s.to_two_members for s in steps) / count,
            "settle_s": sum((s.end_ms - s.start_ms) for s in steps) / 1000 / count}


def print_scene(scene: Scene) -> None:
    print(f"\n== {scene.name}: {SCENARIOS.get(scene.name, 'one legacy rebalance per step: a legacy member leaves cleanly')} ==")
    print(f"{'step':24} {'replaced':>8} {'settle s':>8} {'window s':>8} {'unowned p-s':>11} {'longest gap s':>13} "
          f"{'two owners p-s':>14} {'extra deliveries':>16} {'to two members':>14}")
    for s in scene.steps:
        settle = f"{(s.end_ms - s.start_ms) / 1000:.1f}" + ("" if s.settled else "!")
        print(f"{s.label:24} {s.replaced:>8} {settle:>8} {(s.window_end_ms - s.start_ms) / 1000:>8.1f} "
              f"{s.unowned_ps:>11.2f} {s.longest_gap_s:>13.2f} "
              f"{s.shared_ps:>14.2f} {s.extra_deliveries:>16,} {s.to_two_members:>14,}")
        if s.marks:
            print("    " + ", ".join(f"{what} +{ms / 1000:.1f} s" for what, ms in s.marks))
    pm = per_member(scene)
    unit = "per rebalance" if scene.name == "yardstick" else "per replaced member"
    print(f"{unit:24} {'':>8} {pm['settle_s']:>8.1f} {'':>8} {pm['unowned_ps']:>11.2f} {pm['longest_gap_s']:>13.2f} "
          f"{pm['shared_ps']:>14.2f} {pm['extra_deliveries']:>16,.1f} {pm['to_two_members']:>14,.1f}")
    produced = sum(len(r) for r in scene.producer.produced().values()) if scene.producer else 0
    shown = [k for k in HANDOFFS if k in scene.handoffs] + sorted(set(scene.handoffs) - set(HANDOFFS))
    print(f"unowned partition-s {unit} by hand-off (who let go -> the next owner): "
          + ("; ".join(f"{k} {scene.handoffs[k] / divisor(scene):.2f}" for k in shown) or "none"))
    print(f"records: {produced:,} produced; {scene.check.summary()}; "
          f"{scene.outside:,} extra deliveries outside the steps' windows")
    for note in scene.notes:
        print(f"  note: {note}")


def ratio(a: float, b: float) -> str:
    if b == 0:
        return "-" if a == 0 else "inf"
    return f"{a / b:.2f}"


def report(scenes: dict[str, Scene], args) -> dict:
    for scene in scenes.values():
        print_scene(scene)
    figures = {name: per_member(scene) for name, scene in scenes.items()}
    rows = [("unowned partition-s", "unowned_ps", "{:.2f}"), ("longest gap s", "longest_gap_s", "{:.2f}"),
            ("two-owner partition-s", "shared_ps", "{:.2f}"), ("extra deliveries", "extra_deliveries", "{:,.1f}"),
            ("to two members", "to_two_members", "{:,.1f}"), ("settle s", "settle_s", "{:.1f}")]
    shown = [n for n in ("yardstick", "stop", "rolling", "managed") if n in figures]
    print("\n== per replaced member (yardstick: per legacy rebalance) ==")
    print(f"{'figure':22}" + "".join(f"{n:>11}" for n in shown)
          + ("" if "managed" not in figures else
             "".join(f"{'managed/' + n:>17}" for n in ("stop", "rolling") if n in figures)))
    for label, key, fmt in rows:
        line = f"{label:22}" + "".join(f"{fmt.format(figures[n][key]):>11}" for n in shown)
        if "managed" in figures:
            line += "".join(f"{ratio(figures['managed'][key], figures[n][key]):>17}"
                            for n in ("stop", "rolling") if n in figures)
        print(line)
    if "yardstick" in figures:
        yard = figures["yardstick"]
        rounds = len(scenes["yardstick"].steps)
        print(f"\nyardstick: one legacy rebalance (a member leaves a group of {args.members + 1}"
              f"{'' if rounds == 1 else f' to {args.members + rounds}'} cleanly; mean of {rounds}): "
              f"{yard['settle_s']:.2f} s, {yard['unowned_ps']:.2f} unowned "
              f"partition-s, longest gap {yard['longest_gap_s']:.2f} s")
    goals = {}
    if "managed" in figures:
        managed = figures["managed"]
        extra = sum(s.extra_deliveries for s in scenes["managed"].steps)
        goals["zero double deliveries"] = extra == 0 and scenes["managed"].check.extra_deliveries == 0
        print(f"\ngoals of (c) managed, modern client {args.modern_client}"
              f"{' (' + ', '.join(args.modern_property) + ')' if args.modern_property else ''}:")
        print(f"  zero double deliveries without a kill: {'met' if goals['zero double deliveries'] else 'MISSED'} "
              f"({scenes['managed'].check.extra_deliveries:,} extra deliveries in the run)")
        if "yardstick" in figures:
            yard = figures["yardstick"]
            less = managed["unowned_ps"] < yard["unowned_ps"]
            judged = managed["shared_ps"] == 0
            goals["less unowned time than one legacy rebalance"] = less and judged
            verdict = ("met" if less else "MISSED") if judged else (
                f"MISSED (not a handover: partitions had two owners, {managed['shared_ps']:.2f} partition-s per "
                "replaced member, so nothing was ever waited for)")
            print(f"  less unowned time per replaced member than one legacy rebalance takes: {verdict}; "
                  f"{managed['unowned_ps']:.2f} vs {yard['unowned_ps']:.2f} partition-s, longest gap "
                  f"{managed['longest_gap_s']:.2f} s vs the rebalance's {yard['settle_s']:.2f} s")
        missed = scenes["managed"].check.missed_count
        print(f"  no record missed: {'met' if not missed else f'MISSED ({missed:,})'}")
    return {"figures": figures, "goals": goals}


# -- main ---------------------------------------------------------------------------------------

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Replacing legacy ZooKeeper consumers one by one: unowned "
                                                 "partition-seconds and double deliveries per replaced member.")
    parser.add_argument("--scenarios", default="stop,rolling,managed",
                        help="comma-separated, run in this order: stop (a), rolling (b), managed (c) "
                             "(default all three)")
    parser.add_argument("--no-yardstick", action="store_true", help="skip the legacy rebalance yardstick")
    parser.add_argument("--yardstick-rounds", type=int, default=3,
                        help="legacy members that leave one by one in the yardstick, each a rebalance measured (default 3)")
    parser.add_argument("--members", type=int, default=3, help="legacy consumers replaced (default 3)")
    parser.add_argument("--topics", type=int, default=2, help="topics the group consumes (default 2)")
    parser.add_argument("--partitions", type=int, default=6, help="partitions per topic (default 6)")
    parser.add_argument("--rate", type=int, default=200, help="records/s the producer writes in all (default 200)")
    parser.add_argument("--warmup-s", type=float, default=3.0,
                        help="producing before the first step (default 3)")
    parser.add_argument("--quiet-s", type=float, default=4.0,
                        help="settled means nothing changed for this long (default 4; above the legacy "
                             "rebalance.backoff.ms of 2 s)")
    parser.add_argument("--settle-timeout-s", type=float, default=90.0)
    parser.add_argument("--drain-timeout-s", type=float, default=60.0,
                        help="after the producer stops, how long to wait for every record to be handed over")
    parser.add_argument("--session-timeout-ms", type=int, default=6000,
                        help="legacy zookeeper.session.timeout.ms (default 6000, Kafka's)")
    parser.add_argument("--legacy-property", action="append", default=[], metavar="KEY=VALUE",
                        help="extra legacy consumer setting, e.g. rebalance.backoff.ms=500 (repeatable)")
    parser.add_argument("--modern-client", default="librdkafka", metavar="librdkafka|zkcoord",
                        help="the modern consumers: librdkafka (default; a stock consumer, in (c) through the "
                             "daemon's gateway) or zkcoord (zkcoord's own consumer, in (c) with the daemon as its "
                             "coordinator, hearing of rebalances through its rebalance notice)")
    parser.add_argument("--modern-property", action="append", default=[], metavar="KEY=VALUE",
                        help="extra modern consumer setting (repeatable): librdkafka's, e.g. "
                             "heartbeat.interval.ms=1000; for zkcoord's consumer a ConsumerConfig field or "
                             "Kafka's name of it, e.g. heartbeat_interval_ms=1000, rebalance_notice=false")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a new /tmp/zkcoord-handover-bench-*")
    parser.add_argument("--json", type=Path, default=None, help="also write every step and figure here")
    args = parser.parse_args(argv)
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if not scenarios or unknown or len(set(scenarios)) != len(scenarios):
        parser.error(f"--scenarios {args.scenarios!r}: name each of stop, rolling, managed at most once")
    args.scenarios = scenarios
    for name in ("members", "topics", "partitions", "rate", "yardstick_rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1")
    for name in ("warmup_s", "quiet_s", "settle_timeout_s", "drain_timeout_s"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: must not be negative")
    if args.session_timeout_ms < 1000:
        parser.error(f"--session-timeout-ms {args.session_timeout_ms}: must be at least 1000")
    for flag, values in (("--legacy-property", args.legacy_property), ("--modern-property", args.modern_property)):
        if bad_key_values(values) is not None:
            parser.error(f"{flag} {bad_key_values(values)!r}: expected KEY=VALUE")
    if args.modern_client not in MODERN_CLIENTS:
        parser.error(f"--modern-client {args.modern_client!r}: unknown client; choose one of "
                     f"{', '.join(MODERN_CLIENTS)}")
    if args.modern_client == "zkcoord":
        try:  # bad settings now, not in a member's thread minutes later
            member_config("n1", "127.0.0.1:1", "127.0.0.1:1", "bench",
                          dict(p.split("=", 1) for p in args.modern_property))
        except (ValueError, ConfigError) as exc:
            parser.error(f"--modern-property: {exc}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    env: list[Environment] = []  # once the working directory exists
    return bench_main(args.workdir, "zkcoord-handover-bench-", lambda workdir: run(args, workdir, env),
                      lambda: env and env[0].stop())


def run(args, workdir: Path, started: list[Environment]) -> int:
    # The daemon shares the brokers' ZooKeeper root: the legacy groups live there.
    env = Environment(workdir, topic=None, topic_partitions=0,
                      gateway="managed" in args.scenarios and args.modern_client == "librdkafka", broker_chroot=True)
    started.append(env)
    classpath = legacy.driver_classpath(log=print)
    env.start()
    print(f"{args.members} legacy consumers -> {args.members} modern ones ({MODERN_CLIENTS[args.modern_client]}"
          f"{'; ' + ', '.join(args.modern_property) if args.modern_property else ''}); {args.topics} topics x "
          f"{args.partitions} partitions; {args.rate} records/s; workdir {workdir}; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    bodies = {"yardstick": yardstick, "stop": stop_the_world,
              "rolling": lambda s, a: rolling(s, a, managed=False),
              "managed": lambda s, a: rolling(s, a, managed=True)}
    scenes: dict[str, Scene] = {}
    for name in ([] if args.no_yardstick else ["yardstick"]) + args.scenarios:
        scenes[name] = run_scene(name, args, env, workdir, classpath, lambda s, n=name: bodies[n](s, args))
    summary = report(scenes, args)
    print(f"load average at the end {os.getloadavg()[0]:.1f}; logs and record logs in {workdir}")
    if args.json:
        args.json.write_text(json.dumps({
            "args": {k: str(v) for k, v in vars(args).items()}, **summary,
            "scenarios": {n: {"group": s.group, "topics": s.topics, "steps": [asdict(st) for st in s.steps],
                              "unowned_by_handoff_ps": s.handoffs,
                              "check": s.check.summary() if s.check else None, "notes": s.notes}
                          for n, s in scenes.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
