"""Benchmark: the Spark migration job (``zkcoord migrate run-job``) against
Kafka's own ``kafka-consumer-groups --reset-offsets --from-file``, cold and warm.

Run by hand, never by the test suite; prints a table and ratios, asserts
nothing::

    .venv/bin/python bench/bench_migrate.py                       # 1,000 x 100, a cold then a warm run
    .venv/bin/python bench/bench_migrate.py --groups 10000 --runs cold --peer-groups 10000   # 1,000,000 offsets
    .venv/bin/python bench/bench_migrate.py --runs cluster         # the sandbox's 2-worker Spark cluster
    .venv/bin/python bench/bench_migrate.py --zookeeper H:P --bootstrap-servers H:P   # servers you run

What it does, in a working directory of its own (``--workdir``, default a new
``/tmp/zkcoord-bench-migrate-*``; it stays, with the reports and the peer's
output):

1. A sandbox (``zkcoord local up --state-dir <workdir>/sandbox``, with
   ``--spark-workers 2`` for a ``cluster`` run) unless servers are given;
   ``zkcoord local down`` at the end, on errors and Ctrl-C.
2. ``--topics`` topics of ``--partitions / --topics`` partitions each, with
   ``--records`` records per partition, so every log end is real.
3. For each run of ``--runs`` (default ``cold,warm``), ``--groups`` legacy
   groups ``<run>-NNNN`` of ``--partitions`` offsets each (random, 0 .. log
   end), in a ZooKeeper chroot of its own, one multi-op per group; the
   peer's ``peer-NNNN`` groups (``--peer-groups``, default as many) get the
   same offsets in its CSV files only (it never reads ZooKeeper).
4. Each run is ONE process, as a ``migrate run-job`` invocation is (this
   script with ``--child``): the interpreter's start and imports, the
   SparkSession's start, then ``plan``, ``apply`` (commits every offset to
   Kafka, moves every group to dual) and ``verify`` over the run's groups,
   each writing its Parquet + CSV report, then the session's end. Its
   ``end to end`` is that process's whole wall time, from its start to its
   exit.

   * ``cold``: a fresh cache (``ZKCOORD_CACHE_DIR=<workdir>/cache``): no
     class-data-sharing archive, as on a machine that never ran zkcoord's
     Spark. As the session ends it starts a background process that makes
     the archive with a small session of its own
     (``zkcoord.migrate.spark_cds``): the run's end to end counts the
     handover, not the making, which is timed apart (``class archive,
     made in the background``) and waited for before anything else runs.
   * ``warm``: the same cache, the archive in place (made by a small session
     first when no cold run made it).
   * ``cluster``: ``--spark-master`` (default: the sandbox's 2-worker
     standalone cluster): the driver JVM maps no archive there, and the
     executors are new JVMs each run.

   Each run reports the driver's peak memory: the Python driver's and its
   JVM's peak resident sets (``ru_maxrss``, ``VmHWM``).
5. The peer on the ``peer-`` groups: ``--reset-offsets --from-file F
   --dry-run`` (the plan's work), ``--execute`` (the apply's) and
   ``--describe`` (the committed offsets and lag: verify's), each in one
   invocation per ``--peer-chunk`` (1,000) groups, one after the other (a
   4-column CSV, ``--group`` repeated; the tool gets slower per group as
   its list grows, so chunks are its best case at scale); then the same
   three one JVM per group, as an operator runs it, over ``--peer-sample``
   groups.

Reading it: ``offsets/s`` is partitions handled per second of wall time.
``end to end`` rows: plan, apply and verify each handle every offset, so
3 x groups x partitions offsets over the whole run's wall time; the peer's
is its three one-JVM runs. The goals are judged on the end-to-end rows.
On a 2-core machine ZooKeeper, Kafka, the Spark JVM and two Python workers
share the cores, and other people's tests may too: the load average is
printed before and after each step; believe ratios of one run, and repeat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zkcoord.local.jars import find_java, kafka_distribution  # noqa: E402
from zkcoord.zk.legacy import LegacyOffsets  # noqa: E402
from zkcoord.migrate.plan import Selection, gather_plan  # noqa: E402
from zkcoord.kafka.offsets import KafkaOffsets  # noqa: E402
from zkcoord.zk.connection import ZkConnection  # noqa: E402

PEER_CLASS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"  # kafka-tools-3.9.2.jar


@dataclass
class Row:
    name: str
    groups: int
    offsets: int
    seconds: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.offsets / self.seconds if self.seconds > 0 else 0.0


class Services:
    """The sandbox (or the servers given) and the benchmark's chroot."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args, self.workdir = args, workdir
        self.state_dir = workdir / "sandbox"
        self.zookeeper, self.bootstrap = args.zookeeper, args.bootstrap_servers
        self.chroot = f"/zkcoord-bench-migrate-{os.getpid()}"
        self.spark_master: str | None = None
        self._started = False

    def _cli(self, *args: str) -> str:
        proc = subprocess.Popen([sys.executable, "-m", "zkcoord", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate()
        except BaseException:
            proc.send_signal(signal.SIGINT)  # let `local up` stop what it started
            proc.communicate(timeout=120)
            raise
        if proc.returncode != 0:
            raise SystemExit(f"zkcoord {' '.join(args)} failed ({proc.returncode}):\n{err or out}")
        return out

    def start(self, spark_workers: int = 0) -> None:
        if not self.zookeeper:
            print(f"starting the sandbox in {self.state_dir} ...", flush=True)
            self._started = True
            self._cli("local", "up", "--state-dir", str(self.state_dir), "--spark-workers", str(spark_workers))
            env = dict(re.findall(r"export (\w+)=(\S+)", self._cli("local", "env", "--state-dir", str(self.state_dir))))
            self.zookeeper, self.bootstrap = env["ZKCOORD_ZOOKEEPER"], env["ZKCOORD_BOOTSTRAP_SERVERS"]
            self.spark_master = env.get("ZKCOORD_SPARK_MASTER")

    @property
    def hosts(self) -> str:
        return self.zookeeper + self.chroot

    def stop(self) -> None:
        if self._started:
            print("taking the sandbox down ...", flush=True)
            self._cli("local", "down", "--state-dir", str(self.state_dir))


# ------------------------------------------------------------------ seeding
def make_topics(services: Services, args: argparse.Namespace) -> list[str]:
    """The topics, with ``--records`` records in every partition."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    per_topic = max(1, args.partitions // args.topics)
    topics = [f"bench-{os.getpid()}-t{i}" for i in range(args.topics)]
    admin = KafkaAdminClient(bootstrap_servers=services.bootstrap, request_timeout_ms=60_000)
    try:
        admin.create_topics([NewTopic(t, per_topic, 1) for t in topics], wait_for_metadata=True)
    finally:
        admin.close()
    started = time.perf_counter()
    producer = KafkaProducer(bootstrap_servers=services.bootstrap, linger_ms=20, batch_size=256 * 1024)
    for topic in topics:
        for partition in range(per_topic):
            for _ in range(args.records):
                producer.send(topic, b"x", partition=partition)
    producer.flush()
    producer.close()
    print(f"produced {len(topics) * per_topic * args.records:,} records in {time.perf_counter() - started:.1f} s")
    return topics


def offsets_of(names: list[str], topics: list[str], args: argparse.Namespace, seed: int) -> dict:
    per_topic = max(1, args.partitions // args.topics)
    rnd = random.Random(seed)
    return {g: {(t, p): rnd.randint(0, args.records) for t in topics for p in range(per_topic)} for g in names}


def seed_zookeeper(services: Services, offsets: dict) -> None:
    """Legacy offsets of ``offsets``' groups, one multi-op per group, 64 in flight."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=services.zookeeper, timeout=30)
    zk.start(timeout=30)
    try:
        started = time.perf_counter()
        root = f"{services.chroot}/consumers"
        zk.ensure_path(root)
        pending = []
        for group, found in offsets.items():
            txn = zk.transaction()
            txn.create(f"{root}/{group}")
            txn.create(f"{root}/{group}/offsets")
            for topic in sorted({t for t, _ in found}):
                txn.create(f"{root}/{group}/offsets/{topic}")
            for (topic, partition), value in found.items():
                txn.create(f"{root}/{group}/offsets/{topic}/{partition}", str(value).encode())
            pending.append(txn.commit_async())
            if len(pending) >= 64:
                [r.get() for r in pending]
                pending = []
        [r.get() for r in pending]
        total = sum(len(v) for v in offsets.values())
        print(f"seeded {total:,} legacy offsets of {len(offsets):,} groups in {time.perf_counter() - started:.1f} s "
              f"(one multi-op per group)", flush=True)
    finally:
        zk.stop()
        zk.close()


# ------------------------------------------------------------------ zkcoord: one process per run
def child(spec: dict) -> None:
    """``--child``: one run as one process, as ``migrate run-job`` is: the session, plan, apply, verify, the
    session's end; prints one JSON line of timings (seconds from this process's start) and peak memory."""
    from zkcoord.cli.spark_cmd import _process_age_s

    born = time.monotonic() - _process_age_s()
    from zkcoord.migrate.spark_job import JobConfig, run_job, spark_session

    out: dict = {"imports_s": time.monotonic() - born, "jobs": {}}
    steps: dict[str, float] = {}

    import contextlib

    @contextlib.contextmanager
    def timed(what: str, message: str):
        started = time.monotonic()
        try:
            yield
        finally:
            steps[what] = time.monotonic() - started

    with spark_session(spec["master"], steps=timed) as spark:
        out["master"] = spark.sparkContext.master
        out["archive"] = _class_archive(spark)
        for mode in ("plan", "apply", "verify"):
            config = JobConfig(spec["zookeeper"], spec["bootstrap"], Selection(pattern=spec["pattern"]),
                               str(Path(spec["workdir"]) / f"report-{spec['run']}-{mode}"), mode=mode,
                               spark_partitions=spec["spark_partitions"], batch_groups=spec["batch_groups"],
                               apply_concurrency=spec["apply_concurrency"], zk_reads=spec["zk_reads"],
                               timeout_ms=120_000)
            result = run_job(config, spark)
            out["jobs"][mode] = {"seconds": result.elapsed_s, "groups": result.groups_selected,
                                 "offsets": result.totals.partitions, "statuses": dict(result.statuses),
                                 "outcomes": dict(result.outcomes), "partitions": result.spark_partitions}
        out["jvm_peak_rss_mb"] = _jvm_peak_rss_mb(spark)
    out["start_s"] = steps.get("start")
    out["class_archive_handover_s"] = steps.get("class-archive")
    out["python_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["total_s"] = time.monotonic() - born
    print("BENCH-CHILD " + json.dumps(out), flush=True)


def _jvm_peak_rss_mb(spark) -> float | None:
    """The driver JVM's peak resident set (VmHWM), from /proc."""
    try:
        pid = spark.sparkContext._gateway.proc.pid
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except Exception:
        return None
    return None


def _class_archive(spark) -> str:
    """Whether the driver JVM mapped a class-data-sharing archive (zkcoord.migrate.spark_cds)."""
    try:
        options = str(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                      .getInputArguments())
    except Exception:
        return "class archive: unknown"
    if "-XX:SharedArchiveFile=" in options:
        return "class archive: used (made by an earlier session)"
    if "-XX:ArchiveClassesAtExit=" in options:
        return "class archive: none yet (this session records it)"
    return "class archive: none (one is made in the background after a first session)"


def run_one(services: Services, args: argparse.Namespace, workdir: Path, run: str, cache: Path) -> list[Row]:
    """One run (``cold``, ``warm``, ``cluster``) as a process of its own; its rows."""
    master = None if run != "cluster" else (args.spark_master or services.spark_master)
    spec = {"run": run, "master": master, "zookeeper": services.hosts, "bootstrap": services.bootstrap,
            "pattern": f"{run}-.*", "workdir": str(workdir), "spark_partitions": args.spark_partitions,
            "batch_groups": args.batch_groups, "apply_concurrency": args.apply_concurrency, "zk_reads": args.zk_reads}
    env = {k: v for k, v in os.environ.items() if k not in ("ZKCOORD_SPARK_MASTER",)}
    env["ZKCOORD_CACHE_DIR"] = str(cache)
    print(f"zkcoord {run}: plan + apply + verify in one process (cache {cache}) ... load {os.getloadavg()[0]:.2f}",
          flush=True)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)], env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    found = [line for line in proc.stdout.splitlines() if line.startswith("BENCH-CHILD ")]
    if proc.returncode != 0 or not found:
        raise SystemExit(f"the {run} run failed ({proc.returncode}):\n{proc.stderr[-5000:]}")
    out = json.loads(found[-1][len("BENCH-CHILD "):])
    saving = wait_for_archive(cache) if run == "cold" else None
    jobs = out["jobs"]
    groups, offsets = jobs["plan"]["groups"], jobs["plan"]["offsets"]
    rows = [Row(f"{run}: interpreter start + imports", 0, 0, out["imports_s"], ""),
            Row(f"{run}: spark session start", 0, 0, out["start_s"] or 0.0, f"{out['master']}; {out['archive']}")]
    for mode in ("plan", "apply", "verify"):
        job = jobs[mode]
        note = ", ".join(f"{n} {s}" for s, n in job["statuses"].items())
        if job["outcomes"]:
            note += "; groups: " + ", ".join(f"{n} {s}" for s, n in job["outcomes"].items())
        rows.append(Row(f"{run}: {mode} job", job["groups"], job["offsets"], job["seconds"],
                        f"{job['partitions']} Spark partitions; {note}"))
    if out.get("class_archive_handover_s") is not None:
        rows.append(Row(f"{run}: class archive handed over", 0, 0, out["class_archive_handover_s"],
                        "in the run: start the background maker"))
    if saving is not None:
        rows.append(Row(f"{run}: class archive, made in the background", 0, 0, saving,
                        "after the run's end, not in it; waited for before anything else"))
    rows.append(Row(f"{run}: {E2E}", groups, 3 * offsets, out["total_s"],
                    f"one process: start + session + plan + apply + verify + end (outside: {wall:.1f} s)"))
    rows.append(Row(f"{run}: driver peak memory", 0, 0, 0.0,
                    f"Python {out['python_peak_rss_mb']:.0f} MB, JVM {out['jvm_peak_rss_mb'] or 0:.0f} MB (peak RSS)"))
    return rows


def wait_for_archive(cache: Path, timeout_s: float = 900.0) -> float | None:
    """Seconds until the background maker put the class archive in place (or gave up), from now."""
    started = time.perf_counter()
    root = cache / "spark-cds"
    while time.perf_counter() - started < timeout_s:
        if not [m for m in root.glob("*.saving") if _alive(m)]:
            return time.perf_counter() - started
        time.sleep(0.2)
    return None


def _alive(marker: Path) -> bool:
    """Whether the process a ``.saving`` marker names runs (a maker that ended before its marker was
    written leaves one behind: later sessions remove it)."""
    try:
        pid = int(marker.read_text().strip() or 0)
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, ValueError, IndexError):
        return False
    return state not in ("Z", "X")


