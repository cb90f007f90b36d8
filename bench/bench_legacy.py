"""Legacy consumers vs zkcoord: how a group rebalances.

Runs, on one sandbox (ZooKeeper 3.8, Kafka 3.9 in ZooKeeper mode), the same
group size over the same topic twice:

* **legacy**: Kafka 1.1.1's old high-level consumers
  (``ZookeeperConsumerConnector``, real, via :mod:`zkcoord.local.legacy`),
  which rebalance through ZooKeeper: every member watches
  ``/consumers/<group>/ids`` and re-claims ``owners/<topic>/<p>`` itself;
* **zkcoord**: ``zkcoord.client.Consumer`` members whose coordinator is a
  ``zkcoord run`` daemon (state in ZooKeeper, one owner per group).

Scenarios, repeated ``--rounds`` times on a settled group of ``--members``:
``join`` (one more member starts) and ``die`` (that member gets SIGKILL).
Measured per scenario: the time until the group settles (every live member's
last claim covers all partitions exactly once, nothing changed for
``--quiet-s``; measured to the last claim), ZooKeeper's own counters over
the window (``srvr`` Zxid: transactions; ``mntr``: per-namespace write and
read counts, and watch notifications fired = the sums of
``node_{created,deleted,changed,children}_watch_count``), and whether any
partition was ever held by two members at once (claim/release logs; for
zkcoord also within one generation).

``--zkcoord-disconnect-grace-ms N`` starts the daemon with
``--member-disconnect-grace-ms N`` (opt-in, not Kafka's behaviour: a member
whose connection closes is removed after N ms instead of at its session
timeout); with ``--heartbeat-interval-ms 100`` that is the configuration tuned
for fast settling. The settings each side used are printed first.

``--zkcoord-trace`` makes the zkcoord members log each join's steps (with
wall-clock milliseconds, comparable with their events) to their logs in the
workdir; ``--zkcoord-baseline-client`` runs them without the thin consumer's
rejoin wake-up and overlapped first lookup, to compare the client before and
after those changes on one machine and daemon. Neither changes what is
measured.

Run by hand, never by the tests; prints ratios, never asserts on time.
Everything started is stopped on exit, error, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench_env import Environment, bad_key_values, bench_main
from group_client import BenchError
from zkcoord.local import legacy
from zkcoord.local.sandbox import zk_four_letter

WATCH_KINDS = ("created", "deleted", "changed", "children")
HERE = Path(__file__).resolve().parent


# -- ZooKeeper's counters ---------------------------------------------------------------------

def zk_meter(port: int) -> dict[str, int]:
    """Server-wide totals: txns (Zxid), writes and reads (every namespace),
    watch notifications fired."""
    mntr = zk_four_letter(port, "mntr", timeout_s=5)
    zxid = re.search(r"Zxid: (0x[0-9a-f]+)", zk_four_letter(port, "srvr", timeout_s=5))
    if zxid is None or "zk_version" not in mntr:
        raise BenchError(f"ZooKeeper on port {port} did not answer srvr/mntr")
    total = lambda pattern: sum(int(v) for v in re.findall(pattern, mntr))  # noqa: E731
    return {
        "txns": int(zxid.group(1), 16),
        "writes": total(r"zk_cnt_\S+_write_per_namespace\s+(\d+)"),
        "reads": total(r"zk_cnt_\S+_read_per_namespace\s+(\d+)"),
        "watches": sum(total(rf"zk_sum_node_{kind}_watch_count\s+(\d+)") for kind in WATCH_KINDS),
    }


def delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: b[k] - a[k] for k in a}


# -- member processes -------------------------------------------------------------------------

@dataclass
class Event:
    ts: int
    member: str
    event: str
    data: dict


class MemberProcess:
    """A process printing member events as JSON lines (the legacy driver or
    ``zkcoord_members.py``)."""

    def __init__(self, name: str, cmd: list[str], log: Path, sink: list[Event], lock: threading.Lock):
        self.name, self.cmd, self.log, self.sink, self.lock = name, cmd, log, sink, lock
        self.proc: subprocess.Popen | None = None
        self.killed_at: int | None = None

    def start(self) -> "MemberProcess":
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                raw = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.sink.append(Event(raw.pop("ts"), raw.pop("member"), raw.pop("event"), raw))

    def kill(self) -> int:
        self.killed_at = int(time.time() * 1000)
        self.proc.kill()
        self.proc.wait(10)
        return self.killed_at

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


# -- settling and double claims -----------------------------------------------------------------

def settled_at(events: list[Event], live: set[str], since_ms: int, partitions: int) -> int | None:
    """The last claim's time when every live member's last claim/release is
    a claim made at or after ``since_ms`` and the claims cover every
    partition exactly once (for zkcoord: all of one generation)."""
    last: dict[str, Event] = {}
    for event in events:
        if event.member in live and event.event in ("claim", "release"):
            last[event.member] = event
    if set(last) != live or any(e.event != "claim" or e.ts < since_ms for e in last.values()):
        return None
    if sorted(p for e in last.values() for p in e.data["partitions"]) != list(range(partitions)):
        return None
    if len({e.data.get("generation") for e in last.values()}) != 1:
        return None
    return max(e.ts for e in last.values())


def double_claims(events: list[Event], deaths: dict[str, int]) -> tuple[int, int]:
    """(partition claims that found another member holding the partition,
    partitions claimed by two members in one generation). A killed member
    holds nothing from its kill on."""
    timeline = sorted([(e.ts, 1, e) for e in events if e.event in ("claim", "release")]
                      + [(ts, 0, Event(ts, m, "dead", {})) for m, ts in deaths.items()], key=lambda x: (x[0], x[1]))
    held: dict[str, set[int]] = {}
    overlaps = 0
    for _, _, event in timeline:
        held.pop(event.member, None)
        if event.event == "claim":
            mine = set(event.data["partitions"])
            overlaps += sum(len(mine & other) for other in held.values())
            held[event.member] = mine
    same_generation = 0
    by_generation: dict[int, dict[int, str]] = {}
    for event in events:
        if event.event == "claim" and event.data.get("generation") is not None:
            owners = by_generation.setdefault(event.data["generation"], {})
            for p in event.data["partitions"]:
                if owners.setdefault(p, event.member) != event.member:
                    same_generation += 1
    return overlaps, same_generation


# -- one target: its group, the scenarios --------------------------------------------------------

@dataclass
class Measurement:
    target: str
    scenario: str
    round: int
    settle_ms: float | None
    window_s: float
    zk: dict[str, int] = field(default_factory=dict)


class Target:
    """One side of the comparison: how to start its members."""

    name = ""

    def __init__(self, args, env: Environment, workdir: Path):
        self.args, self.env, self.workdir = args, env, workdir
        self.group = f"bench-{self.name}-{uuid.uuid4().hex[:6]}"
        self.events: list[Event] = []
        self.lock = threading.Lock()
        self.processes: list[MemberProcess] = []

    def snapshot(self) -> list[Event]:
        with self.lock:
            return sorted(self.events, key=lambda e: e.ts)

    def spawn(self, prefix: str, members: int) -> MemberProcess:
        process = MemberProcess(f"{self.name}-{prefix}", self.command(prefix, members),
                                self.workdir / f"{self.name}-{prefix.strip('-')}.log", self.events, self.lock)
        self.processes.append(process.start())
        return process

    def command(self, prefix: str, members: int) -> list[str]:
        raise NotImplementedError

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()


class LegacyTarget(Target):
    name = "legacy"

    def __init__(self, args, env, workdir):
        super().__init__(args, env, workdir)
        self.classpath = legacy.driver_classpath(log=print)
        self.properties = (("zookeeper.session.timeout.ms", str(args.session_timeout_ms)),
                           *(tuple(p.split("=", 1)) for p in args.legacy_property))

    def command(self, prefix, members):
        settings = legacy.LegacySettings(f"127.0.0.1:{self.env.zk_port}", self.group, self.env.topic,
                                         members=members, prefix=prefix, properties=self.properties)
        return legacy.command(settings, self.classpath, (f"-Dzkcoord.bench={self.workdir}",))


class ZkcoordTarget(Target):
    name = "zkcoord"

    def command(self, prefix, members):
        host, port = self.env.daemon_address
        khost, kport = self.env.kafka_address
        return [sys.executable, str(HERE / "zkcoord_members.py"), "--coordinators", f"{host}:{port}",
                "--bootstrap-servers", f"{khost}:{kport}", "--group", self.group, "--topic", self.env.topic,
                "--members", str(members), "--prefix", prefix,
                "--session-timeout-ms", str(self.args.session_timeout_ms),
                "--heartbeat-interval-ms", str(self.args.heartbeat_interval_ms),
                *(["--trace"] if self.args.zkcoord_trace else []),
                *(["--baseline-client"] if self.args.zkcoord_baseline_client else []),
                "--rebalance-notice", self.args.zkcoord_notice]


def wait_settled(target: Target, live: set[str], since_ms: int | None, args, what: str,
                 since_member: str | None = None) -> tuple[float | None, int]:
    """(settle ms after ``since_ms`` or the ``since_member``'s joining
    event, or None on time-out; the start used)."""
    deadline = time.monotonic() + args.settle_timeout_s
    quiet_ms = args.quiet_s * 1000
    while time.monotonic() < deadline:
        events = target.snapshot()
        if since_member is not None:
            joining = [e.ts for e in events if e.member == since_member and e.event == "joining"]
            since_ms = joining[0] if joining else None
        errors = [e for e in events if e.event == "error"]
        if errors:
            raise BenchError(f"{target.name} member {errors[0].member}: {errors[0].data.get('error')}")
        if since_ms is not None:
            at = settled_at(events, live, since_ms, args.partitions)
            changes = [e.ts for e in events if e.event in ("claim", "release")]
            if at is not None and time.time() * 1000 - max(changes) >= quiet_ms:
                return at - since_ms, since_ms
        time.sleep(0.1)
    print(f"  {target.name}: {what}: not settled within {args.settle_timeout_s:g} s", flush=True)
    return None, since_ms or 0


def run_target(target: Target, args) -> tuple[list[Measurement], dict]:
    port = target.env.zk_port
    base = target.spawn("m", args.members)
    live = {f"m{i}" for i in range(1, args.members + 1)}
    started = int(time.time() * 1000)
    initial, _ = wait_settled(target, live, started, args, "initial join")
    if initial is None:
        raise BenchError(f"the {target.name} group of {args.members} did not settle; see {target.workdir}")
    print(f"  {target.name}: {args.members} members settled {initial / 1000:.1f} s after start", flush=True)
    idle_a, idle_t = zk_meter(port), time.monotonic()
    time.sleep(args.idle_s)
    idle = {k: v / (time.monotonic() - idle_t) for k, v in delta(idle_a, zk_meter(port)).items()}
    results, deaths = [], {}
    for rnd in range(1, args.rounds + 1):
        prefix = f"j{rnd}-"
        before, t = zk_meter(port), time.monotonic()
        joiner = target.spawn(prefix, 1)
        settle, _ = wait_settled(target, live | {f"{prefix}1"}, None, args, f"join {rnd}", f"{prefix}1")
        results.append(Measurement(target.name, "join", rnd, settle, time.monotonic() - t,
                                   delta(before, zk_meter(port))))
        print(f"  {target.name}: join {rnd}: {fmt_ms(settle)}; {results[-1].zk}", flush=True)
        before, t = zk_meter(port), time.monotonic()
        killed = joiner.kill()
        deaths[f"{prefix}1"] = killed
        settle, _ = wait_settled(target, live, killed, args, f"die {rnd}")
        results.append(Measurement(target.name, "die", rnd, settle, time.monotonic() - t,
                                   delta(before, zk_meter(port))))
        print(f"  {target.name}: die {rnd}: {fmt_ms(settle)}; {results[-1].zk}", flush=True)
    overlaps, same_generation = double_claims(target.snapshot(), deaths)
    base.stop()
    return results, {"idle_per_s": idle, "overlaps": overlaps, "same_generation": same_generation,
                     "initial_settle_ms": initial}


# -- report ---------------------------------------------------------------------------------

def fmt_ms(value: float | None) -> str:
    return "not settled" if value is None else f"{value:,.0f} ms"


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a, b) -> str:
    if a is None or b is None:
        return "-"
    return "inf" if b == 0 else f"{a / b:.1f}x"


def report(results: list[Measurement], extra: dict[str, dict], args) -> None:
    print("\n== per scenario ==")
    print(f"{'target':8} {'scenario':8} {'round':>5} {'settle ms':>10} {'window s':>8} {'zk txns':>8} "
          f"{'writes':>7} {'reads':>7} {'watches':>8}")
    for m in results:
        settle = "-" if m.settle_ms is None else f"{m.settle_ms:,.0f}"
        print(f"{m.target:8} {m.scenario:8} {m.round:>5} {settle:>10} {m.window_s:>8.1f} {m.zk['txns']:>8} "
              f"{m.zk['writes']:>7} {m.zk['reads']:>7} {m.zk['watches']:>8}")
    print("\n== medians per rebalance ==")
    med: dict[tuple[str, str], dict] = {}
    for target in extra:
        for scenario in ("join", "die"):
            rows = [m for m in results if m.target == target and m.scenario == scenario]
            med[target, scenario] = {"settle_ms": median([m.settle_ms for m in rows]),
                                     **{k: median([m.zk[k] for m in rows]) for k in ("txns", "writes", "reads",
                                                                                     "watches")}}
            med[target, scenario]["ops"] = med[target, scenario]["writes"] + med[target, scenario]["watches"]
            print(f"{target:8} {scenario:5} " + "  ".join(f"{k} {v if v is not None else '-'}"
                                                          for k, v in med[target, scenario].items()))
    for target, info in extra.items():
        idle = ", ".join(f"{k} {v:.2f}/s" for k, v in info["idle_per_s"].items())
        print(f"{target:8} idle background: {idle}; double claims: {info['overlaps']} overlapping, "
              f"{info['same_generation']} within one generation")
    if set(extra) != {"legacy", "zkcoord"}:
        return
    print("\n== ratios legacy / zkcoord (above 1: zkcoord better) ==")
    goals = []
    for scenario in ("join", "die"):
        lg, zc = med["legacy", scenario], med["zkcoord", scenario]
        print(f"{scenario:5} settle {ratio(lg['settle_ms'], zc['settle_ms'])}  "
              + "  ".join(f"{k} {ratio(lg[k], zc[k])}" for k in ("txns", "writes", "reads", "watches", "ops")))
        ops_ok = lg["ops"] is not None and lg["ops"] >= 20 * zc["ops"]
        settle_ok = None not in (lg["settle_ms"], zc["settle_ms"]) and lg["settle_ms"] >= 10 * zc["settle_ms"]
        goals += [(f"{scenario}: >= 20x fewer ZooKeeper writes + watch notifications", ops_ok),
                  (f"{scenario}: >= 10x faster settling", settle_ok)]
    for text, ok in goals:
        print(f"  {'met   ' if ok else 'MISSED'} {text}")
    clean = all(info["overlaps"] == 0 and info["same_generation"] == 0 for info in extra.values())
    print(f"  {'met   ' if clean else 'MISSED'} no partition held by two members at once")


def settings_used(args) -> list[str]:
    """What each side ran with, for the report."""
    legacy_props = ", ".join([f"zookeeper.session.timeout.ms={args.session_timeout_ms}", *args.legacy_property])
    grace = args.zkcoord_disconnect_grace_ms
    return [f"legacy: {legacy_props}; Kafka 1.1.1 defaults otherwise (rebalance.backoff.ms=2000, "
            "rebalance.max.retries=4, range, auto commit off)",
            f"zkcoord: session_timeout_ms={args.session_timeout_ms}, "
            f"heartbeat_interval_ms={args.heartbeat_interval_ms}, range, auto commit off; daemon "
            "--group-initial-rebalance-delay-ms 0, --member-disconnect-grace-ms "
            + (f"{grace} (opt-in: a closed connection ends the member's session)" if grace >= 0
               else "-1 (off, Kafka's behaviour)")
            + ("; BASELINE client (without the rejoin wake-up and the overlapped first lookup)"
               if args.zkcoord_baseline_client else "")
            + ("; rebalance notice on (held heartbeats, daemon --rebalance-notice-hold-ms 5000)"
               if args.zkcoord_notice == "on" else "; rebalance notice off (heartbeats only, as Kafka's consumers)")]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Legacy ZooKeeper consumers vs zkcoord: rebalances.")
    parser.add_argument("--members", type=int, default=10, help="group size before a join (default 10)")
    parser.add_argument("--partitions", type=int, default=100, help="topic partitions (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="join+die rounds per target (default 3)")
    parser.add_argument("--targets", default="legacy,zkcoord", help="legacy,zkcoord (default both)")
    parser.add_argument("--session-timeout-ms", type=int, default=6000,
                        help="both: zookeeper.session.timeout.ms / session_timeout_ms (default 6000)")
    parser.add_argument("--heartbeat-interval-ms", type=int, default=2000, help="zkcoord members (default 2000)")
    parser.add_argument("--zkcoord-disconnect-grace-ms", type=int, default=-1,
                        help="daemon --member-disconnect-grace-ms (default -1: off, Kafka's behaviour)")
    parser.add_argument("--zkcoord-trace", action="store_true",
                        help="zkcoord members log each join's steps to their logs in the workdir")
    parser.add_argument("--zkcoord-baseline-client", action="store_true",
                        help="zkcoord members without the client's two join-latency changes (rejoin wake-up, "
                             "overlapped first lookup), for comparing before and after on one machine")
    parser.add_argument("--zkcoord-notice", choices=["on", "off"], default="on",
                        help="zkcoord members hear of rebalances through the daemon's held heartbeats "
                             "(default on, the consumer's default; off: from heartbeats only)")
    parser.add_argument("--legacy-property", action="append", default=[], metavar="KEY=VALUE",
                        help="extra old-consumer setting, e.g. rebalance.backoff.ms=2000 (repeatable)")
    parser.add_argument("--quiet-s", type=float, default=4.0,
                        help="settled means nothing changed for this long (default 4; above the legacy "
                             "rebalance.backoff.ms of 2 s)")
    parser.add_argument("--settle-timeout-s", type=float, default=120.0)
    parser.add_argument("--idle-s", type=float, default=5.0, help="background ZooKeeper activity window")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a new /tmp/zkcoord-legacy-bench-*")
    parser.add_argument("--json", type=Path, default=None, help="also write every measurement here")
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if not targets or set(targets) - {"legacy", "zkcoord"}:
        parser.error(f"--targets {args.targets!r}: name legacy and/or zkcoord")
    args.targets = targets
    if args.members < 1 or args.partitions < 1 or args.rounds < 1:
        parser.error("--members, --partitions and --rounds must be at least 1")
    if args.zkcoord_disconnect_grace_ms < -1:
        parser.error("--zkcoord-disconnect-grace-ms must be -1 (off) or at least 0")
    if args.session_timeout_ms < 1000 or not 0 < args.heartbeat_interval_ms < args.session_timeout_ms:
        parser.error("--session-timeout-ms must be >= 1000 and --heartbeat-interval-ms between 1 and it")
    if bad_key_values(args.legacy_property) is not None:
        parser.error(f"--legacy-property {bad_key_values(args.legacy_property)!r}: expected KEY=VALUE")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    daemon_args = ("--member-disconnect-grace-ms", str(args.zkcoord_disconnect_grace_ms))
    envs: list[Environment] = []
    targets: list[Target] = []

    def stop() -> None:
        for target in targets:
            target.stop()
        for env in envs:
            env.stop()

    def run(workdir: Path) -> int:
        env = Environment(workdir, topic="bench-legacy", topic_partitions=args.partitions,
                          daemon_args=daemon_args if args.zkcoord_disconnect_grace_ms >= 0 else ())
        envs.append(env)
        results: list[Measurement] = []
        extra: dict[str, dict] = {}
        env.start()
        print(f"group of {args.members} (+1 joining) over {args.partitions} partitions, {args.rounds} rounds; "
              f"session {args.session_timeout_ms} ms; workdir {workdir}", flush=True)
        for line in settings_used(args):
            print(f"  {line}", flush=True)
        for name in args.targets:
            target = (LegacyTarget if name == "legacy" else ZkcoordTarget)(args, env, workdir)
            targets.append(target)
            found, extra[name] = run_target(target, args)
            results += found
            target.stop()
        report(results, extra, args)
        if args.json:
            args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                             "results": [asdict(m) for m in results], "extra": extra}, indent=1))
        return 0

    return bench_main(args.workdir, "zkcoord-legacy-bench-", run, stop)


if __name__ == "__main__":
    sys.exit(main())
