"""The migration toolkit's Spark job: plan, verify or apply many groups at once.

This module owns the driver side of the job: the Spark session
(:func:`spark_session`), listing and selecting the legacy groups, spreading
them over Spark partitions, running :func:`zkcoord.migrate.spark_tasks.run_partition`
on each, writing the report, collecting the totals (:func:`run_job`), and
reporting progress to a callback (the CLI draws the bar). What a task does is
in :mod:`zkcoord.migrate.spark_tasks`.

Where it runs:

* **local** (default, no set-up): ``local[*]``, Spark UI off, small shuffle,
  1 GiB driver compiling with C1 only (``_LOCAL_JVM_OPTIONS``) and mapping
  its classes from a class-data-sharing archive made by its first run
  (:mod:`zkcoord.migrate.spark_cds`), Spark's own logging at ERROR, Python
  workers on this interpreter. Fits a 2-core machine.
* **a cluster**: ``master="spark://host:7077"`` (or ``yarn``, ``k8s://...``)
  from a machine where zkcoord is installed (client mode): the zkcoord
  package is zipped and shipped with ``addPyFile``; executors need Python
  3.11+ with kazoo and kafka-python (``pip install zkcoord`` on them brings
  all three, and then ``ship_package=False``).
* **spark-submit**: ``spark-submit --master URL [--deploy-mode cluster]
  --py-files zkcoord.zip <site-packages>/zkcoord/__main__.py migrate run-job
  ...`` (``zip -r zkcoord.zip zkcoord`` from the source tree; the driver needs
  it only in cluster deploy mode): the session spark-submit made is used as
  it is, with spark-submit's master.

A session that was already running (tests, notebooks, spark-submit) is used
and left running; one this module started is stopped.

The report (``report_dir`` must be reachable by the driver and every
executor: a local path in local mode, HDFS/S3/NFS on a cluster)::

    <report_dir>/partitions.parquet/   one row per partition (REPORT_COLUMNS)
    <report_dir>/partitions.csv        the same rows sorted by group, topic, partition, with a header
    <report_dir>/groups.csv            group notes and errors: group, kind (note|error), message

Both CSVs are single files when the report dir is local and so is the master
(the default); elsewhere they are Spark's directories of ``part-*.csv``
files, each with a header line (:mod:`zkcoord.migrate.spark_report`, which
also merges the local ones).

Rules:

1. The tasks run once: the Parquet write is the only action over them; the
   CSV is written from the Parquet files (then merged into one file on the
   driver, for a local report), and the totals come from an accumulator
   filled by those same tasks. A task Spark retries after a
   failure applies again from where the groups are (apply is resumable);
   apply refuses speculative execution, which would run a task twice at once.
2. An existing report is never overwritten without ``overwrite``; this is
   checked before any task runs.
3. A task's ZkcoordError comes back as the same error class and message;
   anything else as a ZkcoordError naming the job.
4. Progress comes from the tasks themselves (a line to the driver after each
   batch of groups), so the bar moves during a task, not only when one ends;
   task counts come from Spark's StatusTracker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zkcoord
from zkcoord import errors
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.migration import Decision, Options, Totals
from zkcoord.errors import UsageError, ZkcoordError
from zkcoord.kafka.offsets import check_bootstrap_servers
from zkcoord.zk.legacy import LegacyOffsets
from zkcoord.migrate.plan import Selection, select_groups
from zkcoord.migrate.spark_cds import ClassArchive, class_archive
from zkcoord.migrate.spark_report import GROUPS_COLUMNS, ReportPaths, check_report, discard, plan_report, publish
from zkcoord.migrate.status import MigrationStore
from zkcoord.migrate.spark_tasks import MODES, REPORT_COLUMNS, JobSummary, SummaryParam, TaskSpec, no_rows, \
    run_partition
from zkcoord.zk.auth import ZkSecurity
from zkcoord.zk.connection import ZkConnection, parse_hosts
from zkcoord.zk import paths
from zkcoord.zk.paths import OffsetPaths

if TYPE_CHECKING:
    from zkcoord.kafka.client_security import KafkaClientSecurity

__all__ = ["JobConfig", "JobProgress", "JobResult", "ReportPaths", "Steps", "spark_session", "run_job", "LOCAL_CONF"]

log = logging.getLogger(__name__)

LOCAL_MASTER = "local[*]"
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "1g",
    "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.python.worker.reuse": "true",
    "spark.python.daemon.module": "zkcoord.migrate.spark_daemon",  # imports once, from bytecode (its docstring)
}
# The embedded driver JVM compiles with C1 only: a job moves a few hundred thousand rows, so the JIT's
# C2 warm-up costs more CPU than it saves. Measured on the 2-core development machine: session start
# 3.7-4.3 s instead of 5.6-17 s, the first job 6.3-6.7 s instead of 8.8-14 s, a warm job no slower.
# C1 also starts sooner than its defaults (a method is compiled after 100 calls or 500 calls and
# loops, not 200 and 2,000): the first job interprets less. Measured with the class archive, on the
# same machine: the first job's JVM CPU 3.4-4.1 s -> 2.7-3.1 s and 0.5-0.9 s shorter, warm jobs the same.
_LOCAL_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1 -XX:Tier3InvocationThreshold=100 -XX:Tier3MinInvocationThreshold=50 "
                      "-XX:Tier3CompileThreshold=500 -XX:Tier3BackEdgeThreshold=6000")
_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
"""
_TASK_ERROR = re.compile(r"^(zkcoord(?:\.\w+)*)\.(\w+): (.+)$", re.MULTILINE)
_POLL_S = 0.2
_WORKERS_WAIT_S = 30.0
# RFC 4180 quoting (what Python's csv reads), values kept as they are (legacy " 25\n" stays that)
_CSV = {"header": True, "escape": '"', "ignoreLeadingWhiteSpace": False, "ignoreTrailingWhiteSpace": False}


