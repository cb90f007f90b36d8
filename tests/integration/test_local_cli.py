"""`zkcoord local` as a user runs it: up, up again, status, env, a broker
killed by hand, down, twice over, in a state directory of the test's own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.integration


def zkcoord(*args, state_dir, check=True):
    env = {**os.environ, "ZKCOORD_STATE_DIR": str(state_dir)}
    proc = subprocess.run([sys.executable, "-m", "zkcoord", "local", *args], capture_output=True, text=True,
                          env=env, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"zkcoord local {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc


def pids(state_dir):
    state = json.loads((state_dir / "sandbox.json").read_text())
    return {s["name"]: s["pid"] for s in [state["zookeeper"], *state["brokers"]]}


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.parametrize("round_", [1, 2])
def test_up_status_env_kill_down(tmp_path, round_):
    """The whole life cycle; run twice to prove nothing is left behind."""
    state_dir = tmp_path / "sandbox"
    try:
        _round_trip(state_dir)
    finally:
        if state_dir.exists():
            zkcoord("down", state_dir=state_dir, check=False)


def _round_trip(state_dir):
    first = zkcoord("up", state_dir=state_dir)
    assert "started: zookeeper, kafka-0" in first.stdout
    started = pids(state_dir)

    again = zkcoord("up", state_dir=state_dir)
    assert "already up" in again.stdout
    assert pids(state_dir) == started

    status = zkcoord("status", state_dir=state_dir)
    assert status.stdout.count(" up ") == 2

    env = zkcoord("env", state_dir=state_dir).stdout.splitlines()
    assert env[0].startswith("export ZKCOORD_ZOOKEEPER=127.0.0.1:")
    assert env[1].startswith("export ZKCOORD_BOOTSTRAP_SERVERS=127.0.0.1:")

    os.kill(started["kafka-0"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not gone(started["kafka-0"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    down_status = zkcoord("status", state_dir=state_dir, check=False)
    assert down_status.returncode == 1
    assert [line for line in down_status.stdout.splitlines() if "kafka-0" in line and " down " in line]

    down = zkcoord("down", state_dir=state_dir)
    assert "stopped: zookeeper" in down.stdout
    assert gone(started["zookeeper"])
    assert not state_dir.exists()
    assert zkcoord("status", state_dir=state_dir, check=False).returncode == 3


def test_bad_broker_count_is_a_clear_error(tmp_path):
    proc = zkcoord("up", "--brokers", "5", state_dir=tmp_path / "s", check=False)
    assert proc.returncode == 2
    assert "--brokers" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "s" / "sandbox.json").exists()