def ensure_archive(cache: Path) -> None:
    """A class archive in ``cache`` for a warm run: a small session saves one if there is none."""
    if list((cache / "spark-cds").glob("*.jsa")):
        return
    print(f"making the class archive in {cache} for the warm run ...", flush=True)
    env = {**os.environ, "ZKCOORD_CACHE_DIR": str(cache)}
    subprocess.run([sys.executable, "-c", "from zkcoord.migrate.spark_job import spark_session\n"
                    "with spark_session() as s: s.sparkContext.parallelize(range(4), 2).count()"],
                   env=env, check=True, capture_output=True)
    wait_for_archive(cache)


def run_single_process(services: Services, pattern: str) -> Row:
    """``migrate plan --all`` without Spark: gather_plan, one process, one znode per read."""
    async def work():
        conn = ZkConnection(services.hosts, request_timeout_ms=60_000)
        async with conn:
            with KafkaOffsets(services.bootstrap, request_timeout_ms=60_000) as kafka:
                return await gather_plan(LegacyOffsets(conn), kafka, Selection(pattern=pattern))
    started = time.perf_counter()
    plan = asyncio.run(work())
    return Row("zkcoord plan, single process (gather_plan)", plan.totals.groups, plan.totals.partitions,
               time.perf_counter() - started, "migrate plan's path, no Spark")


