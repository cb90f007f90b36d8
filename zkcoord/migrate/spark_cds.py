"""A class-data-sharing archive (Java AppCDS) for the embedded Spark driver JVM.

A local Spark session spends most of its start, and much of its first job,
loading and verifying the same twenty thousand classes from Spark's jars. A
Java 13+ dynamic CDS archive holds them already parsed and verified: the
JVM maps it instead. This module owns that archive for the local driver JVM
that :func:`zkcoord.migrate.spark_job.spark_session` starts (never for a
cluster, spark-submit, or a JVM started by somebody else):

* **where**: ``<cache>/spark-cds/<key>.jsa`` (``<cache>``: ``$ZKCOORD_CACHE_DIR``
  or ``~/.cache/zkcoord``). ``key`` is a digest of what the archive depends
  on: the ``java`` that will run, its module image, Spark's jars (names,
  sizes, times), the class path settings and the JVM options; anything
  else installed makes another key, so a stale archive is never asked for.
* **first run** (no archive for the key): the JVM runs with
  ``-XX:ArchiveClassesAtExit=<key>.jsa.<pid>-<random>.tmp`` and writes the
  archive when it exits. The session's end then closes the JVM (instead of
  leaving it to the process's exit), waits for it, checks the file with a
  ``java -Xshare:on`` run (which refuses an archive it cannot use) and only
  then renames it into place (atomic), so no JVM ever maps a partial file.
  A failed check leaves ``<key>.failed`` and later runs do without.
* **later runs**: ``-XX:SharedArchiveFile=<key>.jsa``. The JVM validates the
  archive itself and quietly runs without it when it does not match
  (``-Xshare:auto``, its logging off); a session that fails to start with
  the archive is started once more without it, and the archive is removed.
* ``ZKCOORD_SPARK_CDS=off`` turns all of this off.

Measured on the 2-core development machine (Java 17, Spark 4): session start
3.3-4.0 s -> 1.6-2.1 s; the first job's JVM CPU about 1.5 s less.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ClassArchive", "class_archive", "ENV"]

log = logging.getLogger(__name__)

ENV = "ZKCOORD_SPARK_CDS"
_QUIET = "-Xlog:cds=off,cds+dynamic=off"  # the JVM's CDS warnings would go to the user's terminal
_KEEP = 3  # archives kept (other Spark or Java installs); the least recently used go first
_STALE_TMP_S = 3600  # an unfinished archive this old belongs to a run that died
_EXIT_WAIT_S = 120.0  # the archive is written while the JVM exits: 1-3 s on 2 cores


def _cache_root() -> Path:
    from zkcoord.local.jars import cache_dir

    return cache_dir() / "spark-cds"


def _java() -> str | None:
    """The ``java`` Spark's launcher runs (``JAVA_HOME`` first, as bin/spark-class does)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def _spark_home() -> Path | None:
    try:
        from pyspark.find_spark_home import _find_spark_home

        return Path(_find_spark_home())
    except Exception:  # no Spark to be found: the session start says so itself
        return None


def _stat(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return f"{path}:-"
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def archive_key(java_options: str) -> str | None:
    """Digest of everything the driver JVM's archive depends on; None if it cannot be known."""
    java, spark_home = _java(), _spark_home()
    if java is None or spark_home is None:
        return None
    java_path = Path(java).resolve()
    jars = spark_home / "jars"
    try:
        listed = sorted(jars.iterdir())
    except OSError:
        return None
    parts = [_stat(java_path), _stat(java_path.parent.parent / "lib" / "modules"), str(spark_home),
             *(_stat(jar) for jar in listed), java_options,
             *(f"{name}={os.environ.get(name, '')}" for name in
               ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH", "SPARK_PREPEND_CLASSES",
                "SPARK_DAEMON_JAVA_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")),
             _stat(spark_home / "conf")]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


