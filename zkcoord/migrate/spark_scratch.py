"""Where a process's Spark sessions keep their files, and how they are removed.

One folder per process, ``<temp>/zkcoord-spark-<random>`` (``tempfile``'s
temporary directory: ``TMPDIR``), because Spark's driver JVM is one per
process and reads its scratch locations once:

* a local master's scratch (``spark.local.dir``: Spark's ``spark-*`` and
  ``blockmgr-*``) is ``<folder>/local``. Spark keeps the local directories
  its first SparkContext was given for the JVM's life, so a second session
  of the same process writes into the first one's: a folder per session was
  made again, after its removal, by the next session (seen: a
  ``zkcoord-spark-*/local`` left behind by every process that ran two);
* the driver JVM's temporary files (``java.io.tmpdir``: Spark's
  ``artifacts-*``, a cluster driver's ``spark-*`` and ``blockmgr-*``, the
  native libraries lz4 and snappy unpack) are in ``<folder>/tmp``, when
  zkcoord starts that JVM (not under spark-submit, nor with the caller's own
  ``spark.driver.extraJavaOptions``);
* each session's own files (the zkcoord package zip it ships, the class
  archive's warm-up report) are in a ``session-*`` folder inside, removed
  when the session ends.

The folder is removed when the process exits. A process killed (``kill
-9``, a crash) cannot remove it: its ``owner`` file names the process (pid
and, on Linux, its start time, so a pid used again is not taken for it, and
its pid namespace), and the first session of any later process removes the
folders whose owner is gone (:func:`sweep`). Folders without an ``owner`` file
(another program's, or one being made) and folders made in another pid
namespace (a container sharing the temporary folder: its pids are not ours
to look up) are left alone.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["PREFIX", "process_folder", "session_folder", "sweep", "jvm_temp_option"]

log = logging.getLogger(__name__)

PREFIX = "zkcoord-spark-"
_OWNER = "owner"
_folder: tuple[int, Path] | None = None  # (the pid it was made by, the folder): a forked child makes its own


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22); None
    where there is no such process or no ``/proc``."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _pid_namespace() -> str:
    """This process's pid namespace ("-" where it cannot be read): pids name processes only in it."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "-"


def _identity(pid: int) -> str:
    return f"{pid} {_start_ticks(pid) or '-'} {_pid_namespace()}"


def _alive(owner: str) -> bool:
    """Is the process an ``owner`` file names still running (True when it cannot be told: a
    folder made in another pid namespace, as by a container sharing the temporary folder)?"""
    try:
        pid_text, ticks, namespace = (owner.split() + ["", ""])[:3]
        pid = int(pid_text)
    except ValueError:
        return True  # not ours to judge
    if pid <= 0 or (namespace and namespace != _pid_namespace()):
        return True
    if ticks and ticks != "-" and Path("/proc/self/stat").exists():
        return _start_ticks(pid) == ticks
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process
    return True


def sweep(root: Path | None = None) -> int:
    """Remove the folders under ``root`` (the temporary directory) whose owner process is gone;
    how many. Never raises."""
    removed = 0
    try:
        candidates = list(Path(root or tempfile.gettempdir()).glob(f"{PREFIX}*"))
    except OSError:
        return 0
    for folder in candidates:
        try:
            owner = (folder / _OWNER).read_text()
        except (OSError, ValueError):
            continue  # no owner file (not one of ours, or one being made), or not one we wrote
        if _alive(owner):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed += 1
            log.debug("removed %s: the process that made it is gone", folder)
    return removed


def process_folder() -> Path:
    """This process's folder (made, and the folders of processes that are gone removed, on first use)."""
    global _folder
    pid = os.getpid()
    if _folder is not None and _folder[0] == pid and _folder[1].is_dir():
        return _folder[1]
    sweep()
    folder = Path(tempfile.mkdtemp(prefix=PREFIX))
    (folder / _OWNER).write_text(_identity(pid))
    (folder / "tmp").mkdir()
    _folder = (pid, folder)
    atexit.register(_remove, pid, folder)
    return folder


def _remove(pid: int, folder: Path) -> None:
    if os.getpid() == pid:  # not in a forked child that exits
        shutil.rmtree(folder, ignore_errors=True)


def session_folder() -> Path:
    """A new folder for one session's own files, inside :func:`process_folder` (the caller removes it)."""
    return Path(tempfile.mkdtemp(prefix="session-", dir=process_folder()))


def jvm_temp_option() -> str:
    """The driver JVM option that puts its temporary files in this process's folder ("" where the
    path could not be passed as one option: it has white space)."""
    temp = process_folder() / "tmp"
    with contextlib.suppress(OSError):
        temp.mkdir(exist_ok=True)
    text = str(temp)
    return "" if any(c.isspace() for c in text) else f"-Djava.io.tmpdir={text}"
