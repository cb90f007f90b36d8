"""Benchmark: the Spark migration job (``zkcoord migrate run-job``) against
Kafka's own ``kafka-consumer-groups --reset-offsets --from-file``.

Run by hand, never by the test suite; prints a table and ratios, asserts
nothing::

    .venv/bin/python bench/bench_migrate.py                      # 1,000 groups x 100 partitions
    .venv/bin/python bench/bench_migrate.py --groups 200 --peer-groups 5
    .venv/bin/python bench/bench_migrate.py --zookeeper H:P --bootstrap-servers H:P   # servers you run

What it does, in a working directory of its own (``--workdir``, default a new
``/tmp/zkcoord-bench-migrate-*``; it stays, with the reports and the peer's
output):

1. A sandbox (``zkcoord local up --state-dir <workdir>/sandbox``) unless
   servers are given; ``zkcoord local down`` at the end, on errors and Ctrl-C.
2. ``--topics`` topics of ``--partitions / --topics`` partitions each, with
   ``--records`` records per partition, so every log end is real.
3. Legacy offsets (random, 0 .. log end) for ``--groups`` groups ``grp-NNNN``
   and ``--peer-groups`` groups ``peer-NNNN`` of ``--partitions`` partitions
   each, in a ZooKeeper chroot of its own, one multi-op per group.
4. zkcoord, on one local SparkSession (its start is timed): ``plan`` twice
   (the first job pays the JVM's warm-up), ``apply`` (commits every offset
   to Kafka, moves every group to dual), ``verify``; each over the
   ``grp-`` groups only, each writing its Parquet + CSV report.
5. The peer on the ``peer-`` groups (``--peer-groups``, default as many as
   zkcoord's: the same job): ``--reset-offsets --from-file F --dry-run``
   (the plan's work), ``--execute`` (the apply's) and ``--describe`` (the
   committed offsets and lag: verify's), each in ONE invocation over all
   peer groups (a 4-column CSV, ``--group`` repeated); then the same three
   one JVM per group, as an operator runs it, over ``--peer-sample`` groups
   (each with that group's ``topic,partition,offset`` CSV).

Reading it: ``offsets/s`` is partitions handled per second of wall time.
``end to end`` rows: plan, apply and verify each handle every offset, so
3 x groups x partitions offsets over the sum of the three steps' wall times;
zkcoord's includes the SparkSession start and the cold first plan job
(``warm session``: the second plan job, no start; the session row says
whether the driver JVM mapped the class-data-sharing archive an earlier
session saved, or has none yet and saves it when this run ends, see
``zkcoord.migrate.spark_cds``); the peer's is its three
one-JVM runs. The goals are judged on the apply and end-to-end rows.
``job`` rows time what ``run_job`` does: list the groups, run the tasks,
write the Parquet and CSV report, collect the totals; ``cold`` adds the
SparkSession start to the first job, which is what one CLI invocation pays.
On a 2-core machine ZooKeeper, Kafka, the Spark JVM and two Python workers
share the cores: look at the load the script prints before believing small
differences.
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
from zkcoord.migrate.spark_job import JobConfig, run_job, spark_session  # noqa: E402
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

    def start(self) -> None:
        if not self.zookeeper:
            print(f"starting the sandbox in {self.state_dir} ...", flush=True)
            self._started = True
            self._cli("local", "up", "--state-dir", str(self.state_dir))
            env = dict(re.findall(r"export (\w+)=(\S+)", self._cli("local", "env", "--state-dir", str(self.state_dir))))
            self.zookeeper, self.bootstrap = env["ZKCOORD_ZOOKEEPER"], env["ZKCOORD_BOOTSTRAP_SERVERS"]

    @property
    def hosts(self) -> str:
        return self.zookeeper + self.chroot

    def stop(self) -> None:
        if self._started:
            print("taking the sandbox down ...", flush=True)
            self._cli("local", "down", "--state-dir", str(self.state_dir))


# ------------------------------------------------------------------ seeding
def seed(services: Services, args: argparse.Namespace) -> dict[str, dict[tuple[str, int], int]]:
    """Topics with records, then legacy offsets; returns every group's offsets."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic
    from kazoo.client import KazooClient

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

    rnd = random.Random(42)
    names = [f"grp-{i:04d}" for i in range(args.groups)] + [f"peer-{i:04d}" for i in range(args.peer_groups)]
    offsets = {g: {(t, p): rnd.randint(0, args.records) for t in topics for p in range(per_topic)} for g in names}
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
            for topic in topics:
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
              f"(one multi-op per group)")
    finally:
        zk.stop()
        zk.close()
    return offsets


