"""``zkcoord migrate run-job``: plan, verify or apply many groups as one Spark job.

This module owns the command line of :mod:`zkcoord.migrate.spark_job`: its
options, the progress bar (rich, on stderr, fed by the job's progress
callback), the session's slow steps (starting Spark; on the first local run,
handing the making of the JVM's class archive over to the background process
that makes it after the command ends): a spinner on a
terminal, a line when each starts and ends elsewhere, both on stderr; and
the summary (text or JSON, on stdout) with where the time went: Spark's
start, the job, the class archive, the whole run. The per-partition report
is written by the job (Parquet and CSV under ``--report-dir``); this module
only says where, and what each is: a file, or a directory of Spark's
``part-*.csv`` files (:mod:`zkcoord.migrate.spark_report`).

Exit codes: 0; 1 when a group could not be read, and also, in verify, when
a partition is behind or a named group is not migrated, in apply, when a
group was refused or failed (as ``migrate verify`` / ``migrate apply``);
2 for bad options or unreachable services.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from zkcoord.cli.kafka_login import kafka_login_options
from zkcoord.cli.render import echo_document
from zkcoord.cli.zk_login import zookeeper_login_options
from zkcoord.core.migration import Options
from zkcoord.errors import UsageError
from zkcoord.migrate.plan import Selection
from zkcoord.migrate.spark_report import FILE
from zkcoord.migrate.spark_tasks import MODES, ZK_READS

__all__ = ["run_job_command", "run_and_report", "report_lines"]

_SHOWN = 10  # notes and errors printed; the rest are in groups.csv
_FAILING = {"plan": (), "verify": ("behind", "not-migrated"), "apply": ("refused", "failed")}


def _spark_conf(values: tuple[str, ...]) -> dict[str, str]:
    conf = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--spark-conf {item!r} is not KEY=VALUE (e.g. spark.executor.memory=2g)")
        conf[key.strip()] = value.strip()
    return conf


@click.command("run-job")
@click.option("--mode", type=click.Choice(MODES), default="plan", show_default=True,
              help="plan: decide, change nothing. verify: is Kafka behind ZooKeeper in migrated groups (recorded). "
                   "apply: per group back up, commit to Kafka, switch to dual, as migrate apply does (the "
                   "backups go to ZooKeeper only).")
@click.option("--group", "groups", multiple=True, metavar="G", help="A group (repeatable).")
@click.option("--all", "all_groups", is_flag=True, help="Every group (verify: every migrated group).")
@click.option("--pattern", metavar="REGEX", help="Groups whose whole name matches REGEX.")
@click.option("--zookeeper", envvar="ZKCOORD_ZOOKEEPER", show_envvar=True, required=True,
              help="ZooKeeper connection string HOST:PORT[,HOST:PORT...][/chroot].")
@click.option("--zk-root", envvar="ZKCOORD_OFFSETS_ZK_ROOT", show_envvar=True, default="/consumers",
              show_default=True, help="Root of the legacy offsets.")
@click.option("--bootstrap-servers", envvar="ZKCOORD_BOOTSTRAP_SERVERS", show_envvar=True, required=True,
              help="Kafka brokers HOST:PORT[,HOST:PORT...].")
@click.option("--timeout-ms", type=click.IntRange(1_000, 3_600_000), default=15_000, show_default=True,
              help="How long to wait for ZooKeeper and Kafka.")
@click.option("--allow-rewind", is_flag=True, help="Move Kafka back to older legacy offsets.")
@click.option("--force", is_flag=True, help="Use the log end for legacy offsets beyond it.")
@click.option("--allow-active-kafka-members", is_flag=True,
              help="apply: do not refuse groups that have members in Kafka's own coordinator.")
@click.option("--record/--no-record", default=True, show_default=True,
              help="verify: record each group's result in its migration record, as migrate verify does.")
@click.option("--report-dir", default=None, metavar="DIR",
              help="Where the report goes (a path every executor can reach on a cluster: HDFS, S3, NFS): "
                   "partitions.parquet, partitions.csv and groups.csv; the CSVs are files when DIR and Spark are "
                   "local, else directories of part-*.csv files [default: ./zkcoord-report/<mode>-<UTC time>].")
@click.option("--overwrite", is_flag=True, help="Replace a report already in --report-dir.")
@click.option("--spark-master", envvar="ZKCOORD_SPARK_MASTER", show_envvar=True, default=None, metavar="URL",
              help="spark://HOST:7077, yarn, k8s://... [default: local[*], or spark-submit's master].")
@click.option("--spark-partitions", type=click.IntRange(1, 100_000), default=None,
              help="Spark partitions the groups are spread over [default: Spark's default parallelism].")
@click.option("--spark-conf", multiple=True, metavar="KEY=VALUE", help="A Spark setting (repeatable).")
@click.option("--ship-package/--no-ship-package", default=None,
              help="Send a zip of zkcoord to the executors [default: when the master is not local].")
@click.option("--batch-groups", type=click.IntRange(1, 10_000), default=100, show_default=True,
              help="Groups a task reads and decides together.")
@click.option("--apply-concurrency", type=click.IntRange(1, 256), default=4, show_default=True,
              help="apply: parts of a batch a task applies at once (each part's steps pipelined across its "
                   "groups), and groups it applies on their own at once.")
@click.option("--zk-reads", type=click.Choice(ZK_READS), default="auto", show_default=True,
              help="multi: ZooKeeper 3.6+ multiRead, 1000 znodes a request; single: one znode a request; "
                   "auto: multi if the server says 3.6+.")
@click.option("--progress/--no-progress", default=None,
              help="Show a progress bar on stderr [default: when stderr is a terminal].")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@zookeeper_login_options
@kafka_login_options
def run_job_command(mode: str, groups: tuple[str, ...], all_groups: bool, pattern: str | None, zookeeper: str,
                    zk_root: str, bootstrap_servers: str, timeout_ms: int, allow_rewind: bool, force: bool,
                    allow_active_kafka_members: bool, record: bool, report_dir: str | None, overwrite: bool,
                    spark_master: str | None, spark_partitions: int | None, spark_conf: tuple[str, ...],
                    ship_package: bool | None, batch_groups: int, apply_concurrency: int, zk_reads: str,
                    progress: bool | None, output: str, zk_security, kafka_security) -> None:
    """Plan, verify or apply many groups as one Spark job, with a per-partition report.

    The groups are spread over Spark partitions; each task reads ZooKeeper
    and Kafka for its groups with one connection each and decides with the
    same rules as migrate plan / verify / apply. The report (Parquet and CSV,
    one row per partition with its status, and a CSV of the groups' notes and
    errors) goes to --report-dir: with a local --report-dir and Spark, the
    CSVs are files (partitions.csv, groups.csv); elsewhere, directories of
    Spark's part-*.csv files. The summary is printed here. Runs an embedded local Spark unless --spark-master says
    otherwise or spark-submit started it. The tasks log in to ZooKeeper as
    this command does (the JAAS section is read here and sent with them), and
    to Kafka with --command-config (its stores are read here and sent too);
    the Kafka login is tried here first, before Spark starts.
    """
    from zkcoord.kafka.login import check_login, portable
    from zkcoord.migrate.spark_job import JobConfig

    started = time.monotonic() - _process_age_s()  # the whole run: the interpreter's start and imports too
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    config = JobConfig(
        zookeeper, bootstrap_servers, Selection(tuple(groups), all_groups, pattern),
        report_dir or f"zkcoord-report/{mode}-{stamp}", mode=mode, zk_root=zk_root,
        options=Options(allow_rewind=allow_rewind, force=force), allow_active_kafka_members=allow_active_kafka_members,
        record_verify=record, timeout_ms=timeout_ms, spark_partitions=spark_partitions, batch_groups=batch_groups,
        apply_concurrency=apply_concurrency, zk_reads=zk_reads, overwrite=overwrite,
        zk_security=zk_security.loaded() if zk_security is not None else None,
        kafka_security=portable(kafka_security))
    check_login(bootstrap_servers, kafka_security, timeout_s=timeout_ms / 1000)
    run_and_report(config, spark_master=spark_master, spark_conf=_spark_conf(spark_conf), ship_package=ship_package,
                   progress=progress, output=output, started=started)


def _process_age_s() -> float:
    """Seconds since this process started (Linux's /proc; 0 where it cannot be read)."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            start_ticks = int(stat.read().rpartition(")")[2].split()[19])  # field 22, starttime
            return max(0.0, float(uptime.read().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def run_and_report(config, *, spark_master: str | None = None, spark_conf: dict[str, str] | None = None,
                   ship_package: bool | None = None, progress: bool | None = None, output: str = "text",
                   started: float | None = None) -> None:
    """Run the job of ``config`` (a :class:`~zkcoord.migrate.spark_job.JobConfig`)
    with a progress bar, print its summary, exit 1 if a group needs attention.
    For commands that hand their work to Spark (``--engine spark``).
    ``started``: ``time.monotonic()`` when the command started (the whole run's start)."""
    from zkcoord.migrate.spark_job import run_job, spark_session

    mode = config.mode
    started = time.monotonic() if started is None else started
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    show = err.is_terminal if progress is None else progress
    steps = _Steps(err, spinner=show and err.is_terminal, lines=progress is not False and not err.is_terminal)
    with contextlib.ExitStack() as stack:
        spark = stack.enter_context(spark_session(spark_master, ship_package=ship_package, conf=spark_conf,
                                                  steps=steps))
        with _ProgressBar(err, mode, show) as bar:
            result = run_job(config, spark, on_progress=bar.update)
        if output == "text":  # before the session ends: a first local session then still hands its class archive over
            _print_summary(result, config.record_verify)
    timings = {"spark_start_s": steps.seconds.get("start"), "job_s": round(result.elapsed_s, 3),
               "class_archive_s": steps.seconds.get("class-archive"), "total_s": round(time.monotonic() - started, 3)}
    if output == "json":
        echo_document("migrate run-job", {**_as_dict(result), "timings": timings})
    else:
        click.echo(_timings_line(timings))
    failing = sum(result.outcomes.get(name, 0) for name in _FAILING[mode]) + result.error_groups
    if failing or (mode == "verify" and result.errors):
        click.echo(f"{failing or len(result.errors)} group(s) need attention: see their rows' status in "
                   f"{_csv(result.report, result.report.csv)} and their messages in "
                   f"{_csv(result.report, result.report.groups_csv)}", err=True)
        sys.exit(1)


_DONE = {"start": "Spark started", "class-archive": "class archive handed over"}


class _Steps:
    """The session's slow steps (:data:`zkcoord.migrate.spark_job.Steps`) on
    stderr: a spinner while one runs on a terminal (``spinner``), a line when
    it starts and one when it ends elsewhere (``lines``); and how long each took."""

    def __init__(self, console: Console, *, spinner: bool, lines: bool) -> None:
        self._console, self._spinner, self._lines = console, spinner, lines
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, what: str, message: str) -> Iterator[None]:
        if self._lines:
            self._console.print(Text(f"{message} ..."))
        started = time.monotonic()
        try:
            with self._console.status(message) if self._spinner else contextlib.nullcontext():
                yield
        finally:
            self.seconds[what] = round(time.monotonic() - started, 3)
        if self._lines or (self._spinner and what == "class-archive"):
            self._console.print(Text(f"{_DONE.get(what, what)} in {self.seconds[what]:.1f} s"))


def _timings_line(timings: dict[str, float | None]) -> str:
    """Where the whole run's time went (``timings`` as in the JSON document)."""
    parts = [f"Spark start {timings['spark_start_s']:.1f} s"] if timings["spark_start_s"] is not None else []
    parts.append(f"job {timings['job_s']:.1f} s")
    if timings["class_archive_s"] is not None:
        parts.append(f"class archive {timings['class_archive_s']:.1f} s (first run only; written in the "
                     "background after this)")
    return f"whole run {timings['total_s']:.1f} s: " + ", ".join(parts)


class _ProgressBar:
    """Groups done / total, the rate and the offsets decided; updated from the job's poller thread."""

    def __init__(self, console: Console, mode: str, show: bool) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("groups"),
            TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[offsets]}"), TimeElapsedColumn(),
            console=console, disable=not show)
        self._mode = mode
        self._task = None

    def __enter__(self) -> _ProgressBar:
        self._progress.start()
        self._task = self._progress.add_task(self._mode, total=None, rate="", offsets="")
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._progress.stop()

    def update(self, p) -> None:
        rate = p.groups_done / p.elapsed_s if p.elapsed_s > 0 else 0.0
        tasks = f" (tasks {p.tasks_done}/{p.tasks_total})" if p.tasks_total else ""
        self._progress.update(self._task, completed=p.groups_done, total=p.groups_total or None,
                              description=f"{self._mode}{tasks}", rate=f"{rate:,.0f}/s",
                              offsets=f"{p.offsets_done:,} offsets")


