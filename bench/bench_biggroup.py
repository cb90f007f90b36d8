"""The largest group (issue 27, item 5): one classic group of ``--members``
(1,000) over ``--topics`` x ``--partitions`` (100 x 1,000 = 100,000)
partitions, through join, sync, commits of every partition and a fail-over,
with another group's heartbeats measured throughout.

Run by hand, never by the test suite; it prints tables and never asserts on
time (``bench/README.md``)::

    .venv/bin/python bench/bench_biggroup.py                                  # range, ~5 minutes
    .venv/bin/python bench/bench_biggroup.py --assignor cooperative-sticky --shuffled
    .venv/bin/python bench/bench_biggroup.py --protocol consumer               # KIP-848, the daemon assigns
    .venv/bin/python bench/bench_biggroup.py --zookeeper 127.0.0.1:2181       # a ZooKeeper you run
    .venv/bin/python bench/bench_biggroup.py --members 50 --topics 20 --partitions 1000 --skip failover

What it starts (and stops at the end, on errors and on Ctrl-C), in a working
directory of its own (``--workdir``, default a new ``/tmp/zkcoord-bench-biggroup-*``):

1. A sandbox (``zkcoord local up``) unless ``--zookeeper`` names one.
2. A ZooKeeper chroot ``/zkcoord-biggroup-<pid>`` holding Kafka's topic
   registrations (``/brokers/topics/<topic>``, as a ZooKeeper-mode
   controller writes them) for the group's topics: the daemons learn the
   topics there, as they do beside ZooKeeper-mode brokers, and check every
   committed partition against them. No broker holds these partitions: the
   group's state does not depend on where partitions live, and one broker of
   this machine cannot hold 100,000 (``bench/RESULTS.md``).
3. ``--daemons`` (2) ``zkcoord run`` daemons in the chroot (Kafka's default
   3 s initial rebalance delay, so the first generation takes every member).
4. Two probe processes (``biggroup_members.py``), each one member of a group
   of its own heartbeating every ``--probe-interval-ms`` (10): ``probe-same``
   on the big group's owner, ``probe-other`` on another daemon (the one
   that takes the group over). Their latencies are reported per phase.

Phases (``--skip`` leaves some out):

* ``join``: every member connects to the coordinator and joins (JoinGroup,
  the member id round trip, JoinGroup again); the leader decodes every
  subscription and assigns (``--assignor``, client-side, timed apart: the
  benchmark's own Python, not the daemon), then every member syncs. Timed
  from the first JoinGroup to the last SyncGroup answer.
* ``state``: the stored state read from ZooKeeper: the state znode and its
  parts, and what the same record takes in the one-znode JSON format of
  earlier versions; then the state loaded ``--load-rounds`` times as a new
  owner loads it (read, checked, decoded; and the group rebuilt from it).
* ``rebalance``: one more member joins; every member learns it at its next
  heartbeat (3 s, Java's default) and rejoins; timed until all synced.
* ``commit``: one member commits an offset for every partition, in one
  OffsetCommit, ``--commit-rounds`` times (the first creates the offset
  znodes, the others set them), then fetches them all back (OffsetFetch).
* ``failover``: the owner daemon gets SIGKILL. Members find the new
  coordinator as Java does (FindCoordinator on the bootstrap addresses, with
  backoff) and heartbeat; timed from the kill until the first, and every,
  member is answered. The offsets are fetched back from the new owner.

Everything measured is also written to ``<workdir>/results.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench_env import bench_main, cpu_cores, cpu_snapshot, sandbox_up, zk_write_counters, zkcoord_cli
from biggroup_members import HEARTBEAT_INTERVAL_S, BigMember, Finder, Group
from group_client import NONE, BenchError, KafkaConnection, served_versions
from zkcoord.local.procs import free_port

PHASES = ("join", "state", "rebalance", "commit", "failover")
GROUP = "biggroup"


def _topic_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class Bench:
    """The run's environment and its measurements (module docstring)."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args, self.workdir = args, workdir
        self.chroot = f"/zkcoord-biggroup-{os.getpid()}"
        self.zookeeper = args.zookeeper
        self.sandbox_dir = workdir / "sandbox"
        self.sandbox_started = False
        self.zk = None
        self.zk_port = 0
        self.daemons: dict[int, subprocess.Popen] = {}
        self.addresses: dict[int, tuple[str, int]] = {}
        self.probes: dict[str, subprocess.Popen] = {}
        self.profilers: list[subprocess.Popen] = []
        self.topics = {f"{args.topic_prefix}-{i:03d}": args.partitions for i in range(args.topics)}
        self.results: dict = {"settings": {k: v for k, v in vars(args).items() if k != "workdir"}}
        self.windows: list[tuple[str, float, float]] = []  # (phase, start, end) in monotonic seconds

    # -- the environment -----------------------------------------------------------------------------
    def start(self) -> None:
        from kazoo.client import KazooClient

        if not self.zookeeper:
            self.sandbox_started = True
            env = sandbox_up(self.sandbox_dir)
            self.zookeeper = env["ZKCOORD_ZOOKEEPER"]
        self.zk_port = int(self.zookeeper.rsplit(":", 1)[1])
        self.zk = KazooClient(hosts=self.zookeeper, timeout=30)
        self.zk.start(timeout=30)
        self.zk.ensure_path(self.chroot)
        self._register_topics()
        for node_id in range(1, self.args.daemons + 1):
            self._start_daemon(node_id)
        asyncio.run(self._wait_daemons())
        if self.args.py_spy:
            for node_id, proc in self.daemons.items():
                self.profilers.append(subprocess.Popen(
                    [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(proc.pid), "--rate", "200",
                     "--format", "speedscope", "--idle", "--nonblocking", "--subprocesses",
                     "--output", str(self.workdir / f"py-spy-{node_id}.json")],
                    stdout=subprocess.DEVNULL, stderr=open(self.workdir / f"py-spy-{node_id}.log", "wb")))

    def _register_topics(self) -> None:
        """Kafka's own registrations (``/brokers/topics/<topic>``), as its controller writes them."""
        started = time.monotonic()
        self.zk.ensure_path(f"{self.chroot}/brokers/topics")
        for start in range(0, len(self.topics), 50):
            txn = self.zk.transaction()
            for topic in list(self.topics)[start:start + 50]:
                count = self.topics[topic]
                registration = {"version": 3, "topic_id": _topic_id(), "adding_replicas": {},
                                "removing_replicas": {}, "partitions": {str(p): [0] for p in range(count)}}
                txn.create(f"{self.chroot}/brokers/topics/{topic}", json.dumps(registration).encode())
            failed = [r for r in txn.commit() if isinstance(r, Exception)]
            if failed:
                raise BenchError(f"registering the topics failed: {failed[0]!r}")
        print(f"registered {len(self.topics)} topics x {self.args.partitions} partitions in "
              f"{self.chroot}/brokers/topics ({time.monotonic() - started:.1f} s)", flush=True)

    def _start_daemon(self, node_id: int) -> None:
        port = self.addresses.get(node_id, ("127.0.0.1", 0))[1] or free_port()
        command = [sys.executable, "-m", "zkcoord", "run", "--zookeeper", self.zookeeper + self.chroot,
                   "--listen", f"127.0.0.1:{port}", "--node-id", str(node_id), *self.args.daemon_arg]
        log = open(self.workdir / f"zkcoord-{node_id}.log", "ab")
        self.daemons[node_id] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                                 start_new_session=True)
        log.close()
        self.addresses[node_id] = ("127.0.0.1", port)

    async def _wait_daemons(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        for node_id, address in self.addresses.items():
            while True:
                if self.daemons[node_id].poll() is not None:
                    raise BenchError(f"daemon {node_id} exited; see {self.workdir}/zkcoord-{node_id}.log")
                try:
                    conn = await KafkaConnection.open(*address, "bench")
                    await served_versions(conn)
                    conn.close()
                    break
                except (OSError, ConnectionError):
                    if time.monotonic() > deadline:
                        raise BenchError(f"daemon {node_id} did not answer within {timeout_s:g} s") from None
                    await asyncio.sleep(0.2)
        print("daemons: " + ", ".join(f"{n} on {h}:{p}" for n, (h, p) in self.addresses.items()), flush=True)

    def bootstraps(self) -> list[tuple[str, int]]:
        return list(self.addresses.values())

    def start_probe(self, name: str, group: str) -> None:
        out = self.workdir / f"{name}.txt"
        out.write_text("")
        addresses = ",".join(f"{h}:{p}" for h, p in self.bootstraps())
        self.probes[name] = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("biggroup_members.py")), addresses, group, str(out),
             str(self.args.probe_interval_ms)], start_new_session=True, cwd=Path(__file__).parent)

    def stop(self) -> None:
        for proc in list(self.probes.values()) + list(self.daemons.values()):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in list(self.probes.values()) + list(self.daemons.values()):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for proc in self.profilers:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.zk is not None:
            try:
                if not self.args.keep_chroot:
                    self.zk.delete(self.chroot, recursive=True)
                self.zk.stop()
                self.zk.close()
            except Exception as exc:  # keep cleaning up
                print(f"warning: cleaning up ZooKeeper: {exc!r}", file=sys.stderr)
        if self.sandbox_started:
            print("stopping the sandbox ...", flush=True)
            zkcoord_cli("local", "down", "--state-dir", str(self.sandbox_dir), check=False)

    # -- measuring -----------------------------------------------------------------------------------
    def mark(self, phase: str, start: float, end: float) -> None:
        self.windows.append((phase, start, end))

    def probe_stats(self) -> dict[str, dict[str, dict]]:
        """Per probe, per phase window: heartbeats answered, p50 / p99 / max latency (ms), failures."""
        out: dict[str, dict[str, dict]] = {}
        for name in self.probes:
            rows = []
            for line in (self.workdir / f"{name}.txt").read_text().splitlines():
                sent, took, code = line.split()
                rows.append((float(sent), float(took), code))
            per = {}
            for phase, start, end in self.windows:
                inside = [r for r in rows if start <= r[0] <= end]
                ok = sorted(r[1] for r in inside if r[2] == "0")
                per[phase] = {"heartbeats": len(ok), "failed": len(inside) - len(ok),
                              "p50_ms": _pct(ok, 50), "p99_ms": _pct(ok, 99), "max_ms": ok[-1] if ok else None}
            out[name] = per
        return out

    def zk_counters(self):
        return zk_write_counters(self.zk_port, (self.chroot.strip("/"),))

    def pids(self) -> dict[str, int]:
        return {f"zkcoord-{n}": p.pid for n, p in self.daemons.items() if p.poll() is None}


