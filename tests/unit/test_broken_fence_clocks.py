"""The clock breaks of tests/support/broken_fence.py on a small process,
started as the clock tests start a daemon (the clock launcher running the
broken-fence launcher): with ``group-wall-clock`` the group timers' clock
(``group_runtime.monotonic_ms``) follows the moved wall clock, with
``suspension-wall-clock`` a ZooKeeper connection's suspension clock does;
without them both stay on the monotonic clock whatever the wall clock does."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import broken_fence
from tests.support.clock_shift import WallClock

REPO = Path(__file__).resolve().parents[2]
SHOW = """
import json, time
from zkcoord.server import group_runtime
from zkcoord.zk.connection import ZkConnection
conn = ZkConnection("127.0.0.1:1")  # no I/O before start()
print(json.dumps({"wall": time.time(), "group_ms": group_runtime.monotonic_ms(), "suspension": conn.clock(),
                  "mono": time.monotonic()}))
"""


def _clocks(tmp_path: Path, breaks: tuple[str, ...]) -> dict:
    (tmp_path / "showclocks.py").write_text(SHOW)
    clock = WallClock(tmp_path / "offset")
    clock.jump(-7200)
    argv = clock.wrap([sys.executable, "-m", "showclocks"])
    if breaks:
        argv = broken_fence.wrap(*breaks)(argv)
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "real": time.time(), "real_mono": time.monotonic()}


def test_without_a_break_the_group_timers_and_the_suspension_stay_on_the_monotonic_clock(tmp_path):
    seen = _clocks(tmp_path, ())
    assert seen["wall"] < seen["real"] - 7000  # the launcher moved the wall clock back
    assert abs(seen["group_ms"] / 1000 - seen["real_mono"]) < 60
    assert abs(seen["suspension"] - seen["real_mono"]) < 60


@pytest.mark.parametrize("name, key", [("group-wall-clock", "group_ms"), ("suspension-wall-clock", "suspension")])
def test_a_clock_break_puts_its_clock_on_the_moved_wall_clock(tmp_path, name, key):
    seen = _clocks(tmp_path, (name,))
    value = seen[key] / 1000 if key == "group_ms" else seen[key]
    assert abs(value - seen["wall"]) < 60 and value < seen["real"] - 7000
    other = "suspension" if key == "group_ms" else "group_ms"  # the other clock untouched
    assert abs((seen[other] / 1000 if other == "group_ms" else seen[other]) - seen["real_mono"]) < 60