def _as_dict(result) -> dict[str, Any]:
    return {
        "mode": result.mode, "groups_selected": result.groups_selected, "totals": result.totals.as_dict(),
        "error_groups": result.error_groups, "statuses": dict(result.statuses), "outcomes": dict(result.outcomes),
        "notes": [list(n) for n in result.notes], "errors": [list(e) for e in result.errors],
        "report": {"parquet": result.report.parquet, "csv": result.report.csv, "groups_csv": result.report.groups_csv,
                   "csv_layout": result.report.csv_layout},
        "spark_master": result.spark_master, "spark_partitions": result.spark_partitions,
        "elapsed_s": round(result.elapsed_s, 3),
        "options": {"allow_rewind": result.options.allow_rewind, "force": result.options.force},
    }


def report_lines(report, notes: int, errors: int) -> list[str]:
    """Where the report is and what each part of it is (a
    :class:`~zkcoord.migrate.spark_report.ReportPaths`)."""
    counts = f"{notes} note(s), {errors} error(s)"
    if report.csv_layout == FILE:
        return [f"report: {report.parquet}/ (Parquet)", f"        {report.csv}",
                f"        {report.groups_csv} ({counts})"]
    parts = "a directory of Spark's part-*.csv files, each with a header line"
    return [f"report: {report.parquet}/ (Parquet)", f"        {report.csv}/ ({parts})",
            f"        {report.groups_csv}/ ({parts}; {counts})"]