@dataclass(frozen=True)
class JobConfig:
    """One run of the job; validated on construction, before any I/O."""

    zookeeper: str
    bootstrap_servers: str
    selection: Selection
    report_dir: str
    mode: str = "plan"
    zk_root: str = "/consumers"
    options: Options = Options()
    allow_active_kafka_members: bool = False  # apply
    record_verify: bool = True  # verify: write each result into the group's migration record
    timeout_ms: int = 15_000
    spark_partitions: int | None = None  # None: Spark's default parallelism
    batch_groups: int = 100
    apply_concurrency: int = 4
    zk_reads: str = "auto"
    overwrite: bool = False
    # The ZooKeeper login and ACLs of the driver and every task; ZkSecurity.loaded() when the executors
    # cannot read its JAAS file (the Password in it pickles; it is never in the report or a log line).
    zk_security: ZkSecurity | None = None
    # The Kafka login of every task; zkcoord.kafka.login.portable() when the executors cannot read its stores.
    kafka_security: KafkaClientSecurity | None = None

    def __post_init__(self) -> None:
        parse_hosts(self.zookeeper)
        check_bootstrap_servers(self.bootstrap_servers)
        OffsetPaths(self.zk_root)
        if self.mode not in MODES:
            raise UsageError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if not isinstance(self.report_dir, str) or not self.report_dir.strip():
            raise UsageError("the report directory is empty; give --report-dir DIR")
        if self.spark_partitions is not None and (isinstance(self.spark_partitions, bool) or not isinstance(
                self.spark_partitions, int) or not 1 <= self.spark_partitions <= 100_000):
            raise UsageError(f"--spark-partitions must be from 1 to 100000, got {self.spark_partitions!r}")
        self.task_spec()  # validates batch_groups and zk_reads

    def task_spec(self, progress_address: tuple[str, int] | None = None, token: str = "",
                  absent: frozenset[str] = frozenset()) -> TaskSpec:
        return TaskSpec(self.zookeeper, self.bootstrap_servers, self.zk_root, self.mode, self.options,
                        self.allow_active_kafka_members, self.record_verify, self.timeout_ms, self.batch_groups,
                        self.apply_concurrency, self.zk_reads, bool(self.selection.groups), absent,
                        progress_address, token, self.zk_security, self.kafka_security)


@dataclass(frozen=True)
class JobProgress:
    """What the job has done so far (``offsets_done``: partition rows decided)."""

    groups_done: int
    groups_total: int
    offsets_done: int
    tasks_done: int
    tasks_total: int
    elapsed_s: float