# ------------------------------------------------------------------ the peer
def run_peer(services: Services, offsets: dict, workdir: Path, java: str, classpath: str, sample: int,
             chunk: int) -> list[Row]:
    """The tool's three steps over every ``peer-`` group, each in one JVM per ``chunk`` groups, the JVMs one
    after the other (its best case, what an operator scripting many groups does: the tool gets slower per
    group as its list grows); then the first ``sample`` groups one JVM per group."""
    peers = sorted(g for g in offsets if g.startswith("peer-"))
    if not peers:
        return []
    files = workdir / "peer"
    files.mkdir(exist_ok=True)
    for group in peers[:sample]:
        (files / f"{group}.csv").write_text("".join(f"{t},{p},{o}\n" for (t, p), o in sorted(offsets[group].items())))
    chunks = [peers[i:i + chunk] for i in range(0, len(peers), chunk)]
    for n, part in enumerate(chunks):
        (files / f"all-{n}.csv").write_text("".join(f"{g},{t},{p},{o}\n" for g in part
                                                    for (t, p), o in sorted(offsets[g].items())))
    base = [java, "-cp", classpath, PEER_CLASS, "--bootstrap-server", services.bootstrap]
    steps = (("--reset-offsets --dry-run", ["--reset-offsets", "--dry-run"]),
             ("--reset-offsets --execute", ["--reset-offsets", "--execute"]),
             ("--describe", ["--describe"]))
    rows = []
    for name, extra in steps:
        print(f"kafka-consumer-groups {name}, one JVM per {chunk} groups, {len(peers)} groups ... "
              f"load {os.getloadavg()[0]:.2f}", flush=True)
        started = time.perf_counter()
        for n, part in enumerate(chunks):
            command = base + [a for g in part for a in ("--group", g)] + extra
            if "--reset-offsets" in extra:
                command += ["--from-file", str(files / f"all-{n}.csv")]
            _peer(command, files / f"all-{n}{extra[-1]}.out")
        rows.append(Row(f"kafka-consumer-groups {name} (one JVM per chunk)", len(peers), _count(offsets, peers),
                        time.perf_counter() - started,
                        f"{len(chunks)} invocation(s) of up to {chunk} groups, one after the other"))
    with KafkaOffsets(services.bootstrap, request_timeout_ms=60_000) as kafka:
        committed = sum(len(v) for v in kafka.committed_offsets(peers).values())
    if committed != _count(offsets, peers):
        print(f"warning: the peer committed {committed} of {_count(offsets, peers)} offsets; see {files}",
              file=sys.stderr)
    few = peers[:sample]
    for name, extra in steps if few else ():
        print(f"kafka-consumer-groups {name}, one JVM per group, {len(few)} groups ...", flush=True)
        started = time.perf_counter()
        for group in few:
            command = base + ["--group", group] + extra
            if "--reset-offsets" in extra:
                command += ["--from-file", str(files / f"{group}.csv")]
            _peer(command, files / f"{group}{extra[-1]}.out")
        rows.append(Row(f"kafka-consumer-groups {name} (per group)", len(few), _count(offsets, few),
                        time.perf_counter() - started, "one JVM per group"))
    return rows