def _pct(values: list[float], pct: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(len(values) * pct / 100))]


# -- phases -------------------------------------------------------------------------------------------

async def find_groups(bench: Bench) -> tuple[int, str, str]:
    """(the big group's owner-to-be, a probe group on it, a probe group on another daemon)."""
    finder = Finder(bench.bootstraps())
    try:
        owner = (await finder.coordinator(GROUP))[0]
        same = other = None
        for i in range(1000):
            node = (await finder.coordinator(f"probe-{i}"))[0]
            if node == owner and same is None:
                same = f"probe-{i}"
            elif node != owner and other is None:
                other = f"probe-{i}"
            if same and (other or len(bench.addresses) == 1):
                return owner, same, other
    finally:
        finder.close()
    raise BenchError("no probe group id hashed to the wanted daemons")


async def phase_join(bench: Bench, group: Group) -> None:
    started = time.monotonic()
    group.start()
    try:
        await group.wait(lambda: group.synced_at() is not None, "every member synced", bench.args.timeout_s)
    except BaseException:
        bench.mark("join (unfinished)", started, time.monotonic())
        raise
    ended = time.monotonic()
    joined = [m for m in group.members]
    bench.mark("join", started, ended)
    errors: dict[int, int] = {}
    for m in joined:
        for code, n in m.errors.items():
            errors[code] = errors.get(code, 0) + n
    bench.results["join"] = {"seconds": ended - started, "generation": group.synced_at(),
                             "leader_assign_s": group.assign_s, "member_errors": errors}
    print(f"join+sync of {len(group.members)} members: {ended - started:.2f} s (generation {group.synced_at()}; "
          f"the leader's assignment took {sum(group.assign_s):.2f} s of that; member errors {errors})", flush=True)