@dataclass(frozen=True)
class JobResult:
    """Totals as :func:`~zkcoord.core.migration.make_plan` computes them over
    the groups read; ``error_groups`` could not be read (see ``errors``);
    ``outcomes``: verify ``clean`` / ``behind`` / ``not-migrated`` /
    ``not-verified``, apply :attr:`ApplyResult.outcome` counts."""

    mode: str
    groups_selected: int
    totals: Totals
    error_groups: int
    statuses: Mapping[str, int]
    outcomes: Mapping[str, int]
    notes: tuple[tuple[str, str], ...]
    errors: tuple[tuple[str, str], ...]
    report: ReportPaths
    spark_master: str
    spark_partitions: int
    elapsed_s: float
    options: Options = field(default_factory=Options)


ProgressCallback = Callable[[JobProgress], None]
# The slow steps of a session, ``steps(what, message)`` around each: ``start`` (the JVM and the
# Python workers) and, on a first local run only, ``class-archive`` (its class archive saved while
# the session ends). The CLI shows ``message`` while it runs and times it.
Steps = Callable[[str, str], contextlib.AbstractContextManager[None]]


def _no_steps(what: str, message: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


# ------------------------------------------------------------------ the session
def _is_local(master: str | None) -> bool:
    return master is None or master == "local" or master.startswith("local[")


@contextlib.contextmanager
def spark_session(master: str | None = None, *, app_name: str = "zkcoord-migrate",
                  ship_package: bool | None = None, conf: Mapping[str, str] | None = None,
                  steps: Steps = _no_steps) -> Iterator[Any]:
    """A SparkSession for the job: ``master`` None means ``local[*]``, or
    spark-submit's master when run under spark-submit. ``ship_package``
    (default: when the master is not local) adds a zip of zkcoord to the
    executors' Python path. A session already running is used and not stopped.
    ``steps`` is told of the start and of saving the class archive (:data:`Steps`)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:
        yield SparkSession.builder.getOrCreate()
        return
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM and chose the master
    builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
    if master is not None or not submitted:
        builder = builder.master(master or LOCAL_MASTER)
    archive = ClassArchive("off")
    java_options = ""
    if _is_local(master) and not submitted:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import zkcoord and its dependencies
        for key, value in LOCAL_CONF.items():
            builder = builder.config(key, value)
        java_options = f"-Dlog4j2.configurationFile={_log4j2_file()} {_LOCAL_JVM_OPTIONS}"
        if "spark.driver.extraJavaOptions" not in (conf or {}):  # the caller's own JVM options: no archive
            memory = (conf or {}).get("spark.driver.memory", LOCAL_CONF["spark.driver.memory"])
            archive = class_archive(f"{java_options} -Xmx{memory}")
        builder = builder.config("spark.driver.extraJavaOptions", f"{java_options} {archive.java_options()}".strip())
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    local = _is_local(master) and not submitted
    workdir = Path(tempfile.mkdtemp(prefix="zkcoord-spark-"))
    if local and "spark.local.dir" not in (conf or {}):
        # Spark's scratch (spark-*, blockmgr-*) inside the session's own folder, removed with it.
        builder = builder.config("spark.local.dir", str(workdir / "local"))
    starting = f"starting Spark ({master or LOCAL_MASTER})"
    if archive.mode == "create":
        starting += ("; the first run with this Java and Spark also saves a class archive of the JVM when the job "
                     "ends (once: later runs map it and start faster)")
    try:
        try:
            with steps("start", starting):
                try:
                    spark = _create(builder, local)
                except Exception:
                    if archive.mode != "use":
                        raise
                    archive.discard()  # a damaged archive must not keep Spark from starting
                    spark = _create(builder.config("spark.driver.extraJavaOptions", java_options), local)
        except Exception as exc:
            raise errors.ServiceUnavailableError(
                f"cannot start Spark (master {master or LOCAL_MASTER}): {_first_line(exc)}; check the master URL "
                "and that Java 17+ is installed") from None
        try:
            spark.sparkContext.setLogLevel("ERROR")
            if ship_package if ship_package is not None else not spark.sparkContext.master.startswith("local"):
                spark.sparkContext.addPyFile(str(_package_zip(workdir)))
            yield spark
        finally:
            if archive.mode == "create":  # first run only: the archive holds the classes loaded by now
                with steps("class-archive", f"saving the Spark JVM's class archive {archive.path} (once: later "
                                            "runs with this Java and Spark map it and start faster)"):
                    _exercise_report(spark, workdir)
                    spark.stop()
                    archive.finish(SparkContext)  # the JVM exits and writes it; checked, then kept
            else:
                spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _create(builder: Any, local: bool) -> Any:
    """``builder.getOrCreate()``; for a local master, the Python workers are started
    (one task per core, no rows) while the SparkSession is made: that is JVM work on
    one thread, and the workers' start (a daemon that imports the task modules, then
    one fork per core) would otherwise be the first job's. The builder makes its
    SparkContext the same way: from a SparkConf of the builder's options."""
    options = getattr(builder, "_options", None)  # pyspark's own (3.5 and 4.x): what getOrCreate reads
    if not local or not isinstance(options, dict):
        return builder.getOrCreate()
    from pyspark import SparkConf, SparkContext

    conf = SparkConf()
    for key, value in options.items():
        conf.set(key, value)
    sc = SparkContext.getOrCreate(conf)
    warm = threading.Thread(target=_start_workers, args=(sc,), name="zkcoord-spark-workers", daemon=True)
    warm.start()
    try:
        return builder.getOrCreate()  # finds that SparkContext and makes the session on it
    finally:
        warm.join(_WORKERS_WAIT_S)