def _count(offsets: dict, groups: list[str]) -> int:
    return sum(len(offsets[g]) for g in groups)


def _peer(command: list[str], output: Path) -> None:
    with output.open("w") as out:
        code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        print(f"warning: {' '.join(command[3:6])}... exited {code}; see {output}", file=sys.stderr)


# ------------------------------------------------------------------ report
E2E = "plan + apply + verify, end to end"
PEER_E2E = "kafka-consumer-groups dry-run + execute + describe"
PEER_STEPS = ("--reset-offsets --dry-run", "--reset-offsets --execute", "--describe")


def peer_end_to_end(rows: list[Row]) -> list[Row]:
    """The peer's three one-JVM runs as one row: every offset each handled over the sum of their wall times."""
    by_name = {row.name: row for row in rows}
    parts = [by_name.get(f"kafka-consumer-groups {step} (one JVM per chunk)") for step in PEER_STEPS]
    if not all(parts):
        return []
    return [Row(PEER_E2E, max(r.groups for r in parts), sum(r.offsets for r in parts), sum(r.seconds for r in parts),
                "three invocations, one JVM each")]


def report(rows: list[Row], loads: list[tuple[str, float]], runs: list[str], offsets: int) -> None:
    rows = rows + peer_end_to_end(rows)
    print()
    print("load average (1 min) at each step on", os.cpu_count(), "cores:",
          ", ".join(f"{what} {load:.2f}" for what, load in loads))
    print(f"{'run':62} {'groups':>7} {'offsets':>10} {'seconds':>9} {'offsets/s':>11}  note")
    for row in rows:
        rate = f"{row.rate:,.0f}" if row.offsets else "-"
        seconds = f"{row.seconds:9.2f}" if row.seconds else f"{'-':>9}"
        print(f"{row.name:62} {row.groups:>7,} {row.offsets:>10,} {seconds} {rate:>11}  {row.note}")
    by_name = {row.name: row for row in rows}
    once = "kafka-consumer-groups {} (one JVM per chunk)"
    each = "kafka-consumer-groups {} (per group)"
    pairs = []
    for run in runs:
        pairs += [(f"{run}: plan job", once.format(PEER_STEPS[0])), (f"{run}: apply job", once.format(PEER_STEPS[1])),
                  (f"{run}: verify job", once.format(PEER_STEPS[2])), (f"{run}: {E2E}", PEER_E2E),
                  (f"{run}: apply job", each.format(PEER_STEPS[1]))]
    pairs.append((f"{runs[0]}: plan job", "zkcoord plan, single process (gather_plan)"))
    print("\nratios (offsets/s, higher favours the left):")
    for left, right in pairs:
        if left in by_name and right in by_name and by_name[right].rate:
            print(f"  {left:40} / {right:58} {by_name[left].rate / by_name[right].rate:8.1f}x")
    big = offsets >= 1_000_000
    rate_goal, ratio_goal = (40_000, 15) if big else (20_000, 10)
    print(f"\ngoals at {offsets:,} offsets ({'issue 28: 1,000,000' if big else 'issue 28: 100,000'} offsets), "
          "against the peer's one-JVM runs over as many groups:")
    for run in runs:
        row = by_name.get(f"{run}: {E2E}")
        if row is None:
            continue
        print(f"  {run} end to end >= {rate_goal:,} offsets/s: {row.rate:,.0f}/s "
              f"{'met' if row.rate >= rate_goal else 'MISSED'}")
        if PEER_E2E in by_name and by_name[PEER_E2E].rate:
            ratio = row.rate / by_name[PEER_E2E].rate
            print(f"  {run} end to end >= {ratio_goal}x the peer: {ratio:,.1f}x {'met' if ratio >= ratio_goal else 'MISSED'}")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=1000, help="zkcoord's groups per run (default 1000)")
    parser.add_argument("--partitions", type=int, default=100, help="partitions per group (default 100)")
    parser.add_argument("--topics", type=int, default=10, help="topics they spread over (default 10)")
    parser.add_argument("--records", type=int, default=100, help="records per partition (default 100)")
    parser.add_argument("--runs", default="cold,warm",
                        help="comma-separated: cold (no class archive), warm (with it), cluster (--spark-master, "
                             "default the sandbox's 2-worker standalone cluster); each on groups of its own "
                             "(default cold,warm)")
    parser.add_argument("--peer-groups", type=int, default=None,
                        help="groups the peer runs on, each step in one JVM (default: --groups, the same job; "
                             "0: no peer runs)")
    parser.add_argument("--peer-chunk", type=int, default=1000,
                        help="groups per peer invocation (default 1000; the tool slows down per group as its list "
                             "grows, so at 10,000 groups ten invocations are its best case)")
    parser.add_argument("--peer-sample", type=int, default=5,
                        help="of those, how many the peer also runs one JVM per group (default 5, ~1 s each)")
    parser.add_argument("--spark-master", default=None,
                        help="the cluster run's master (default: the sandbox's, started with --spark-workers 2)")
    parser.add_argument("--spark-partitions", type=int, default=None)
    parser.add_argument("--batch-groups", type=int, default=100)
    parser.add_argument("--apply-concurrency", type=int, default=4)
    parser.add_argument("--zk-reads", choices=("auto", "multi", "single"), default="auto")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="the warm run's cache (class archive) [default: the cold run's, <workdir>/cache]")
    parser.add_argument("--no-single-process", action="store_true", help="skip the gather_plan reference run")
    parser.add_argument("--zookeeper", default=None, help="use this ZooKeeper instead of a sandbox")
    parser.add_argument("--bootstrap-servers", default=None, help="with --zookeeper: Kafka to use")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return args
    if args.peer_groups is None:
        args.peer_groups = args.groups
    args.runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = set(args.runs) - {"cold", "warm", "cluster"}
    if unknown or not args.runs:
        parser.error(f"--runs: give cold, warm and/or cluster, not {', '.join(sorted(unknown)) or 'nothing'}")
    if bool(args.zookeeper) != bool(args.bootstrap_servers):
        parser.error("give both --zookeeper and --bootstrap-servers, or neither (then a sandbox is started)")
    if "cluster" in args.runs and args.zookeeper and not args.spark_master:
        parser.error("--runs cluster with your own servers needs --spark-master")
    return args


