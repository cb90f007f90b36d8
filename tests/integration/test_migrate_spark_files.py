"""A process's Spark files stay in its own folder of the temporary folder, which goes
when the process ends, or with the next session after a kill -9
(:mod:`zkcoord.migrate.spark_scratch`), with real local sessions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.daemons import process_marker, wait_for
from zkcoord.migrate import spark_scratch

pytestmark = pytest.mark.integration  # Spark's driver JVM
REPO = Path(__file__).resolve().parents[2]

TWO_SESSIONS = """
from zkcoord.migrate import spark_scratch
from zkcoord.migrate.spark_session import spark_session
for _ in range(2):  # the second on the first one's JVM
    with spark_session() as spark:
        assert spark.range(1000).repartition(4).count() == 1000
print(spark_scratch.process_folder(), flush=True)
"""

HELD = """
import time
from zkcoord.migrate import spark_scratch
from zkcoord.migrate.spark_session import spark_session
with spark_session() as spark:
    spark.range(1000).repartition(4).count()
    print(spark_scratch.process_folder(), flush=True)
    time.sleep(600)
"""


def python(code: str, temp: Path, **popen) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "ZKCOORD_SPARK_MASTER" and not k.startswith("PYSPARK_")}
    env["TMPDIR"] = str(temp)
    return subprocess.Popen([sys.executable, "-X", process_marker(), "-c", code], cwd=REPO, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen)


def folders(temp: Path) -> list[Path]:
    return sorted(temp.iterdir())


def test_two_sessions_then_a_killed_driver_leave_nothing_once_a_later_session_ran(tmp_path):
    temp = tmp_path / "temp"
    temp.mkdir()

    two = python(TWO_SESSIONS, temp)
    out, err = two.communicate(timeout=600)
    assert two.returncode == 0, err[-3000:]
    assert Path(out.strip()).parent == temp
    wait_for(lambda: not folders(temp), 60, f"nothing left in the temporary folder: {folders(temp)}")

    held = python(HELD, temp, start_new_session=True)
    try:
        line = held.stdout.readline().strip()
        assert line, held.stderr.read()[-3000:]
        killed = Path(line)
    finally:
        os.killpg(held.pid, signal.SIGKILL)  # the driver and its JVM, as a crash or kill -9 ends them
        held.communicate(timeout=60)
    assert folders(temp) == [killed]  # everything the killed driver and its JVM left is in its folder
    left = {p.name.split("-")[0] for p in (killed / "tmp").iterdir()} | {p.name.split("-")[0]
                                                                         for p in (killed / "local").iterdir()}
    assert {"blockmgr", "spark"} <= left, left  # the JVM's scratch and temporary files

    later = python(TWO_SESSIONS.replace("range(2)", "range(1)"), temp)
    out, err = later.communicate(timeout=600)
    assert later.returncode == 0, err[-3000:]
    assert not killed.exists()  # the next session removed the killed process's folder
    wait_for(lambda: not folders(temp), 60, f"nothing left in the temporary folder: {folders(temp)}")
    assert spark_scratch.sweep(temp) == 0