# ------------------------------------------------------------------ zkcoord
def run_zkcoord(services: Services, args: argparse.Namespace, workdir: Path) -> list[Row]:
    rows = []
    started = time.perf_counter()
    with spark_session(args.spark_master) as spark:
        spark_start = time.perf_counter() - started
        rows.append(Row("spark session start", 0, 0, spark_start,
                        f"{spark.sparkContext.master}; {_class_archive(spark)}"))
        for name, mode in (("plan (first job)", "plan"), ("plan", "plan"), ("apply", "apply"),
                           ("verify", "verify")):
            config = JobConfig(services.hosts, services.bootstrap, Selection(pattern="grp-.*"),
                               str(workdir / f"report-{name.split()[0]}-{len(rows)}"), mode=mode,
                               spark_partitions=args.spark_partitions, batch_groups=args.batch_groups,
                               apply_concurrency=args.apply_concurrency, zk_reads=args.zk_reads,
                               timeout_ms=60_000)
            print(f"zkcoord {name} ...", flush=True)
            result = run_job(config, spark)
            note = ", ".join(f"{n} {s}" for s, n in result.statuses.items())
            if result.outcomes:
                note += "; groups: " + ", ".join(f"{n} {s}" for s, n in result.outcomes.items())
            rows.append(Row(f"zkcoord {name} job", result.groups_selected, result.totals.partitions,
                            result.elapsed_s, f"{result.spark_partitions} Spark partitions; {note}"))
            if name == "plan (first job)":
                rows.append(Row("zkcoord plan cold (start + first job)", result.groups_selected,
                                result.totals.partitions, spark_start + result.elapsed_s, "one CLI invocation"))
    return rows


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
        return "class archive: none yet (this session makes it)"
    return "class archive: off"


def run_single_process(services: Services, args: argparse.Namespace) -> Row:
    """``migrate plan --all`` without Spark: gather_plan, one process, one znode per read."""
    async def work():
        conn = ZkConnection(services.hosts, request_timeout_ms=60_000)
        async with conn:
            with KafkaOffsets(services.bootstrap, request_timeout_ms=60_000) as kafka:
                return await gather_plan(LegacyOffsets(conn), kafka, Selection(pattern="grp-.*"))
    started = time.perf_counter()
    plan = asyncio.run(work())
    return Row("zkcoord plan, single process (gather_plan)", plan.totals.groups, plan.totals.partitions,
               time.perf_counter() - started, "migrate plan's path, no Spark")


# ------------------------------------------------------------------ the peer
def run_peer(services: Services, offsets: dict, workdir: Path, java: str, classpath: str, sample: int) -> list[Row]:
    """The tool's three steps over every ``peer-`` group, each in ONE JVM (its best case, what an
    operator scripting many groups does); then the first ``sample`` groups one JVM per group."""
    peers = sorted(g for g in offsets if g.startswith("peer-"))
    if not peers:
        return []
    files = workdir / "peer"
    files.mkdir(exist_ok=True)
    for group in peers:
        (files / f"{group}.csv").write_text("".join(f"{t},{p},{o}\n" for (t, p), o in sorted(offsets[group].items())))
    (files / "all.csv").write_text("".join(f"{g},{t},{p},{o}\n" for g in peers
                                           for (t, p), o in sorted(offsets[g].items())))
    base = [java, "-cp", classpath, PEER_CLASS, "--bootstrap-server", services.bootstrap]
    steps = (("--reset-offsets --dry-run", ["--reset-offsets", "--dry-run"]),
             ("--reset-offsets --execute", ["--reset-offsets", "--execute"]),
             ("--describe", ["--describe"]))
    rows = []
    everyone = [a for g in peers for a in ("--group", g)]
    for name, extra in steps:
        print(f"kafka-consumer-groups {name}, one JVM for {len(peers)} groups ...", flush=True)
        command = base + everyone + extra
        if "--reset-offsets" in extra:
            command += ["--from-file", str(files / "all.csv")]
        started = time.perf_counter()
        _peer(command, files / f"all{extra[-1]}.out")
        rows.append(Row(f"kafka-consumer-groups {name} (one JVM)", len(peers), _count(offsets, peers),
                        time.perf_counter() - started, "all peer groups in one invocation"))
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
E2E = "zkcoord plan + apply + verify, end to end"
E2E_WARM = "zkcoord plan + apply + verify, warm session"
PEER_E2E = "kafka-consumer-groups dry-run + execute + describe"


def end_to_end(rows: list[Row]) -> list[Row]:
    """The whole job's rows: every offset each step handled (plan, apply and verify each handle all
    of them) over the sum of the steps' wall times. zkcoord's includes the SparkSession start and
    the first, cold plan job (what one session running the three steps pays); the warm variant
    uses the second plan job and no start. The peer's adds its three one-JVM runs."""
    by_name = {row.name: row for row in rows}
    found = []
    for name, parts, note in (
            (E2E, ("spark session start", "zkcoord plan (first job) job", "zkcoord apply job", "zkcoord verify job"),
             "session start + cold plan + apply + verify"),
            (E2E_WARM, ("zkcoord plan job", "zkcoord apply job", "zkcoord verify job"), "three jobs, no start"),
            (PEER_E2E, tuple(f"kafka-consumer-groups {step} (one JVM)" for step in
                             ("--reset-offsets --dry-run", "--reset-offsets --execute", "--describe")),
             "three invocations, one JVM each")):
        if all(part in by_name for part in parts):
            chosen = [by_name[part] for part in parts]
            groups = max(row.groups for row in chosen)
            found.append(Row(name, groups, sum(row.offsets for row in chosen), sum(row.seconds for row in chosen),
                             note))
    return found


