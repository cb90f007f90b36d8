"""Benchmark: what TLS, SCRAM and Kafka's ACLs cost one zkcoord daemon.

Run by hand, never by the test suite; it prints a table and ratios and never
asserts on time (see ``bench/README.md``)::

    .venv/bin/python bench/bench_security.py                 # ~2 minutes
    .venv/bin/python bench/bench_security.py --duration-s 5 --members 200

One run, one sandbox (``zkcoord local up`` in a state directory of its own),
two daemons measured one after the other with the same client
(``group_client.py``) and the same settings:

- ``plaintext``: ``--listen PLAINTEXT://``, no authorizer;
- ``secure``: ``--listen SASL_SSL://`` (a local CA's server certificate),
  SCRAM-SHA-512 logins checked against Kafka's credentials in ZooKeeper
  (the user written by Kafka's own kafka-configs), and Kafka's AclAuthorizer
  decisions on every request (an ACL written by Kafka's own kafka-acls lets
  the user READ the bench groups).

Each runs in a ZooKeeper chroot of its own. Scenarios, on each daemon:

1. heartbeat: members of Stable groups send heartbeats back to back (the
   maximum rate), then paced at ``--paced-rate`` in total (the latency at
   that load); requests per second, p50 and p99;
2. login: ``--logins`` connections opened one after the other (TCP; TLS and
   the SCRAM login on the secure daemon) and their time, and ZooKeeper
   packets the daemons received meanwhile per login (from ``mntr``: the
   credential cache means at most one read per user until it changes).

The report gives secure / plaintext for each figure, and the goal of issue
17: a SCRAM login costs at most one ZooKeeper read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_coordinator import COMMIT_TOPIC, Settings, Target, percentile, steady_state  # noqa: E402
from bench_env import Environment  # noqa: E402
from group_client import KafkaConnection, common_versions, served_versions  # noqa: E402

from zkcoord.local.procs import free_port  # noqa: E402
from zkcoord.local.sandbox import zk_four_letter  # noqa: E402

USER, MECHANISM = "bench", "SCRAM-SHA-512"


def kafka_tool(main_class: str, *args: str) -> None:
    from tests.support.java_tools import run_tool

    run_tool(main_class, *args)


class SecureDaemon:
    """A second `zkcoord run`: SASL_SSL, SCRAM from ZooKeeper, Kafka's ACLs; in a chroot of its own."""

    def __init__(self, env: Environment, workdir: Path) -> None:
        self.env, self.workdir = env, workdir
        self.chroot = env.chroot + "-secure"
        self.password = "bench-" + str(time.time_ns())
        self.process: subprocess.Popen | None = None
        self.address: tuple[str, int] | None = None
        self.ssl_context = None

    def start(self) -> None:
        from zkcoord.local.certs import make_local_ca
        from zkcoord.security.tls import SslSettings

        env = self.env
        zookeeper = f"127.0.0.1:{env.zk_port}"
        env._zk.ensure_path(self.chroot)
        hosts = zookeeper + self.chroot
        kafka_tool("kafka.admin.ConfigCommand", "--zookeeper", hosts, "--alter", "--entity-type", "users",
                   "--entity-name", USER, "--add-config", f"{MECHANISM}=[iterations=4096,password={self.password}]")
        kafka_tool("kafka.admin.AclCommand", "--authorizer-properties", f"zookeeper.connect={hosts}", "--add",
                   "--allow-principal", f"User:{USER}", "--operation", "Read", "--group", "bench-",
                   "--resource-pattern-type", "prefixed")
        ca = make_local_ca(self.workdir / "ca")
        self.ssl_context = SslSettings(truststore_location=str(ca.ca_certificate_pem)).client_context()
        port = free_port()
        command = [sys.executable, "-m", "zkcoord", "run", "--zookeeper", hosts,
                   "--listen", f"SASL_SSL://127.0.0.1:{port}", "--node-id", "2",
                   "--group-initial-rebalance-delay-ms", "0", "--ssl-keystore-location", str(ca.server_keystore_pkcs12),
                   "--sasl-enabled-mechanisms", MECHANISM,
                   "--authorizer-class-name", "kafka.security.authorizer.AclAuthorizer",
                   "--workers", "1"]  # one process, as the plaintext daemon (bench_env's default)
        environment = {**os.environ, "ZKCOORD_SSL_KEYSTORE_PASSWORD": ca.store_password.value}
        with open(self.workdir / "zkcoord-secure.log", "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                            env=environment)
        self.address = ("127.0.0.1", port)
        env.pids["zkcoord-secure"] = self.process.pid
        asyncio.run(self._wait())

    @property
    def connect(self) -> dict:
        return {"ssl_context": self.ssl_context, "login": (MECHANISM, USER, self.password)}

    async def _wait(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"the secure daemon exited; see {self.workdir / 'zkcoord-secure.log'}")
            try:
                conn = await KafkaConnection.open(*self.address, "zkcoord-bench", **self.connect)
                conn.close()
                return
            except Exception:  # not up yet (refused, TLS not ready, login before the ACLs loaded)
                await asyncio.sleep(0.3)
        raise SystemExit(f"the secure daemon did not accept a login within {timeout_s:g} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()


def zk_packets_received(port: int) -> int:
    """ZooKeeper's count of packets received from all clients (``mntr``)."""
    for line in zk_four_letter(port, "mntr").splitlines():
        name, _, value = line.partition("\t")
        if name == "zk_packets_received":
            return int(value)
    raise SystemExit("ZooKeeper's mntr has no zk_packets_received")


async def logins(target: Target, count: int, zk_port: int) -> tuple[float, float, float]:
    """(median ms, p99 ms, ZooKeeper packets received per login) of ``count`` connections one after the other."""
    before = zk_packets_received(zk_port)
    times = []
    for i in range(count):
        started = time.perf_counter()
        conn = await KafkaConnection.open(*target.address, f"login-{i}", **target.connect)
        await served_versions(conn)
        times.append(time.perf_counter() - started)
        conn.close()
    after = zk_packets_received(zk_port)
    times.sort()
    return statistics.median(times) * 1e3, percentile(times, 0.99) * 1e3, (after - before) / count


async def measure(target: Target, env: Environment, settings: Settings, login_count: int):
    conn = await KafkaConnection.open(*target.address, "zkcoord-bench", **target.connect)
    versions = common_versions(await served_versions(conn))
    conn.close()
    return await steady_state(target, versions, env, settings), await logins(target, login_count, env.zk_port)


def _daemon_us(result, process: str) -> float:
    """The daemon's CPU per request: its own cost, apart from the load generator's (TLS is paid on both ends)."""
    return result.cpu.get(process, 0.0) * result.duration_s / max(result.requests, 1) * 1e6


def report(plain, secure) -> None:
    (plain_loads, plain_login), (secure_loads, secure_login) = plain, secure
    print("\n| scenario | plaintext | secure (TLS + SCRAM + ACLs) | secure / plaintext |")
    print("| --- | --- | --- | --- |")
    for p, s in zip(plain_loads, secure_loads):
        print(f"| {p.scenario}: requests/s | {p.rate:,.0f} | {s.rate:,.0f} | {s.rate / p.rate:.2f} |")
        p_us, s_us = _daemon_us(p, "zkcoord"), _daemon_us(s, "zkcoord-secure")
        print(f"| {p.scenario}: daemon CPU us/request | {p_us:.1f} | {s_us:.1f} | {s_us / p_us:.2f} |")
        print(f"| {p.scenario}: p50 ms | {p.p50_ms:.2f} | {s.p50_ms:.2f} | {s.p50_ms / p.p50_ms:.2f} |")
        print(f"| {p.scenario}: p99 ms | {p.p99_ms:.2f} | {s.p99_ms:.2f} | {s.p99_ms / p.p99_ms:.2f} |")
        errors = {**p.errors, **s.errors}
        if errors:
            print(f"| {p.scenario}: errors | {p.errors} | {s.errors} | |")
    print(f"| connection (+ TLS + login) median ms | {plain_login[0]:.2f} | {secure_login[0]:.2f} | "
          f"{secure_login[0] / plain_login[0]:.2f} |")
    print(f"| connection p99 ms | {plain_login[1]:.2f} | {secure_login[1]:.2f} | "
          f"{secure_login[1] / plain_login[1]:.2f} |")
    print(f"| ZooKeeper packets per connection | {plain_login[2]:.2f} | {secure_login[2]:.2f} | |")
    print(f"\ngoal: a SCRAM login costs at most one ZooKeeper read: "
          f"{'met' if secure_login[2] - plain_login[2] <= 1.0 else 'NOT met'} "
          f"({secure_login[2]:.2f} packets per login on the secure daemon, {plain_login[2]:.2f} on the plaintext one, "
          "pings included)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--paced-rate", type=int, default=5_000)
    parser.add_argument("--logins", type=int, default=200)
    args = parser.parse_args(argv)
    settings = Settings(members=args.members, groups=args.groups, duration_s=args.duration_s,
                        warmup_s=args.warmup_s, paced_rate=args.paced_rate, only=("heartbeat",))
    workdir = Path(tempfile.mkdtemp(prefix="zkcoord-bench-security-"))
    env = Environment(workdir, topic=COMMIT_TOPIC, topic_partitions=max(1, args.members // args.groups))
    secure_daemon = SecureDaemon(env, workdir)
    try:
        env.start()
        secure_daemon.start()
        print(f"plaintext daemon {env.daemon_address}, secure daemon {secure_daemon.address}; "
              f"{args.members} members in {args.groups} groups each", flush=True)
        plain = asyncio.run(measure(Target("plaintext", env.daemon_address), env, settings, args.logins))
        secure = asyncio.run(measure(Target("secure", secure_daemon.address, connect=secure_daemon.connect), env,
                                     settings, args.logins))
        report(plain, secure)
    finally:
        secure_daemon.stop()
        env.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