def _exercise_report(spark: Any, workdir: Path) -> None:
    """A two-row report written as a job writes one (Python rows -> Parquet -> sorted CSV, and a groups
    CSV), into ``workdir``: before a first session's JVM saves its class archive, so the archive holds
    the classes a job needs even when that session ran none (or failed early). Never raises."""
    try:
        rows = [("g", "t", p, "1", None, 0, 2, "copy", 1, "", "write") for p in (1, 0)]
        base = (workdir / "warm-up").resolve().as_uri()
        frame = spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), _schema(), verifySchema=False)
        frame.write.parquet(f"{base}/partitions.parquet")
        (spark.read.schema(_schema()).parquet(f"{base}/partitions.parquet").coalesce(1)
         .sortWithinPartitions("group", "topic", "partition").write.options(**_CSV).csv(f"{base}/partitions.csv"))
        _write_groups(spark, JobSummary(notes=[("g", "note")]), f"{base}/groups.csv", "errorifexists")
    except Exception:
        log.debug("the report exercise before saving the class archive failed", exc_info=True)


def _start_workers(sc: Any) -> None:
    try:
        slots = max(1, sc.defaultParallelism)
        sc.parallelize(range(slots), slots).mapPartitions(no_rows).count()
    except Exception:  # only a head start: the job starts the workers itself
        log.debug("starting the Python workers ahead of the job failed", exc_info=True)


def _log4j2_file() -> Path:
    """The driver JVM's log4j2 settings, in the cache (not the temp folder: a
    run leaves nothing there), at a path that stays the same from run to run
    (the JVM options are part of what the class archive is made for)."""
    from zkcoord.local.jars import cache_dir

    path = cache_dir() / "spark-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_LOG4J2)
    return path


def _package_zip(workdir: Path) -> Path:
    """A zip of the zkcoord package, for executors that do not have it installed."""
    package = Path(zkcoord.__file__).resolve().parent
    target = workdir / "zkcoord.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, path.relative_to(package.parent))
    return target