@dataclass
class ClassArchive:
    """The archive of one session: ``mode`` ``use`` (map ``path``), ``create``
    (the JVM writes ``tmp`` at exit) or ``off``."""

    mode: str
    path: Path | None = None
    tmp: Path | None = None

    def java_options(self) -> str:
        if self.mode == "use":
            return f"-XX:SharedArchiveFile={self.path} {_QUIET}"
        if self.mode == "create":
            return f"-XX:ArchiveClassesAtExit={self.tmp} {_QUIET}"
        return ""

    def discard(self) -> None:
        """The session did not start with this archive: remove it (the next run makes a new one)."""
        for path in (self.path if self.mode == "use" else None, self.tmp):
            if path is not None:
                path.unlink(missing_ok=True)
        log.warning("the Spark JVM did not start with its class archive; removed it, starting without")
        self.mode, self.tmp = "off", None

    def finish(self, context_class: Any) -> None:
        """After the session stopped: in ``create`` mode, close the JVM, wait
        for it to write the archive, check it, put it in place. Never raises."""
        if self.mode != "create" or self.tmp is None or self.path is None:
            return
        try:
            self._finish(context_class)
        except Exception:
            log.debug("the Spark class archive was not saved", exc_info=True)
        finally:
            self.tmp.unlink(missing_ok=True)

    def _finish(self, context_class: Any) -> None:
        gateway = context_class._gateway
        proc = getattr(gateway, "proc", None)
        jvm = context_class._jvm
        if proc is None or jvm is None:
            return
        system = jvm.java.lang.System
        java = str(Path(system.getProperty("java.home")) / "bin" / "java")
        classpath = system.getProperty("java.class.path")
        started = time.monotonic()
        try:
            gateway.shutdown()
        except Exception:
            log.debug("py4j gateway shutdown failed", exc_info=True)
        context_class._gateway = None  # a later session in this process starts a JVM of its own
        context_class._jvm = None
        if proc.stdin is not None:
            proc.stdin.close()  # PythonGatewayServer exits on EOF: System.exit(0), then the archive is written
        try:
            code = proc.wait(timeout=_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            log.info("the Spark JVM took over %.0f s to exit; its class archive is not saved", _EXIT_WAIT_S)
            return
        if code != 0 or not self.tmp.exists() or self.tmp.stat().st_size == 0:
            log.info("the Spark JVM exited %s without a class archive; later runs start without one", code)
            _failed_marker(self.path).touch()
            return
        crash_log = self.tmp.with_suffix(".hs_err")  # where a JVM that cannot map it would say so
        try:
            check = subprocess.run([java, "-Xshare:on", f"-XX:SharedArchiveFile={self.tmp}", _QUIET,
                                    f"-XX:ErrorFile={crash_log}", "-cp", classpath, "-version"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        finally:
            crash_log.unlink(missing_ok=True)
        if check.returncode != 0:
            log.info("the Spark class archive %s failed its check; later runs start without one", self.tmp)
            _failed_marker(self.path).touch()
            return
        os.replace(self.tmp, self.path)
        log.info("saved the Spark JVM's class archive %s in %.1f s (later sessions start faster)", self.path,
                 time.monotonic() - started)


def _failed_marker(path: Path) -> Path:
    return path.with_suffix(".failed")


def class_archive(java_options: str) -> ClassArchive:
    """The archive for a local driver JVM started with ``java_options``; ``off``
    when turned off, unknown, not creatable, or when creating it failed before."""
    if os.environ.get(ENV, "auto").strip().lower() in ("off", "0", "no", "false"):
        return ClassArchive("off")
    try:
        key = archive_key(java_options)
        if key is None:
            return ClassArchive("off")
        root = _cache_root()
        path = root / f"{key}.jsa"
        if path.is_file() and path.stat().st_size > 0:
            os.utime(path)  # least recently used goes first (_prune)
            return ClassArchive("use", path)
        if _failed_marker(path).exists():
            return ClassArchive("off")
        root.mkdir(parents=True, exist_ok=True)
        _prune(root)
        return ClassArchive("create", path, root / f"{key}.jsa.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    except OSError as exc:
        log.debug("no Spark class archive: %r", exc)
        return ClassArchive("off")


def _prune(root: Path) -> None:
    """Remove unfinished archives of dead runs and all but the ``_KEEP - 1`` most recently used archives."""
    now = time.time()
    for tmp in root.glob("*.tmp"):
        try:
            if now - tmp.stat().st_mtime > _STALE_TMP_S:
                tmp.unlink()
        except OSError:
            pass
    archives = sorted(root.glob("*.jsa"), key=lambda p: p.stat().st_mtime if p.exists() else 0, reverse=True)
    for old in archives[_KEEP - 1:]:
        old.unlink(missing_ok=True)
