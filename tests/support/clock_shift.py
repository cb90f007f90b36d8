"""Clock faults of one process: its wall clock jumped while it runs, or its
monotonic clock offset from the start.

**Wall clock (CLOCK_REALTIME) of a running daemon.** The kernel has no
per-process wall clock (time namespaces offset only CLOCK_MONOTONIC and
CLOCK_BOOTTIME), setting the machine's clock would move every process of a
shared machine, and libfaketime is not installed. So the daemon is started
through this module as a launcher::

    python -X zkcoord-test-process=... tests/support/clock_shift.py OFFSET_FILE -m zkcoord -v run ...

(or ``OFFSET_FILE tests/support/broken_fence.py BREAKS -m zkcoord ...``: a
launcher of the same kind, run with the clock already moved)

which replaces ``time.time`` and ``time.time_ns`` by the real value plus an
offset in seconds read from OFFSET_FILE (a thread re-reads it every
``POLL_S``), then runs ``-m <module>`` as ``python -m`` would.
:class:`WallClock` writes that file: ``jump(3600)`` moves the process an
hour ahead at once. Everything that reads the wall clock through Python's
``time`` module moves: zkcoord's own wall-clock reads (``nodes.py``'s
registration time, ``handover.py``'s hold and consumer ids, ``modes.py``,
``layout.py``), logging's timestamps, kazoo and kafka-python where they
use ``time.time()``. What does not: C code reading the clock itself
(``datetime.now()``, OpenSSL's certificate checks), which no path under test
uses, and ``time.monotonic()``, which is what the group timers use
(``zkcoord.server.group_runtime.monotonic_ms`` and asyncio's loop clock).
The daemon's code is unchanged: nothing in the product reads this.

**Monotonic clock.** It cannot jump for a running process: a time namespace's
offsets can only be set before its first process enters it. :func:`monotonic_offset`
wraps a command in ``unshare --time --monotonic S --boottime S`` (exec in
place: the pid is kept), so that daemon's CLOCK_MONOTONIC reads ``S``
seconds more than the others' - as on machines booted at different times.
It exercises that no monotonic value crosses a process boundary (stored in
ZooKeeper and read by another daemon, compared with another process's).
A forward monotonic jump of a running process is what SIGSTOP and a paused
VM already give the fault suite.
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import threading
import time
from pathlib import Path

POLL_S = 0.02
HERE = Path(__file__).resolve()


class WallClock:
    """The offset file of one launched process (module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset_s = 0.0
        self._write()

    def wrap(self, argv: list[str]) -> list[str]:
        """``[python, -X..., -m, zkcoord, ...]`` run through the launcher."""
        index = argv.index("-m")
        return [*argv[:index], str(HERE), str(self.path), *argv[index:]]

    def jump(self, seconds: float) -> None:
        """Move the process's wall clock by ``seconds`` (negative: back)."""
        self.offset_s += seconds
        self._write()

    def reset(self) -> None:
        self.offset_s = 0.0
        self._write()

    def _write(self) -> None:
        partial = self.path.with_suffix(".tmp")
        partial.write_text(repr(self.offset_s))
        os.replace(partial, self.path)  # the reader never sees half a number


def monotonic_offset(seconds: int):
    """A wrapper running a command with CLOCK_MONOTONIC and CLOCK_BOOTTIME
    ``seconds`` ahead (a new time namespace; needs root and ``unshare``)."""
    if shutil.which("unshare") is None:
        raise RuntimeError("unshare (util-linux) is not installed")

    def wrap(argv: list[str]) -> list[str]:
        return ["unshare", "--time", "--monotonic", str(seconds), "--boottime", str(seconds), *argv]

    return wrap


def time_namespaces_available() -> str | None:
    """None if ``unshare --time`` works here, else why not (a skip reason)."""
    import subprocess

    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    done = subprocess.run(["unshare", "--time", "--monotonic", "1", "true"], capture_output=True, text=True)
    return None if done.returncode == 0 else f"unshare --time failed: {done.stderr.strip()}"


# -- the launcher ------------------------------------------------------------------------------

def _install(offset_file: str) -> None:
    real_time, real_time_ns = time.time, time.time_ns
    state = {"offset": 0.0}

    def read() -> None:
        try:
            state["offset"] = float(Path(offset_file).read_text() or 0)
        except (OSError, ValueError):
            pass

    def poll() -> None:
        while True:
            read()
            time.sleep(POLL_S)

    read()
    time.time = lambda: real_time() + state["offset"]
    time.time_ns = lambda: real_time_ns() + int(state["offset"] * 1e9)
    threading.Thread(target=poll, name="clock-shift", daemon=True).start()


def main(argv: list[str]) -> None:
    if len(argv) >= 3 and argv[1] != "-m" and argv[1].endswith(".py"):
        # another launcher of the same kind (tests/support/broken_fence.py): run it, clock moved
        _install(argv[0])
        sys.argv = argv[1:]
        sys.path.insert(0, str(Path(argv[1]).resolve().parent))  # which its own __main__ takes off again
        runpy.run_path(argv[1], run_name="__main__")
        return
    if len(argv) < 3 or argv[1] != "-m":
        sys.exit("usage: clock_shift.py OFFSET_FILE [-m MODULE | LAUNCHER.py ...] [ARGS...]")
    offset_file, module, rest = argv[0], argv[2], argv[3:]
    _install(offset_file)
    sys.argv = [module, *rest]
    sys.path.insert(0, os.getcwd())  # as python -m does
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: its modules must not shadow the product's
    main(sys.argv[1:])