def read_stored(bench: Bench) -> dict:
    """The stored state's znodes and sizes, as ZooKeeper holds them."""
    from kazoo.exceptions import NoNodeError

    base = f"{bench.chroot}/coordinators/{GROUP}"
    try:
        data, stat = bench.zk.get(f"{base}/state")
    except NoNodeError:
        return {"stored": False}
    out = {"stored": True, "state_znode_bytes": len(data), "state_version": stat.version, "parts": 0,
           "part_bytes": 0, "format": json.loads(data).get("v")}
    try:
        parts = bench.zk.get_children(f"{base}/state-parts")
    except NoNodeError:
        parts = []
    for name in parts:
        part, _ = bench.zk.get(f"{base}/state-parts/{name}")
        out["parts"] += 1
        out["part_bytes"] += len(part)
        out["largest_znode_bytes"] = max(out.get("largest_znode_bytes", len(data)), len(part))
    out["total_bytes"] = out["state_znode_bytes"] + out["part_bytes"]
    return out


async def phase_state(bench: Bench) -> None:
    from zkcoord.core import groups
    from zkcoord.zk.connection import ZkConnection
    from zkcoord.zk.state_store import GroupStateStore

    stored = read_stored(bench)
    conn = ZkConnection(bench.zookeeper + bench.chroot, session_timeout_ms=30_000, request_timeout_ms=60_000)
    await asyncio.to_thread(conn.start)
    try:
        store = GroupStateStore(conn, None)
        loads, rebuilds = [], []
        record = None
        for _ in range(bench.args.load_rounds):
            started = time.perf_counter()
            record, _ = await store.load(GROUP)
            loads.append(time.perf_counter() - started)
            started = time.perf_counter()
            if record is not None:
                groups.from_record(GROUP, record)
            rebuilds.append(time.perf_counter() - started)
    finally:
        await asyncio.to_thread(conn.stop)
    if record is not None:
        stored["one_znode_json_bytes"] = len(json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode())
        stored["members"] = len(record.get("m", ()))
    stored["load_ms"] = [round(s * 1e3, 1) for s in loads]
    stored["rebuild_ms"] = [round(s * 1e3, 1) for s in rebuilds]
    bench.results["state"] = stored
    print("stored state: " + json.dumps(stored), flush=True)