def _csv(report, path: str) -> str:
    """A CSV of the report as the user opens it: the file, or its part files."""
    return path if report.csv_layout == FILE else f"{path}/part-*.csv"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n:,} {name}" for name, n in counts.items() if n)


def _print_summary(result, recorded: bool) -> None:
    console = Console(highlight=False, soft_wrap=True)
    t = result.totals
    rate = t.partitions / result.elapsed_s if result.elapsed_s > 0 else 0.0
    console.print(Text(f"migrate {result.mode} on Spark ({result.spark_master}, {result.spark_partitions} "
                       f"partition(s)): {result.groups_selected:,} group(s), job {result.elapsed_s:.1f} s "
                       f"({rate:,.0f} offsets/s)"))
    decisions = _counts({d.value: n for d, n in t.by_decision.items()})
    console.print(Text(f"{t.groups:,} group(s) read, {t.partitions:,} partition(s)" + (f": {decisions}" if decisions
                                                                                          else "")))
    active = f"; {t.active_groups:,} group(s) with active members" if t.active_groups else ""
    changed = {"plan": "nothing was changed",
               "verify": "results recorded in the migration records" if recorded else "nothing was changed",
               "apply": "what was applied is in each group's migration record"}[result.mode]
    console.print(Text(f"{t.to_write:,} to write, {t.flagged:,} flagged{active}; {changed}"))
    console.print(Text(f"rows by status: {_counts(dict(result.statuses)) or 'none'}"))
    if result.outcomes:
        console.print(Text(f"groups: {_counts(dict(result.outcomes))}"))
    console.print(Text("\n".join(report_lines(result.report, len(result.notes), len(result.errors)))))
    for group, note in result.notes[:_SHOWN]:
        console.print(Text.assemble((f"group {group}: ", "bold"), note))
    for group, message in result.errors[:_SHOWN]:
        console.print(Text.assemble(("error: ", "bold red"), f"group {group}: {message}"))
    hidden = max(0, len(result.notes) - _SHOWN) + max(0, len(result.errors) - _SHOWN)
    if hidden:
        console.print(Text(f"... and {hidden} more in {_csv(result.report, result.report.groups_csv)}"))