# ------------------------------------------------------------------ the job
def run_job(config: JobConfig, spark: Any, on_progress: ProgressCallback | None = None) -> JobResult:
    """List the groups, run the tasks, write the report; the totals.

    Raises the tasks' ZkcoordError (ZooKeeper or Kafka unreachable ...),
    UsageError if the report exists and ``overwrite`` is false.
    """
    started = time.monotonic()
    sc = spark.sparkContext
    if config.mode == "apply" and sc.getConf().get("spark.speculation", "false").lower() == "true":
        raise UsageError("apply refuses to run with spark.speculation=true: two copies of a task would apply the "
                         "same groups at once; turn speculation off for this job")
    report = plan_report(config.report_dir, sc.master)
    check_report(sc, report, config.overwrite)
    groups, absent = asyncio.run(_list_groups(config))
    slices = max(1, min(config.spark_partitions or sc.defaultParallelism, len(groups) or 1))
    summary = sc.accumulator(JobSummary(), SummaryParam())
    job_group = f"zkcoord-{config.mode}-{uuid.uuid4().hex[:8]}"
    server = _ProgressServer("127.0.0.1" if sc.master.startswith("local") else "0.0.0.0")
    address = ("127.0.0.1" if sc.master.startswith("local") else sc.getConf().get("spark.driver.host"),
               server.port)
    spec = config.task_spec(address, server.token, absent)
    poller = _Poller(sc, job_group, server, len(groups), on_progress, started)
    done = False
    try:
        server.start()
        poller.start()
        sc.setJobGroup(job_group, f"zkcoord migrate {config.mode} of {len(groups)} group(s)")
        rows = sc.parallelize(groups, slices).mapPartitions(partial(run_partition, spec, summary))
        frame = spark.createDataFrame(rows, _schema(), verifySchema=False)
        mode = "overwrite" if config.overwrite else "errorifexists"
        _translated(lambda: frame.write.mode(mode).parquet(report.parquet_uri))
        tasks_done = time.monotonic()
        found: JobSummary = summary.value
        # the two CSV writes are one task each: side by side they use two cores instead of one after the other
        with ThreadPoolExecutor(1, thread_name_prefix="zkcoord-groups-csv") as pool:
            groups_csv = pool.submit(_write_groups, spark, found, report.groups_csv_uri, mode)
            try:
                written = spark.read.schema(_schema()).parquet(report.parquet_uri)  # the schema known: no footer read
                _translated(lambda: written.coalesce(1).sortWithinPartitions("group", "topic", "partition").write
                            .mode(mode).options(**_CSV).csv(report.csv_uri))
            finally:
                csv_done = time.monotonic()
                wait([groups_csv])
            groups_csv.result()
        groups_done = time.monotonic()
        publish(report, REPORT_COLUMNS, config.overwrite)
        log.debug("%s job: tasks + Parquet %.2f s, CSV %.2f s, then groups CSV %.2f s, merge %.2f s", config.mode,
                  tasks_done - started, csv_done - tasks_done, groups_done - csv_done, time.monotonic() - groups_done)
        done = True
    finally:
        poller.stop(final=done)
        server.close()
        discard(report)  # what a failed job left in a local report's staging directories
    return _result(config, found, len(groups), report.paths, sc.master, slices, time.monotonic() - started)


async def _list_groups(config: JobConfig) -> tuple[list[str], frozenset[str]]:
    """The selected groups, and those of them absent from the legacy root.

    plan and apply choose among the legacy groups; verify among the groups
    with a migration record (named groups: any), as ``migrate verify`` does.
    """
    conn = ZkConnection(config.zookeeper, connect_timeout_ms=config.timeout_ms,
                        request_timeout_ms=config.timeout_ms, fail_when_refused=True,
                        security=config.zk_security)  # the command's own
    async with conn:
        legacy = LegacyOffsets(conn, config.zk_root)
        if config.mode != "verify":
            return await select_groups(legacy, config.selection), frozenset()
        recorded = await MigrationStore(conn).list_groups()
        selection = config.selection
        candidates = set(recorded) | set(selection.groups) if selection.groups else recorded
        chosen = selection.choose(candidates, paths.MIGRATIONS)
        return chosen, frozenset(chosen) - set(await legacy.list_groups())


def _schema():
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    types = {"partition": IntegerType(), "kafka": LongType(), "log_start": LongType(), "log_end": LongType(),
             "target": LongType()}
    return StructType([StructField(name, types.get(name, StringType()), nullable=name != "group")
                       for name in REPORT_COLUMNS])


def _write_groups(spark: Any, found: JobSummary, path: str, mode: str) -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    rows = [(g, "error", text) for g, text in found.errors] + [(g, "note", text) for g, text in found.notes]
    schema = StructType([StructField(name, StringType(), False) for name in GROUPS_COLUMNS])
    frame = spark.createDataFrame(sorted(rows), schema)
    _translated(lambda: frame.coalesce(1).write.mode(mode).options(**_CSV).csv(path))