async def phase_rebalance(bench: Bench, group: Group) -> None:
    before = group.synced_at()
    newcomer = group.new_member(len(group.members))
    group.members.append(newcomer)
    started = time.monotonic()
    group.start([newcomer])
    await group.wait(lambda: (g := group.synced_at()) is not None and g != before, "the rebalance",
                     bench.args.timeout_s)
    ended = time.monotonic()
    bench.mark("rebalance", started, ended)
    bench.results["rebalance"] = {"seconds": ended - started, "generation": group.synced_at(),
                                  "leader_assign_s": group.assign_s[-1:]}
    print(f"rebalance to {len(group.members)} members: {ended - started:.2f} s (generation {group.synced_at()}, "
          f"heartbeats every {HEARTBEAT_INTERVAL_S:g} s)", flush=True)


async def _committer(bench: Bench, group) -> BigMember:
    """A connection of its own with the identity of a synced member (its heartbeats go on beside): its
    generation, or for a consumer group its member epoch (OffsetCommit v9)."""
    committer = BigMember(-1, GROUP, [], bench.args.assignor, bench.bootstraps())
    await committer.connect(group.finder)
    if isinstance(group, Group):
        source = next(m for m in group.members if not m.needs_join)
        committer.member_id, committer.generation = source.member_id, source.synced_generation
    else:
        source = group.members[0]
        committer.member_id, committer.generation, committer.commit_version = source.member_id, source.epoch, 9
    return committer


