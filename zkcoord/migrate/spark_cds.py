"""A class-data-sharing archive (Java AppCDS) for the embedded Spark driver JVM.

A local Spark session spends most of its start, and much of its first job,
loading and verifying the same twenty thousand classes from Spark's jars. A
Java 13+ dynamic CDS archive holds them already parsed and verified: the
JVM maps it instead. This module owns that archive for the local driver JVM
that :func:`zkcoord.migrate.spark_session.spark_session` starts (never for a
cluster, spark-submit, or a JVM started by somebody else):

* **where**: ``<cache>/spark-cds/<key>.jsa`` (``<cache>``: ``$ZKCOORD_CACHE_DIR``
  or ``~/.cache/zkcoord``). ``key`` is a digest of what the archive depends
  on: the ``java`` that will run, its module image, Spark's jars (names,
  sizes, times), the class path settings and the JVM options; anything
  else installed makes another key, so a stale archive is never asked for.
* **first run** (no archive for the key): the session's JVM runs as if there
  were no archive (recording its classes, ``-XX:ArchiveClassesAtExit``, made a
  first run's JVM spend 3 to 4.5 s more CPU, most of it while the session
  started: measured on the 2-core development machine). As the session ends,
  it starts a detached process (``python -m zkcoord.migrate.spark_cds_maker``,
  :meth:`ClassArchive.make_in_background`,
  at a lower CPU priority) and the command ends without waiting for it. That
  process starts a small local session of its own with the same JVM options
  and ``-XX:ArchiveClassesAtExit=<key>.jsa.<pid>-<random>.tmp``, writes a
  two-row report as a job does (the classes a job loads), stops the JVM,
  which writes the archive as it exits, checks the file with a ``java
  -Xshare:on`` run (which refuses an archive it cannot use) and only then
  renames it into place (atomic), so no JVM ever maps a partial file. A
  failed check leaves ``<key>.failed`` and later runs do without. While that
  process works, ``<key>.saving`` (its pid) tells later sessions not to make
  another one (they run without an archive until it is in place). What the
  user waits for is the handover: starting that process, milliseconds.
  :meth:`ClassArchive.finish` is the recording session's own end.
* **later runs**: ``-XX:SharedArchiveFile=<key>.jsa``. The JVM validates the
  archive itself and quietly runs without it when it does not match
  (``-Xshare:auto``, its logging off); a session that fails to start with
  the archive is started once more without it, and the archive is removed.
* ``ZKCOORD_SPARK_CDS=off`` turns all of this off.

Measured on the 2-core development machine (Java 17, Spark 4): session start
3.3-4.0 s -> 1.6-2.1 s; the first job's JVM CPU about 1.5 s less.

The session start without an archive also depends on the driver's class path
order; :func:`zkcoord.migrate.spark_session.hot_jars_first` is that part.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
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
_EXIT_WAIT_S = 120.0  # the archive is written while the JVM exits: 10-30 s on 2 cores
_MAKER = "_ZKCOORD_CDS_MAKER"  # set in the background maker's environment: its session records the archive
_MAKER_CONF = "_ZKCOORD_CDS_CONF"  # the Spark settings the archive is made for (JSON)



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
    (none yet: this session runs without one, and a background process makes
    it after the session, :meth:`make_in_background`), ``record`` (that
    process's session: the JVM writes ``tmp`` at exit) or ``off``."""

    mode: str
    path: Path | None = None
    tmp: Path | None = None

    def java_options(self) -> str:
        if self.mode == "use":
            return f"-XX:SharedArchiveFile={self.path} {_QUIET}"
        if self.mode == "record":
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
        """After the session stopped: in ``record`` mode, close the JVM, wait
        for it to write the archive, check it, put it in place. Never raises."""
        if self.mode != "record" or self.tmp is None or self.path is None:
            return
        try:
            closed = _close_jvm(context_class)
            if closed is not None:
                proc, java, classpath = closed
                try:
                    code = proc.wait(timeout=_EXIT_WAIT_S)
                except subprocess.TimeoutExpired:
                    log.info("the Spark JVM took over %.0f s to exit; its class archive is not saved", _EXIT_WAIT_S)
                    return
                _keep_if_sound(self.tmp, self.path, java, classpath, code)
        except Exception:
            log.debug("the Spark class archive was not saved", exc_info=True)
        finally:
            self.tmp.unlink(missing_ok=True)

    def make_in_background(self, conf: dict[str, str]) -> int | None:
        """In ``create`` mode, after this session: start the detached process that makes the
        archive with a session of its own started with ``conf`` (the Spark settings the key was
        made from: the same JVM options), and mark the archive as being saved. Its pid, or None.
        Never raises."""
        if self.mode != "create" or self.path is None:
            return None
        try:
            maker = subprocess.Popen(
                [sys.executable, "-m", "zkcoord.migrate.spark_cds_maker"],
                env={**os.environ, _MAKER: "1", _MAKER_CONF: json.dumps(conf)}, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
            _saving_marker(self.path).write_text(str(maker.pid))
            return maker.pid
        except Exception:
            log.debug("the Spark class archive's maker did not start", exc_info=True)
            return None


def _close_jvm(context_class: Any) -> tuple[Any, str, str] | None:
    """Shut py4j's gateway and close the JVM's stdin (PythonGatewayServer exits on EOF: System.exit(0),
    then the archive is written); (its Popen, its java, its class path), or None without a JVM."""
    gateway = context_class._gateway
    proc = getattr(gateway, "proc", None)
    jvm = context_class._jvm
    if proc is None or jvm is None:
        return None
    system = jvm.java.lang.System
    java = str(Path(system.getProperty("java.home")) / "bin" / "java")
    classpath = system.getProperty("java.class.path")
    try:
        gateway.shutdown()
    except Exception:
        log.debug("py4j gateway shutdown failed", exc_info=True)
    context_class._gateway = None  # a later session in this process starts a JVM of its own
    context_class._jvm = None
    if proc.stdin is not None:
        proc.stdin.close()
    return proc, java, classpath


def _keep_if_sound(tmp: Path, path: Path, java: str, classpath: str, code: int | None) -> bool:
    """Put the archive the JVM wrote (``tmp``) in place if the JVM exited 0 (``code`` None: not
    known) and a ``java -Xshare:on`` run maps it; else leave the ``.failed`` marker."""
    if (code not in (0, None)) or not tmp.exists() or tmp.stat().st_size == 0:
        log.info("the Spark JVM exited %s without a class archive; later runs start without one", code)
        _failed_marker(path).touch()
        return False
    crash_log = tmp.with_suffix(".hs_err")  # where a JVM that cannot map it would say so
    try:
        check = subprocess.run([java, "-Xshare:on", f"-XX:SharedArchiveFile={tmp}", _QUIET,
                                f"-XX:ErrorFile={crash_log}", "-cp", classpath, "-version"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    finally:
        crash_log.unlink(missing_ok=True)
    if check.returncode != 0:
        log.info("the Spark class archive %s failed its check; later runs start without one", tmp)
        _failed_marker(path).touch()
        return False
    os.replace(tmp, path)
    log.info("saved the Spark JVM's class archive %s (later sessions start faster)", path)
    return True


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state not in ("Z", "X")


def _failed_marker(path: Path) -> Path:
    return path.with_suffix(".failed")


def _saving_marker(path: Path) -> Path:
    return path.with_suffix(".saving")


def _being_saved(path: Path) -> bool:
    """Whether a background process is saving this archive now (its ``.saving`` marker names a
    process that runs); a marker left by one that died is removed."""
    marker = _saving_marker(path)
    try:
        pid = int(marker.read_text().strip() or 0)
    except (OSError, ValueError):
        return False
    if pid == os.getpid():  # the maker itself (make_in_background)
        return False
    if pid and _running(pid):
        return True
    marker.unlink(missing_ok=True)
    return False


def class_archive(java_options: str) -> ClassArchive:
    """The archive for a local driver JVM started with ``java_options``; ``off``
    when turned off, unknown, not creatable, when creating it failed before, or
    while a background process is saving it; ``record`` in that process."""
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
        if _failed_marker(path).exists() or _being_saved(path):
            return ClassArchive("off")
        root.mkdir(parents=True, exist_ok=True)
        _prune(root)
        if os.environ.get(_MAKER) != "1":
            return ClassArchive("create", path)
        return ClassArchive("record", path, root / f"{key}.jsa.{os.getpid()}-{secrets.token_hex(4)}.tmp")
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


def release(path_root: Path | None = None) -> None:
    """Remove the ``.saving`` markers naming this process (the maker's end)."""
    for marker in (path_root or _cache_root()).glob("*.saving"):
        with contextlib.suppress(OSError, ValueError):
            if int(marker.read_text().strip() or 0) == os.getpid():
                marker.unlink()


def archived() -> bool:
    """Whether an archive is in place in the cache."""
    return any(_cache_root().glob("*.jsa"))
