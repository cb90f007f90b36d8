"""`zkcoord local` as a user runs it: up, up again, status, env, a broker
killed by hand, down, twice over, in a state directory of the test's own;
with daemons, their metrics and health endpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict

import pytest
from kafka import KafkaAdminClient
from prometheus_client.parser import text_string_to_metric_families

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


@pytest.fixture
def state_dir(tmp_path):
    """A sandbox directory of the test's own, brought down when it ends."""
    state_dir = tmp_path / "sandbox"
    yield state_dir
    if state_dir.exists():
        zkcoord("down", state_dir=state_dir, check=False)


@pytest.mark.parametrize("round_", [1, 2])
def test_up_status_env_kill_down(state_dir, round_):
    """The whole life cycle; run twice to prove nothing is left behind."""
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
    assert env[2] == f"export ZKCOORD_TOOLS_LOG4J={state_dir}/tools-log4j.properties"
    assert (state_dir / "tools-log4j.properties").read_text().startswith("log4j.rootLogger=WARN, stderr\n")
    assert len(env) == 3  # no daemons: no ZKCOORD_COORDINATORS, ZKCOORD_GATEWAY_SERVERS, ZKCOORD_METRICS_URLS

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


def daemon_ports(state_dir):
    state = json.loads((state_dir / "sandbox.json").read_text())
    return {d["name"]: (d["pid"], d["port"], d["gateway_port"], d["metrics_port"]) for d in state["daemons"]}


def get(url):
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=10) as response:
        return response.status, response.read().decode()


def scrape(url) -> dict[str, float]:
    """A daemon's /metrics: each sample name with its values summed over its labels."""
    status, text = get(f"{url}/metrics")
    assert status == 200
    totals: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] += sample.value
    return totals


def test_daemons_serve_metrics_and_health_on_kept_ports(state_dir):
    """`up --daemons 2`: status shows each daemon's metrics URL, env exports
    them, each answers /health and /metrics (the gateway's metrics too); a
    daemon killed with -9 comes back from `up` on the same ports."""
    zkcoord("up", "--daemons", "2", state_dir=state_dir)
    ports = daemon_ports(state_dir)
    urls = [f"http://127.0.0.1:{ports[name][3]}" for name in ("zkcoord-1", "zkcoord-2")]
    assert len(set(urls)) == 2

    status = zkcoord("status", state_dir=state_dir).stdout.splitlines()
    for name, url in zip(("zkcoord-1", "zkcoord-2"), urls):
        [row] = [line.split() for line in status if line.startswith(f"{name} metrics ")]
        assert row[2:5] == [url, str(ports[name][0]), "up"]

    exports = zkcoord("env", state_dir=state_dir).stdout.splitlines()
    env = dict(line.removeprefix("export ").split("=", 1) for line in exports)
    assert env["ZKCOORD_METRICS_URLS"] == ",".join(urls)

    # requests through daemon 1's gateway: its counters are on the daemon's endpoint
    first_gateway = env["ZKCOORD_GATEWAY_SERVERS"].split(",")[0]  # any-daemon: its own counters; no group API
    admin = KafkaAdminClient(bootstrap_servers=first_gateway, client_id="t")
    assert admin.describe_cluster()["brokers"]
    admin.close()
    workers = json.loads((state_dir / "sandbox.json").read_text())["daemons"][0]["workers"]
    assert workers >= 2  # the sandbox's daemons run workers: each endpoint adds up theirs
    for url in urls:
        status, body = get(f"{url}/health")
        health = json.loads(body)
        assert (status, health["status"], health["groups_owned"]) == (200, "ready", 0)
        assert [w["status"] for w in health["workers"]] == ["ready"] * workers
        metrics = scrape(url)
        assert (metrics["zkcoord_groups_owned"], metrics["zkcoord_zookeeper_connected"]) == (0, workers)
        assert (metrics["zkcoord_gateway_brokers"], metrics["zkcoord_gateway_connections"]) == (workers, 0)
    assert scrape(urls[0])["zkcoord_gateway_forwarded_requests_total"] >= 1

    demo = subprocess.run([sys.executable, "-m", "zkcoord.local.demo_metrics"], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=60)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert [line for line in demo.stdout.splitlines() if "/health:" in line] == [
        f"{url}  /health: 200 ready" for url in urls]

    os.kill(ports["zkcoord-1"][0], signal.SIGKILL)
    again = zkcoord("up", "--daemons", "2", state_dir=state_dir)
    assert "started: zkcoord-1" in again.stdout
    restarted = daemon_ports(state_dir)
    assert restarted["zkcoord-1"][0] != ports["zkcoord-1"][0]
    assert restarted["zkcoord-1"][1:] == ports["zkcoord-1"][1:]  # listener, gateway and metrics ports kept
    assert restarted["zkcoord-2"] == ports["zkcoord-2"]
    assert get(f"{urls[0]}/health")[0] == 200