def _generation(group) -> int | None:
    return group.synced_at() if isinstance(group, Group) else group.members[0].epoch


async def phase_commit(bench: Bench, group: Group) -> None:
    committer = await _committer(bench, group)
    rounds = []
    try:
        for round_ in range(bench.args.commit_rounds):
            offsets = {t: [(p, 1000 * (round_ + 1) + p) for p in range(n)] for t, n in bench.topics.items()}
            committer.generation = _generation(group) or committer.generation
            zk_before, cpu_before = bench.zk_counters(), cpu_snapshot(bench.pids())
            started = time.monotonic()
            answer = await committer.commit(offsets)
            ended = time.monotonic()
            zk_delta, cores = bench.zk_counters() - zk_before, cpu_cores(cpu_before, cpu_snapshot(bench.pids()))
            bench.mark(f"commit-{round_ + 1}", started, ended)
            codes: dict[int, int] = {}
            for topic in answer.topics:
                for p in topic.partitions:
                    codes[p.error_code] = codes.get(p.error_code, 0) + 1
            rounds.append({"seconds": ended - started, "codes": codes, "zk_transactions": zk_delta.zxid,
                           "znode_writes": zk_delta.writes, "bytes": zk_delta.bytes,
                           "cores": {k: round(v, 2) for k, v in cores.items()}})
            print(f"commit {round_ + 1}: {ended - started:.2f} s, codes {codes}, {zk_delta.zxid} ZooKeeper "
                  f"transactions, {zk_delta.writes} znode writes", flush=True)
        started = time.monotonic()
        fetched = await committer.fetch_all()
        ended = time.monotonic()
        bench.mark("fetch", started, ended)
        last = bench.args.commit_rounds
        good = sum(1 for t in fetched.topics for p in t.partitions
                   if p.error_code == NONE and p.committed_offset == 1000 * last + p.partition_index)
        bench.results["commit"] = {"rounds": rounds, "fetch_seconds": ended - started, "fetched_right": good}
        print(f"fetch of every offset: {ended - started:.2f} s, {good} right", flush=True)
    finally:
        committer.close()


async def phase_failover(bench: Bench, group, owner: int) -> None:
    generation = _generation(group)
    ok = (lambda m: m.last_ok) if isinstance(group, Group) else (lambda m: m.last_ok_sent)
    killed = time.monotonic()
    bench.daemons[owner].send_signal(signal.SIGKILL)
    bench.daemons[owner].wait()
    print(f"killed daemon {owner} (SIGKILL)", flush=True)
    await group.wait(lambda: any(ok(m) > killed for m in group.members), "the first member served again",
                     bench.args.timeout_s)
    first = time.monotonic() - killed
    await group.wait(lambda: all(ok(m) > killed for m in group.members), "every member served again",
                     bench.args.timeout_s)
    every = time.monotonic() - killed
    bench.mark("failover", killed, killed + every)
    committer = await _committer(bench, group)
    try:
        started = time.monotonic()
        fetched = await committer.fetch_all()
        fetch_s = time.monotonic() - started
    finally:
        committer.close()
    last = bench.args.commit_rounds
    good = sum(1 for t in fetched.topics for p in t.partitions
               if p.error_code == NONE and p.committed_offset == 1000 * last + p.partition_index)
    coordinators = {m.coordinator if isinstance(m.coordinator, int) else m.coordinator[0]
                    for m in group.members if m.coordinator is not None}
    after = _generation(group)
    loaded = _logged_load_ms(bench, owner)
    bench.results["failover"] = {"new_owner_read_ms": loaded, "first_served_s": first, "every_served_s": every,
                                 "generation_before": generation,
                                 "generation_after": after, "coordinators_after": sorted(coordinators),
                                 "fetch_seconds": fetch_s, "fetched_right": good}
    if loaded:
        print(f"the new owner read the packed state in {loaded} ms (its log)", flush=True)
    print(f"fail-over: first member served {first:.2f} s after the kill (a heartbeat sent after it answered), "
          f"every member {every:.2f} s; generation/epoch {generation} -> {after}; offsets fetched from the new "
          f"owner: {good} right", flush=True)