def _result(config: JobConfig, found: JobSummary, selected: int, report: ReportPaths, master: str, slices: int,
            elapsed_s: float) -> JobResult:
    totals = Totals(found.groups, found.partitions, found.to_write, found.flagged, found.active_groups,
                    FrozenMap({d: found.by_decision.get(d.value, 0) for d in Decision}))
    return JobResult(config.mode, selected, totals, found.error_groups, dict(sorted(found.by_status.items())),
                     dict(sorted(found.outcomes.items())), tuple(sorted(found.notes)), tuple(sorted(found.errors)),
                     report, master, slices, elapsed_s, config.options)


def _translated(action: Callable[[], Any]) -> Any:
    """Run a Spark action; its failure as the ZkcoordError it was (rule 3)."""
    try:
        return action()
    except ZkcoordError:
        raise
    except Exception as exc:
        raise _task_error(exc) from None


def _task_error(exc: BaseException) -> ZkcoordError:
    text = str(exc)
    if "PATH_ALREADY_EXISTS" in text:
        return UsageError(f"the report already exists ({_first_line(exc)}); choose another --report-dir or pass "
                          "--overwrite")
    found = _TASK_ERROR.findall(text)
    if found:
        module, name, message = found[-1]
        kind = getattr(errors, name, None)
        if not (isinstance(kind, type) and issubclass(kind, ZkcoordError)):
            kind = ZkcoordError
        return kind(message.strip())
    log.debug("the Spark job failed: %s", text)
    return ZkcoordError(f"the Spark job failed: {_first_line(exc)} (run with -vv for Spark's whole message)")


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__


# ------------------------------------------------------------------ progress
class _ProgressServer:
    """Counts the ``<token> <groups> <offsets>`` lines tasks send (see
    :class:`~zkcoord.migrate.spark_tasks.ProgressReporter`); lines without
    this run's token are ignored."""

    def __init__(self, host: str) -> None:
        self.token = secrets.token_hex(16)
        self._sock = socket.create_server((host, 0))
        self.port = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self.groups = self.offsets = 0
        self._closed = False

    def start(self) -> None:
        threading.Thread(target=self._accept, name="zkcoord-progress", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), name="zkcoord-progress-task", daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        with conn, conn.makefile("r", encoding="ascii", errors="replace") as lines:
            for line in lines:
                token, _, counts = line.partition(" ")
                numbers = counts.split()
                if token != self.token or len(numbers) != 2 or not all(n.isdigit() for n in numbers):
                    return
                with self._lock:
                    self.groups += int(numbers[0])
                    self.offsets += int(numbers[1])

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.groups, self.offsets

    def close(self) -> None:
        self._closed = True
        self._sock.close()


class _Poller:
    """Calls ``on_progress`` every 0.2 s with the tasks' counts and Spark's task counts."""

    def __init__(self, sc: Any, job_group: str, server: _ProgressServer, total: int,
                 on_progress: ProgressCallback | None, started: float) -> None:
        self._sc, self._job_group, self._server = sc, job_group, server
        self._total, self._on_progress, self._started = total, on_progress, started
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._on_progress is not None:
            self._thread = threading.Thread(target=self._run, name="zkcoord-progress-poll", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(_POLL_S):
            self._emit()

    def _tasks(self) -> tuple[int, int]:
        done = total = 0
        try:
            tracker = self._sc.statusTracker()
            for job_id in sorted(tracker.getJobIdsForGroup(self._job_group))[:1]:  # the job running the tasks
                job = tracker.getJobInfo(job_id)
                for stage_id in (job.stageIds if job else ()):
                    stage = tracker.getStageInfo(stage_id)
                    if stage is not None:
                        done, total = done + stage.numCompletedTasks, total + stage.numTasks
        except Exception:  # the tracker is a nicety; a stopping context must not break the job
            log.debug("Spark status tracker failed", exc_info=True)
        return done, total

    def _emit(self, final: bool = False) -> None:
        groups, offsets = self._server.counts()
        tasks_done, tasks_total = self._tasks()
        if final:
            groups = self._total
        try:
            self._on_progress(JobProgress(min(groups, self._total), self._total, offsets, tasks_done, tasks_total,
                                          time.monotonic() - self._started))
        except Exception:
            log.exception("the progress callback failed")

    def stop(self, final: bool = False) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            if final:
                self._emit(final=True)
