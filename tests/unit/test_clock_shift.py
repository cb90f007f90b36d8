"""The clock faults of tests/support/clock_shift.py on a small process:
the launcher moves ``time.time()`` of a running process when the test
jumps it, leaves ``time.monotonic()`` alone and keeps the pid; a time
namespace starts a process with its monotonic clock ahead."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.support.clock_shift import WallClock, monotonic_offset, time_namespaces_available
from tests.support.daemons import wait_for

SHOW = """
import os, sys, time
print(os.getpid(), flush=True)
for line in sys.stdin:
    print(time.time(), time.monotonic(), flush=True)
"""


def test_a_running_process_wall_clock_jumps_and_its_monotonic_clock_does_not(tmp_path):
    (tmp_path / "showtime.py").write_text(SHOW)
    clock = WallClock(tmp_path / "offset")
    argv = clock.wrap([sys.executable, "-m", "showtime"])
    proc = subprocess.Popen(argv, cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert int(proc.stdout.readline()) == proc.pid

        def sample() -> tuple[float, float, float, float]:
            proc.stdin.write("\n")
            proc.stdin.flush()
            wall, mono = map(float, proc.stdout.readline().split())
            return wall, mono, time.time(), time.monotonic()

        wall, mono, real, real_mono = sample()
        assert abs(wall - real) < 60 and abs(mono - real_mono) < 60
        clock.jump(3600)
        wall, mono, real, real_mono = wait_for(lambda: (s := sample())[0] - s[2] > 3000 and s, 10, "the jump seen")
        assert 3540 < wall - real < 3660 and abs(mono - real_mono) < 60
        clock.jump(-7200)
        wall, mono, real, real_mono = wait_for(lambda: (s := sample())[0] - s[2] < -3000 and s, 10, "the jump back")
        assert -3660 < wall - real < -3540 and abs(mono - real_mono) < 60
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.skipif(time_namespaces_available() is not None, reason=str(time_namespaces_available()))
def test_a_time_namespace_starts_a_process_with_its_monotonic_clock_ahead():
    ahead = 30 * 86400
    argv = monotonic_offset(ahead)([sys.executable, "-c", "import os, time; print(os.getpid(), time.monotonic())"])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    pid, mono = proc.stdout.read().split()
    proc.wait(10)
    assert int(pid) == proc.pid  # exec in place: a fleet still finds its registration by pid
    assert ahead - 60 < float(mono) - time.monotonic() < ahead + 60