async def run_consumer_phases(bench: Bench, owner: int) -> None:
    from biggroup_consumer import ConsumerGroupRun

    group = ConsumerGroupRun(bench, GROUP, bench.args.members)
    skip = set(bench.args.skip)
    try:
        started = time.monotonic()
        await group.start()
        try:
            await group.wait(group.settled, "every member owning its share", bench.args.timeout_s)
        except BaseException:
            bench.mark("join (unfinished)", started, time.monotonic())
            bench.results["join"] = {"unfinished_after_s": time.monotonic() - started,
                                     "members_at_an_epoch": sum(1 for m in group.members if m.epoch > 0),
                                     "owned": sum(m.owned_count() for m in group.members),
                                     "fenced": sum(m.fenced for m in group.members)}
            raise
        ended = time.monotonic()
        bench.mark("join", started, ended)
        bench.results["join"] = {"seconds": ended - started, "epoch": group.members[0].epoch,
                                 "retries": sum(m.retries for m in group.members),
                                 "fenced": sum(m.fenced for m in group.members)}
        print(f"{len(group.members)} consumer-protocol members own their shares of {group.partitions} partitions "
              f"{ended - started:.2f} s after the first heartbeat (epoch {group.members[0].epoch})", flush=True)
        if "state" not in skip:
            await phase_consumer_state(bench)
        if "commit" not in skip:
            await phase_commit(bench, group)
        if "failover" not in skip and len(bench.daemons) > 1:
            await phase_failover(bench, group, owner)
            bench.results["failover"]["settled_after"] = group.settled()
    finally:
        await group.close()
        await asyncio.sleep(0.5)
        bench.results["probes"] = bench.probe_stats()


async def phase_consumer_state(bench: Bench) -> None:
    """A consumer group's znodes: its group record, one record per member and its target record."""
    from kazoo.exceptions import NoNodeError
    from zkcoord.zk.connection import ZkConnection
    from zkcoord.zk.state_store import GroupStateStore

    base = f"{bench.chroot}/coordinators/{GROUP}"
    data, _ = bench.zk.get(f"{base}/state")
    try:
        names = bench.zk.get_children(f"{base}/members")
    except NoNodeError:
        names = []
    sizes = [len(bench.zk.get(f"{base}/members/{n}")[0]) for n in names]
    try:
        target = len(bench.zk.get(f"{base}/target")[0])
    except NoNodeError:
        target = 0  # a version 1 record (an earlier zkcoord): the targets are in the member records
    stored = {"state_znode_bytes": len(data), "member_records": len(sizes), "member_bytes": sum(sizes),
              "largest_member_bytes": max(sizes, default=0), "target_record_bytes": target,
              "total_bytes": len(data) + sum(sizes) + target}
    conn = ZkConnection(bench.zookeeper + bench.chroot, session_timeout_ms=30_000, request_timeout_ms=60_000)
    await asyncio.to_thread(conn.start)
    loads = []
    try:
        for _ in range(bench.args.load_rounds):
            started = time.perf_counter()
            await GroupStateStore(conn, None).load(GROUP)
            loads.append(round((time.perf_counter() - started) * 1e3, 1))
    finally:
        await asyncio.to_thread(conn.stop)
    stored["load_ms"] = loads
    bench.results["state"] = stored
    print("stored state: " + json.dumps(stored), flush=True)


