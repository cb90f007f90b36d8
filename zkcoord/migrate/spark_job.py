"""The migration toolkit's Spark job: plan, verify or apply many groups at once.

This module owns the driver side of the job: the Spark session
(:func:`spark_session`), listing and selecting the legacy groups, spreading
them over Spark partitions, running :func:`zkcoord.migrate.spark_tasks.run_partition`
on each, writing the report, collecting the totals (:func:`run_job`), and
reporting progress to a callback (the CLI draws the bar). What a task does is
in :mod:`zkcoord.migrate.spark_tasks`.

Where it runs (the session, and how zkcoord reaches the executors):
:mod:`zkcoord.migrate.spark_session`, whose :func:`spark_session` this
module re-exports. Under ``spark-submit`` the session spark-submit made is
used as it is::

    echo 'from zkcoord.cli.main import main; main()' > zkcoord_driver.py
    spark-submit --master spark://host:7077 --py-files zkcoord.zip \
        zkcoord_driver.py migrate run-job --mode plan --all ...

(``zip -r zkcoord.zip zkcoord`` from the source tree; a driver script of its
own, because zkcoord's ``__main__.py`` run as a script puts the package's
folder first on the path, where ``zkcoord/inspect`` shadows Python's
``inspect``).

The report (``report_dir`` must be reachable by the driver and every
executor: a local path in local mode or on a standalone cluster on this
machine, HDFS/S3/NFS on a cluster; the executors write it)::

    <report_dir>/partitions.parquet/   one row per partition (REPORT_COLUMNS)
    <report_dir>/partitions.csv        the same rows sorted by group, topic, partition, with a header
    <report_dir>/groups.csv            group notes and errors: group, kind (note|error), message

Both CSVs are single files when the report dir is local and the executors
run on this machine (``local[*]``, the default, or the sandbox's
standalone cluster); elsewhere they are Spark's directories of ``part-*.csv``
files, each with a header line (:mod:`zkcoord.migrate.spark_report`, which
also merges the local ones).

Rules:

1. The tasks run once: the Parquet write is the only action over them, and
   the totals come from an accumulator filled by those same tasks. For a
   local report (the ``file`` layout) the tasks also write
   ``partitions.csv``'s parts as they yield the rows (the groups are sorted
   and sliced in order, so the parts in task order are the CSV's order) and
   the driver writes ``groups.csv``; elsewhere Spark writes both, the first
   from the Parquet files, sorted. A task Spark retries after a failure
   applies again from where the groups are (apply is resumable) and replaces
   its CSV part whole; apply refuses speculative execution, which would run
   a task twice at once.
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
import re
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from zkcoord import errors
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.migration import Decision, Options, Totals
from zkcoord.errors import UsageError, ZkcoordError
from zkcoord.kafka.offsets import check_bootstrap_servers
from zkcoord.zk.legacy import LegacyOffsets
from zkcoord.migrate.plan import Selection, select_groups
from zkcoord.migrate.spark_report import CSV_OPTIONS, GROUPS_COLUMNS, ReportPaths, ReportTargets, check_report, \
    discard, group_rows, plan_report, publish, report_schema, write_csv_file, write_groups
from zkcoord.migrate.status import MigrationStore
from zkcoord.migrate.spark_master import runs_here
from zkcoord.migrate.spark_session import LOCAL_CONF, Steps, first_line, report_written, spark_session
from zkcoord.migrate.spark_tasks import MODES, REPORT_COLUMNS, JobSummary, SummaryParam, TaskSpec, run_partition
from zkcoord.zk.auth import ZkSecurity
from zkcoord.zk.connection import ZkConnection, parse_hosts
from zkcoord.zk import paths
from zkcoord.zk.paths import OffsetPaths

if TYPE_CHECKING:
    from zkcoord.kafka.client_security import KafkaClientSecurity

__all__ = ["JobConfig", "JobProgress", "JobResult", "ReportPaths", "Steps", "spark_session", "run_job", "LOCAL_CONF"]

log = logging.getLogger(__name__)

_TASK_ERROR = re.compile(r"^(zkcoord(?:\.\w+)*)\.(\w+): (.+)$", re.MULTILINE)
_POLL_S = 0.2


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
                  absent: frozenset[str] = frozenset(), csv_dir: str | None = None) -> TaskSpec:
        return TaskSpec(self.zookeeper, self.bootstrap_servers, self.zk_root, self.mode, self.options,
                        self.allow_active_kafka_members, self.record_verify, self.timeout_ms, self.batch_groups,
                        self.apply_concurrency, self.zk_reads, bool(self.selection.groups), absent,
                        progress_address, token, csv_dir, self.zk_security, self.kafka_security)


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
    groups = sorted(groups)  # contiguous slices in order: the tasks' rows, part after part, are the CSV's order
    slices = max(1, min(config.spark_partitions or sc.defaultParallelism, len(groups) or 1))
    summary = sc.accumulator(JobSummary(), SummaryParam())
    job_group = f"zkcoord-{config.mode}-{uuid.uuid4().hex[:8]}"
    here = runs_here(sc.master)
    server = _ProgressServer("127.0.0.1" if here else "0.0.0.0")
    address = ("127.0.0.1" if here else sc.getConf().get("spark.driver.host"), server.port)
    csv_dir = report.staged[0].staging if report.staged else None  # a local report: the tasks write the CSV
    spec = config.task_spec(address, server.token, absent, str(csv_dir) if csv_dir else None)
    poller = _Poller(sc, job_group, server, len(groups), on_progress, started)
    done = False
    try:
        server.start()
        poller.start()
        sc.setJobGroup(job_group, f"zkcoord migrate {config.mode} of {len(groups)} group(s)")
        if csv_dir is not None:
            csv_dir.mkdir(parents=True, exist_ok=True)  # the merge finds it even when no task wrote a part
        rows = sc.parallelize(groups, slices).mapPartitionsWithIndex(partial(run_partition, spec, summary))
        frame = spark.createDataFrame(rows, report_schema(), verifySchema=False)
        mode = "overwrite" if config.overwrite else "errorifexists"
        _translated(lambda: frame.write.mode(mode).parquet(report.parquet_uri))
        tasks_done = time.monotonic()
        found: JobSummary = summary.value
        if csv_dir is not None:
            _write_groups_here(report, found)
        else:
            _write_csvs(spark, report, found, mode)
        csv_done = time.monotonic()
        publish(report, REPORT_COLUMNS, config.overwrite)
        report_written(spark)
        log.debug("%s job: tasks + Parquet %.2f s, CSVs %.2f s, merge %.2f s", config.mode, tasks_done - started,
                  csv_done - tasks_done, time.monotonic() - csv_done)
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


def _write_groups(spark: Any, found: JobSummary, path: str, mode: str) -> None:
    _translated(lambda: write_groups(spark, group_rows(found.errors, found.notes), path, mode))


def _write_groups_here(report: ReportTargets, found: JobSummary) -> None:
    """A local report: groups.csv's one part written by the driver (the tasks wrote partitions.csv's)."""
    try:
        write_csv_file(report.staged[1].staging / "part-00000-zkcoord.csv", GROUPS_COLUMNS,
                       group_rows(found.errors, found.notes))
    except OSError as exc:
        raise ZkcoordError(f"cannot write the report in {report.local_dir}: {exc.strerror or exc}; check its free "
                           "space and permissions, then run the job again") from None


def _write_csvs(spark: Any, report: ReportTargets, found: JobSummary, mode: str) -> None:
    """A report the driver cannot reach whole (HDFS, S3, a remote cluster's disks): Spark writes both
    CSVs, partitions.csv from the Parquet files just written, sorted. The two writes are one task each:
    side by side they use two cores instead of one after the other."""
    with ThreadPoolExecutor(1, thread_name_prefix="zkcoord-groups-csv") as pool:
        groups_csv = pool.submit(_write_groups, spark, found, report.groups_csv_uri, mode)
        try:
            written = spark.read.schema(report_schema()).parquet(report.parquet_uri)  # the schema known: no footer read
            _translated(lambda: written.coalesce(1).sortWithinPartitions("group", "topic", "partition").write
                        .mode(mode).options(**CSV_OPTIONS).csv(report.csv_uri))
        finally:
            wait([groups_csv])
        groups_csv.result()


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
        return UsageError(f"the report already exists ({first_line(exc)}); choose another --report-dir or pass "
                          "--overwrite")
    found = _TASK_ERROR.findall(text)
    if found:
        module, name, message = found[-1]
        kind = getattr(errors, name, None)
        if not (isinstance(kind, type) and issubclass(kind, ZkcoordError)):
            kind = ZkcoordError
        return kind(message.strip())
    log.debug("the Spark job failed: %s", text)
    return ZkcoordError(f"the Spark job failed: {first_line(exc)} (run with -vv for Spark's whole message)")


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
        self._acceptor: threading.Thread | None = None

    def start(self) -> None:
        self._acceptor = threading.Thread(target=self._accept, name="zkcoord-progress", daemon=True)
        self._acceptor.start()

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
        """Stop listening and end the accepting thread. Closing the socket
        alone would not wake an ``accept`` blocked in that thread (Linux): it
        would go on listening, and the thread would live as long as the
        process (one per job)."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (EINVAL)
        self._sock.close()
        if self._acceptor is not None:
            self._acceptor.join(timeout=5)


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