def main() -> None:
    args = parse()
    if args.child:
        child(json.loads(args.child))
        return
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="zkcoord-bench-migrate-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"working directory: {workdir}")
    java, classpath = find_java(), kafka_distribution(print).classpath
    services = Services(args, workdir)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    loads = [("start", os.getloadavg()[0])]
    cache = workdir / "cache"
    try:
        services.start(spark_workers=2 if "cluster" in args.runs and not args.spark_master else 0)
        topics = make_topics(services, args)
        per_run = {run: offsets_of([f"{run}-{i:05d}" for i in range(args.groups)], topics, args, 42 + n)
                   for n, run in enumerate(args.runs)}
        for offsets in per_run.values():
            seed_zookeeper(services, offsets)
        peers = offsets_of([f"peer-{i:05d}" for i in range(args.peer_groups)], topics, args, 41)
        rows = []
        for run in args.runs:
            if run == "cold":
                shutil.rmtree(cache, ignore_errors=True)
            if run == "warm":
                ensure_archive(args.cache_dir or cache)
            loads.append((f"before {run}", os.getloadavg()[0]))
            rows += run_one(services, args, workdir, run, args.cache_dir or cache if run == "warm" else cache)
        if not args.no_single_process:
            print("zkcoord plan, single process ...", flush=True)
            rows.append(run_single_process(services, f"{args.runs[0]}-.*"))
        loads.append(("before the peer", os.getloadavg()[0]))
        rows += run_peer(services, peers, workdir, java, classpath, args.peer_sample, args.peer_chunk)
        loads.append(("end", os.getloadavg()[0]))
        report(rows, loads, args.runs, args.groups * args.partitions)
    finally:
        services.stop()


if __name__ == "__main__":
    main()