async def _probes_running(bench: Bench, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    for name in bench.probes:
        path = bench.workdir / f"{name}.txt"
        while sum(1 for line in path.read_text().splitlines() if line.endswith(" 0")) < 10:
            if time.monotonic() > deadline:
                raise BenchError(f"{name} was not heartbeating within {timeout_s:g} s (see {path})")
            await asyncio.sleep(0.2)


def _logged_load_ms(bench: Bench, dead: int) -> list[float]:
    """What the surviving daemons logged reading the big group's packed state (zkcoord.zk.state_store)."""
    import re

    found = []
    for node_id in bench.daemons:
        if node_id == dead:
            continue
        text = (bench.workdir / f"zkcoord-{node_id}.log").read_text(errors="replace")
        found += [float(m) for m in re.findall(rf"group {GROUP}: packed state read .* in (\d+) ms", text)]
    return found


async def run_phases(bench: Bench) -> None:
    owner, same, other = await find_groups(bench)
    bench.results["owner"] = owner
    bench.start_probe("probe-same", same)
    if other:
        bench.start_probe("probe-other", other)
    await _probes_running(bench)
    quiet = time.monotonic()
    await asyncio.sleep(bench.args.quiet_s)
    bench.mark("quiet", quiet, time.monotonic())
    if bench.args.protocol == "consumer":
        await run_consumer_phases(bench, owner)
        return
    group = Group(GROUP, bench.args.members, bench.topics, bench.args.assignor, bench.args.shuffled, bench.bootstraps())
    skip = set(bench.args.skip)
    try:
        await phase_join(bench, group)
        if "state" not in skip:
            await phase_state(bench)
        if "rebalance" not in skip:
            await phase_rebalance(bench, group)
            if "state" not in skip:
                await phase_state(bench)
        if "commit" not in skip:
            await phase_commit(bench, group)
        if "failover" not in skip and len(bench.daemons) > 1:
            await phase_failover(bench, group, owner)
    finally:
        await group.close()
        await asyncio.sleep(0.5)
        bench.results["probes"] = bench.probe_stats()


def report(bench: Bench) -> None:
    print("\n== another group's heartbeats, per phase (ms) ==")
    print(f"{'probe':12} {'phase':12} {'answered':>8} {'failed':>6} {'p50':>8} {'p99':>8} {'max':>8}")
    for name, phases in bench.results.get("probes", {}).items():
        for phase, s in phases.items():
            fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
            print(f"{name:12} {phase:12} {s['heartbeats']:>8} {s['failed']:>6} {fmt(s['p50_ms']):>8} "
                  f"{fmt(s['p99_ms']):>8} {fmt(s['max_ms']):>8}")
    (bench.workdir / "results.json").write_text(json.dumps(bench.results, indent=1, default=str))
    print(f"\nresults: {bench.workdir / 'results.json'}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1000, help="per topic")
    parser.add_argument("--topic-prefix", default="big")
    parser.add_argument("--protocol", choices=("classic", "consumer"), default="classic",
                        help="classic (JoinGroup/SyncGroup, the leader assigns) or consumer (KIP-848, the daemon "
                             "assigns with uniform)")
    parser.add_argument("--assignor", choices=("range", "cooperative-sticky"), default="range",
                        help="the classic leader's assignor")
    parser.add_argument("--shuffled", action="store_true", help="deal partitions at random (least compressible)")
    parser.add_argument("--daemons", type=int, default=2)
    parser.add_argument("--daemon-arg", action="append", default=[], help="an extra `zkcoord run` flag (repeat)")
    parser.add_argument("--zookeeper", default="", help="HOST:PORT of a running ZooKeeper (default: a sandbox)")
    parser.add_argument("--commit-rounds", type=int, default=3)
    parser.add_argument("--load-rounds", type=int, default=3)
    parser.add_argument("--probe-interval-ms", type=int, default=10)
    parser.add_argument("--quiet-s", type=float, default=5.0, help="probe-only window before the group starts")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--skip", action="append", default=[], choices=PHASES)
    parser.add_argument("--py-spy", action="store_true",
                        help="profile each daemon with py-spy (installed beside Python) into <workdir>/py-spy-N.txt")
    parser.add_argument("--keep-chroot", action="store_true", help="leave the chroot in ZooKeeper")
    parser.add_argument("--workdir", type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench: Bench | None = None

    def run(workdir: Path) -> int:
        nonlocal bench
        bench = Bench(args, workdir)
        print(f"working directory: {workdir}", flush=True)
        bench.start()
        try:
            asyncio.run(run_phases(bench))
        finally:
            report(bench)
        return 0

    return bench_main(args.workdir, "zkcoord-bench-biggroup-", run, lambda: bench and bench.stop())


if __name__ == "__main__":
    sys.exit(main())