def report(rows: list[Row], load: tuple[float, float]) -> None:
    rows = rows + end_to_end(rows)
    print()
    print(f"load average before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} cores")
    print(f"{'run':58} {'groups':>7} {'offsets':>9} {'seconds':>9} {'offsets/s':>11}  note")
    for row in rows:
        rate = f"{row.rate:,.0f}" if row.offsets else "-"
        print(f"{row.name:58} {row.groups:>7,} {row.offsets:>9,} {row.seconds:>9.2f} {rate:>11}  {row.note}")
    by_name = {row.name: row for row in rows}
    once = "kafka-consumer-groups {} (one JVM)"
    each = "kafka-consumer-groups {} (per group)"
    pairs = [("zkcoord plan job", once.format("--reset-offsets --dry-run")),
             ("zkcoord apply job", once.format("--reset-offsets --execute")),
             ("zkcoord verify job", once.format("--describe")),
             (E2E, PEER_E2E),
             (E2E_WARM, PEER_E2E),
             ("zkcoord plan job", each.format("--reset-offsets --dry-run")),
             ("zkcoord apply job", each.format("--reset-offsets --execute")),
             ("zkcoord verify job", each.format("--describe")),
             ("zkcoord plan job", "zkcoord plan, single process (gather_plan)")]
    print("\nratios (offsets/s, higher favours the left):")
    for left, right in pairs:
        if left in by_name and right in by_name and by_name[right].rate:
            print(f"  {left:45} / {right:58} {by_name[left].rate / by_name[right].rate:8.1f}x")
    print("\ngoals (against the peer's one-JVM runs over the same groups):")
    for left, right in (("zkcoord apply job", once.format("--reset-offsets --execute")), (E2E, PEER_E2E)):
        if left in by_name and right in by_name and by_name[right].rate:
            ratio = by_name[left].rate / by_name[right].rate
            print(f"  {left} >= 10x {right}: {ratio:,.1f}x {'met' if ratio >= 10 else 'MISSED'}")
    for name in (E2E, E2E_WARM, "zkcoord apply job"):
        if name in by_name:
            rate = by_name[name].rate
            print(f"  {name} >= 20,000 offsets/s: {rate:,.0f}/s {'met' if rate >= 20_000 else 'MISSED'}")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=1000, help="zkcoord's groups (default 1000)")
    parser.add_argument("--partitions", type=int, default=100, help="partitions per group (default 100)")
    parser.add_argument("--topics", type=int, default=10, help="topics they spread over (default 10)")
    parser.add_argument("--records", type=int, default=100, help="records per partition (default 100)")
    parser.add_argument("--peer-groups", type=int, default=None,
                        help="groups the peer runs on, each step in one JVM (default: --groups, the same job; "
                             "0: no peer runs)")
    parser.add_argument("--peer-sample", type=int, default=5,
                        help="of those, how many the peer also runs one JVM per group (default 5, ~1 s each)")
    parser.add_argument("--spark-master", default=None, help="default local[*]")
    parser.add_argument("--spark-partitions", type=int, default=None)
    parser.add_argument("--batch-groups", type=int, default=100)
    parser.add_argument("--apply-concurrency", type=int, default=4)
    parser.add_argument("--zk-reads", choices=("auto", "multi", "single"), default="auto")
    parser.add_argument("--no-single-process", action="store_true", help="skip the gather_plan reference run")
    parser.add_argument("--zookeeper", default=None, help="use this ZooKeeper instead of a sandbox")
    parser.add_argument("--bootstrap-servers", default=None, help="with --zookeeper: Kafka to use")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    if args.peer_groups is None:
        args.peer_groups = args.groups
    if bool(args.zookeeper) != bool(args.bootstrap_servers):
        parser.error("give both --zookeeper and --bootstrap-servers, or neither (then a sandbox is started)")
    return args


def main() -> None:
    args = parse()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="zkcoord-bench-migrate-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"working directory: {workdir}")
    java, classpath = find_java(), kafka_distribution(print).classpath
    services = Services(args, workdir)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    load_before = os.getloadavg()[0]
    try:
        services.start()
        offsets = seed(services, args)
        rows = run_zkcoord(services, args, workdir)
        if not args.no_single_process:
            print("zkcoord plan, single process ...", flush=True)
            rows.append(run_single_process(services, args))
        rows += run_peer(services, offsets, workdir, java, classpath, args.peer_sample)
        report(rows, (load_before, os.getloadavg()[0]))
    finally:
        services.stop()


if __name__ == "__main__":
    main()
