"""The Spark session of the migration job: where it runs, and how the zkcoord
package reaches the executors.

This module owns :func:`spark_session` (what :mod:`zkcoord.migrate.spark_job`
runs on) and the choices it makes for each kind of master:

* **local** (default, no set-up): ``local[*]``, Spark UI off, small shuffle,
  1 GiB driver compiling with C1 only (``_LOCAL_JVM_OPTIONS``), the jars it
  loads most classes from first on its class path (:func:`hot_jars_first`),
  mapping its classes from a class-data-sharing archive made after its first
  run (:mod:`zkcoord.migrate.spark_cds`), Spark's own logging at ERROR, Python
  workers on this interpreter, forked from a daemon that imported the task
  modules once (:mod:`zkcoord.migrate.spark_daemon`). Fits a 2-core machine.
* **a standalone master on this machine** (``spark://127.0.0.1:<port>``,
  ``localhost``: the sandbox's ``local up --spark-workers N``): the executors
  run here, so they run this interpreter too (``PYSPARK_PYTHON``, which
  pyspark names the executors' Python from, and ``spark.pyspark.python``,
  unless either is set already),
  where zkcoord and its dependencies are installed: nothing is shipped by
  default, and their Python workers fork from the same daemon as locally.
  The driver listens on loopback (``spark.driver.host``), and the report's
  CSVs are merged into files, as for a local master (the part files are on
  this machine).
* **any other cluster** (``spark://host:7077``, ``yarn``, ``k8s://...``)
  from a machine where zkcoord is installed (client mode): the zkcoord
  package is zipped and shipped with ``addPyFile`` (``ship_package``, the
  default there); the executors' Python (the cluster's
  ``spark.pyspark.python``, ``python3`` if unset) needs Python 3.11+ with
  zkcoord's dependencies: ``pip install zkcoord`` on every node (then
  nothing needs shipping: ``ship_package=False``), or a packed virtualenv
  sent with the job (``--spark-conf spark.archives=zkcoord-env.tar.gz#env
  --spark-conf spark.pyspark.python=./env/bin/python``, venv-pack).
* **spark-submit** (``PYSPARK_GATEWAY_PORT`` set): the session spark-submit
  made is used as it is, with spark-submit's master and settings.

A session that was already running (tests, notebooks, spark-submit) is used
and left running; one this module started is stopped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import sys
import threading
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zkcoord
from zkcoord import errors
from zkcoord.migrate import spark_scratch
from zkcoord.migrate.spark_cds import ClassArchive, class_archive
from zkcoord.migrate.spark_master import is_local, runs_here
from zkcoord.migrate.spark_tasks import no_rows

__all__ = ["LOCAL_MASTER", "LOCAL_CONF", "Steps", "spark_session", "first_line", "report_written", "hot_jars_first"]

log = logging.getLogger(__name__)

LOCAL_MASTER = "local[*]"
DAEMON_MODULE = "zkcoord.migrate.spark_daemon"  # imports once, from bytecode (its docstring)
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "1g",
    "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.python.worker.reuse": "true",
    "spark.python.daemon.module": DAEMON_MODULE,
}
# A standalone master on this machine: the driver on loopback, the executors on this interpreter.
HERE_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.python.worker.reuse": "true",
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
_WORKERS_WAIT_S = 30.0
# The jars a local job (session, plan, apply, verify, report) loads its classes from, most classes
# first (measured with -Xlog:class+load: these 44 hold 12,500 of the 12,760 classes it loads from jars),
# by name without their version. The JVM looks a class up in every jar of the class path in order
# until one has it, and `jars/*` is expanded in directory order, where spark-core came 259th of 280
# on the development machine: about a third of the cold session's JVM CPU went to those lookups.
# With these first (hot_jars_first), the cold session's JVM CPU was 7.5 s instead of 10.7 s and the
# first job's 7.6 s instead of 9.1 s (2-core development machine). A name not found is skipped.
_HOT_JARS = (
    "spark-catalyst_", "scala-library", "spark-core_", "scala-reflect", "spark-sql_", "spark-sql-api_", "log4j-core",
    "hadoop-client-api", "jackson-databind", "parquet-column", "parquet-jackson", "janino", "spark-config_",
    "parquet-encoding", "hadoop-client-runtime", "parquet-format-structures", "spark-network-common_", "ivy",
    "netty-common", "netty-transport", "jackson-module-scala_", "parquet-hadoop", "jackson-core",
    "spark-common-utils_", "log4j-api", "icu4j", "parquet-common", "py4j", "jackson-annotations", "json4s-ast_",
    "netty-buffer", "commons-compiler", "log4j-1.2-api", "spark-unsafe_", "lz4-java", "metrics-core",
    "univocity-parsers", "netty-transport-classes-epoll", "log4j-layout-template-json", "spark-common-utils-java_",
    "json4s-core_", "jakarta.servlet-api", "slf4j-api", "jts-core")

# The slow steps of a session, ``steps(what, message)`` around each: ``start`` (the JVM and the
# Python workers) and, on a first local run only, ``class-archive`` (its class archive saved while
# the session ends). The CLI shows ``message`` while it runs and times it.
Steps = Callable[[str, str], contextlib.AbstractContextManager[None]]


def _no_steps(what: str, message: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__


@dataclass
class _Settings:
    """What a session is started with (:func:`_settings`)."""

    conf: dict[str, str] = field(default_factory=dict)
    java_options: str = ""  # the local driver JVM's, without the class archive's
    archive: ClassArchive = field(default_factory=lambda: ClassArchive("off"))
    archive_conf: dict[str, str] = field(default_factory=dict)  # what a background session makes it with
    jvm_temp: str = ""  # the driver JVM's java.io.tmpdir option (spark_scratch), when zkcoord starts that JVM
    local: bool = False  # local[*] started here: the workers warmed up, the scratch in the process's folder
    ship: bool = False  # zip zkcoord and addPyFile it


def _settings(master: str | None, submitted: bool, conf: Mapping[str, str], ship_package: bool | None) -> _Settings:
    """The session's settings for ``master`` (None: local[*] or spark-submit's), the caller's ``conf`` last."""
    found = _Settings()
    if submitted:  # spark-submit chose; only the caller's own settings are added
        found.ship = bool(ship_package)
    elif is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import zkcoord and its dependencies
        found.conf.update(LOCAL_CONF)
        found.java_options = f"-Dlog4j2.configurationFile={_log4j2_file()} {_LOCAL_JVM_OPTIONS}"
        first = conf["spark.driver.extraClassPath"] if "spark.driver.extraClassPath" in conf else hot_jars_first()
        if first:
            found.conf["spark.driver.extraClassPath"] = first
        if "spark.driver.extraJavaOptions" not in conf:  # the caller's own JVM options: no archive
            memory = conf.get("spark.driver.memory", LOCAL_CONF["spark.driver.memory"])
            found.archive = class_archive(f"{found.java_options} -Xmx{memory} -cp {first}")
            found.archive_conf = {"spark.driver.memory": memory}
        found.conf["spark.driver.extraJavaOptions"] = f"{found.java_options} {found.archive.java_options()}".strip()
        found.local, found.ship = True, bool(ship_package)
    elif runs_here(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        found.conf.update(HERE_CONF)
        found.conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={_log4j2_file()}"
        _driver_hot_jars(found, conf)
        ours = "spark.pyspark.python" not in conf and "PYSPARK_PYTHON" not in os.environ
        if ours:  # the executors run this interpreter, where zkcoord is installed
            # pyspark names the executors' Python from PYSPARK_PYTHON alone (``SparkContext.pythonExec``;
            # the conf is spark-submit's): without it they ran the workers' ``python3``, which has no zkcoord.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            found.conf.update({"spark.pyspark.python": sys.executable, "spark.python.daemon.module": DAEMON_MODULE})
        found.ship = (not ours) if ship_package is None else ship_package
    else:
        _driver_hot_jars(found, conf)  # client mode: the driver runs here, on this pyspark's jars
        found.ship = True if ship_package is None else ship_package
    found.conf.update(conf)
    python = conf.get("spark.pyspark.python")
    if python and not submitted:  # what spark-submit does with it, which pyspark itself does not
        os.environ["PYSPARK_PYTHON"] = python  # the executors' Python (SparkContext.pythonExec)
    return found


def _driver_hot_jars(found: _Settings, conf: Mapping[str, str]) -> None:
    """A cluster's driver, which zkcoord starts here in client mode on the installed pyspark's
    jars, looks its classes up in the hot jars first, as the local driver does (``hot_jars_first``),
    unless the caller gave a driver class path of their own. The executors' class path is the
    cluster's, untouched."""
    if "spark.driver.extraClassPath" not in conf:
        first = hot_jars_first()
        if first:
            found.conf["spark.driver.extraClassPath"] = first


@contextlib.contextmanager
def spark_session(master: str | None = None, *, app_name: str = "zkcoord-migrate",
                  ship_package: bool | None = None, conf: Mapping[str, str] | None = None,
                  steps: Steps = _no_steps) -> Iterator[Any]:
    """A SparkSession for the job: ``master`` None means ``local[*]``, or
    spark-submit's master when run under spark-submit. ``ship_package``
    (default: when the executors do not run this interpreter) adds a zip of
    zkcoord to the executors' Python path. A session already running is used
    and not stopped. ``steps`` is told of the start and of saving the class
    archive (:data:`Steps`)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:
        yield SparkSession.builder.getOrCreate()
        return
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM and chose the master
    settings = _settings(master, submitted, dict(conf or {}), ship_package)
    builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
    if master is not None or not submitted:
        builder = builder.master(master or LOCAL_MASTER)
    workdir = spark_scratch.session_folder()
    if settings.local and "spark.local.dir" not in settings.conf:
        # Spark's scratch (spark-*, blockmgr-*) in the process's folder, not the session's: a JVM keeps
        # the local directories of its first SparkContext for its life (spark_scratch).
        settings.conf["spark.local.dir"] = str(spark_scratch.process_folder() / "local")
    if not submitted and "spark.driver.extraJavaOptions" not in (conf or {}):
        # The driver JVM's temporary files (artifacts-*, a cluster driver's scratch, native libraries)
        # in the process's folder too: removed at exit, or by a later session after a kill.
        settings.jvm_temp = spark_scratch.jvm_temp_option()
        settings.conf["spark.driver.extraJavaOptions"] = _joined(
            settings.conf.get("spark.driver.extraJavaOptions", ""), settings.jvm_temp)
    for key, value in settings.conf.items():
        builder = builder.config(key, value)
    try:
        spark = _started(builder, master, settings, steps)
        try:
            spark.sparkContext.setLogLevel("ERROR")
            if settings.ship:
                spark.sparkContext.addPyFile(str(_package_zip(workdir)))
            yield spark
        finally:
            _stop(spark, settings, workdir, steps)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _joined(*options: str) -> str:
    return " ".join(option for option in options if option)


def _started(builder: Any, master: str | None, settings: _Settings, steps: Steps) -> Any:
    archive = settings.archive
    starting = f"starting Spark ({master or LOCAL_MASTER})"
    if archive.mode == "create":
        starting += ("; the first run with this Java and Spark also has a class archive of the JVM made, in the "
                     "background after the job (once: later runs map it and start faster)")
    try:
        with steps("start", starting):
            try:
                return _create(builder, settings.local)
            except Exception:
                if archive.mode != "use":
                    raise
                archive.discard()  # a damaged archive must not keep Spark from starting
                return _create(builder.config("spark.driver.extraJavaOptions",
                                              _joined(settings.java_options, settings.jvm_temp)), settings.local)
    except Exception as exc:
        raise errors.ServiceUnavailableError(
            f"cannot start Spark (master {master or LOCAL_MASTER}): {first_line(exc)}; check the master URL "
            "and that Java 17+ is installed") from None


def report_written(spark: Any) -> None:
    """Tell the session a job wrote its whole report: a first session then need not write a small one
    before its class archive is saved (the classes a report needs are loaded already)."""
    spark._zkcoord_report_written = True


def _stop(spark: Any, settings: _Settings, workdir: Path, steps: Steps) -> None:
    from pyspark import SparkContext

    archive = settings.archive
    if archive.mode == "record":  # the background maker's session (spark_cds.make): the archive is saved now
        if not getattr(spark, "_zkcoord_report_written", False):
            _exercise_report(spark, workdir)  # the classes a job's report needs
        spark.stop()
        archive.finish(SparkContext)
        return
    spark.stop()
    if archive.mode == "create":  # first run only: a process of spark_cds's makes the archive after this one
        with steps("class-archive", f"handing the making of the Spark JVM's class archive {archive.path} over to "
                                    "a background process (once: later runs with this Java and Spark map it and "
                                    "start faster)"):
            archive.make_in_background(settings.archive_conf)


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
    """A two-row report's Parquet written as a local job writes it (Python rows -> Parquet; a local
    job's CSVs are written by Python, not the JVM), into ``workdir``: before a first session's JVM
    saves its class archive, so the archive holds the classes a job needs even when that session ran
    none (or failed early). Never raises."""
    from zkcoord.migrate.spark_report import report_schema  # the job's own schema

    try:
        rows = [("g", "t", p, "1", None, 0, 2, "copy", 1, "", "write") for p in (1, 0)]
        base = (workdir / "warm-up").resolve().as_uri()
        frame = spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), report_schema(), verifySchema=False)
        frame.write.parquet(f"{base}/partitions.parquet")
    except Exception:
        log.debug("the report exercise before saving the class archive failed", exc_info=True)


def _start_workers(sc: Any) -> None:
    try:
        slots = max(1, sc.defaultParallelism)
        sc.parallelize(range(slots), slots).mapPartitions(no_rows).count()
    except Exception:  # only a head start: the job starts the workers itself
        log.debug("starting the Python workers ahead of the job failed", exc_info=True)


def hot_jars_first(spark_home: Path | None = None) -> str:
    """The local driver's class path prefix (``spark.driver.extraClassPath``): the jars of
    Spark's ``jars/`` folder named in ``_HOT_JARS``, in that order (the rest stay where
    ``jars/*`` puts them, after these); "" when Spark's home is not found. Only the order of
    the lookups changes: Spark's class path is ``jars/*``, which has no order of its own (the
    directory's), and these jars are on it anyway."""
    from zkcoord.migrate.spark_cds import _spark_home

    home = spark_home or _spark_home()
    if home is None:
        return ""
    try:
        names = sorted(p.name for p in (home / "jars").iterdir() if p.suffix == ".jar")
    except OSError:
        return ""
    found = []
    for stem in _HOT_JARS:  # the name, then its version or Scala's suffix: spark-core_2.13-4.3.0.jar, janino-3.1.9.jar
        version = re.compile(re.escape(stem) + r"-?\d")
        found += [name for name in names if version.match(name) and name not in found][:1]
    return os.pathsep.join(str(home / "jars" / name) for name in found)


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
