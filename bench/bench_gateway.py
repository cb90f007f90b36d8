"""The gateway vs the broker: what a stock Kafka client pays for going through it.

On one sandbox (ZooKeeper 3.8, one Kafka 3.9 broker in ZooKeeper mode) and
one ``zkcoord run`` daemon with a gateway (``--gateway-listen``), the same
Kafka tool runs with ``bootstrap.servers`` set to the gateway, then to the
broker, nothing else changed; rounds alternate (gateway, direct, direct,
gateway, ...) so drift of the machine's load touches both sides alike:

* **consume**: ``org.apache.kafka.tools.ConsumerPerformance`` of the Kafka
  3.9.2 jars reads a topic of ``--records`` records of ``--record-size``
  bytes in full, each round in a fresh group. The topic is written once,
  directly to the broker, by ProducerPerformance. Reported: fetch MB/s (the
  tool's ``fetch.MB.sec``, which leaves out the group join), whole-run MB/s
  (``MB.sec``), and the CPU seconds of the daemon (the gateway's process) and
  of the broker per round, read from ``/proc/<pid>/stat``.
* **produce**: ``org.apache.kafka.tools.ProducerPerformance`` of Kafka 4.4
  (fetched on demand, ``zkcoord.local.jars.tools4_distribution``: 3.9's has
  no ``--warmup-records``, and its percentiles include the JVM's warm-up)
  sends ``--produce-records`` records at ``--produce-rate`` records/s,
  ``acks=all``; the first ``--produce-warmup-records`` are left out of the
  percentiles. Reported: the steady-state p50/p99/p99.9, and p99 through the
  gateway minus p99 direct.

Medians of each side, the ratios and the goals (fetch MB/s gateway/direct at
least 0.8, aim 0.95; p99 difference at most 2 ms) are printed at the end.
Run by hand, never by the tests; never asserts on time. Everything started
(sandbox, daemon, tool JVMs) is stopped on exit, on an error, on Ctrl-C and
on SIGTERM; the working directory keeps the logs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.support.java_tools

from bench_env import cpu_snapshot, sandbox_pids, sandbox_state, sandbox_up, zkcoord_cli  # noqa: E402
from group_client import BenchError, KafkaConnection, served_versions  # noqa: E402
from tests.support import java_tools  # noqa: E402
from tests.support.daemons import process_marker  # noqa: E402
from zkcoord.errors import ZkcoordError  # noqa: E402
from zkcoord.local import jars  # noqa: E402
from zkcoord.local.procs import free_port_range, port_open  # noqa: E402

CONSUME_TOPIC = "bench-gateway-consume"
PRODUCE_TOPIC = "bench-gateway-produce"
TARGETS = ("gateway", "direct")
FETCH, PRODUCE = 1, 0  # API keys
MB = 1024 * 1024  # the perf tools' "MB"
FETCH_GOAL, FETCH_AIM, P99_GOAL_MS = 0.8, 0.95, 2.0
# ProducerPerformance 4.x: "<n>[ steady state] records sent, <r> records/sec (<m> MB/sec), <avg> ms avg latency,
# <max> ms max latency, <p50> ms 50th, <p95> ms 95th, <p99> ms 99th, <p999> ms 99.9th."
PRODUCER_SUMMARY = re.compile(
    r"^(?P<sent>\d+)(?P<steady> steady state)? records sent, (?P<rps>\S+) records/sec \((?P<mbps>\S+) MB/sec\), "
    r"(?P<avg>\S+) ms avg latency, (?P<max>\S+) ms max latency, (?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, "
    r"(?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th\.$")
# Its progress line, every 5 s: "<n> records sent, <r> records/sec (<m> MB/sec), <avg> ms avg latency, <max> ms max latency."
PRODUCER_WINDOW = re.compile(r"^\d+ records sent, (?P<rps>\S+) records/sec \(\S+ MB/sec\), (?P<avg>\S+) ms avg latency, "
                             r"(?P<max>\S+) ms max latency\.$")
# --print-metrics lines "<group>:<name>:{client-id=...} : <value>" we keep (whole run, warm-up included).
PRODUCER_METRICS = ("request-latency-avg", "records-per-request-avg", "request-total")
PRODUCER_METRIC = re.compile(r"^producer-metrics:(?P<name>[a-z-]+):\{client-id=[^}]*\}\s*:\s*(?P<value>\S+)$")
# A produce round whose steady state ran below this share of --produce-rate, or with this p50, was queueing.
BEHIND_RATE, BEHIND_P50_MS = 0.9, 100


# -- the environment ---------------------------------------------------------------------------

class GatewayEnvironment:
    """A sandbox with one broker, two topics and one ``zkcoord run`` daemon
    whose gateway fronts that broker; ``stop()`` takes down whatever
    ``start()`` got to, so the caller can always call it.

    Like bench_env's Environment (a ``zkcoord local`` sandbox in the
    working directory, the daemon in a ZooKeeper chroot of its own with no
    initial rebalance delay, as the sandbox broker), plus the gateway: its
    own port P, broker <id> on P + 1 (``--gateway-broker-ids <id>-<id>``),
    and the daemon's ``--metrics-listen`` for its forwarded-request counters.
    """

    def __init__(self, workdir: Path, partitions: int, workers: int = 0) -> None:
        self.workdir = workdir
        self.partitions = partitions
        self.workers = workers
        self.state_dir = workdir / "sandbox"
        self.chroot = f"/zkcoord-bench-gateway-{os.getpid()}"
        self.daemon: subprocess.Popen | None = None
        self.kafka_address: tuple[str, int] | None = None
        self.gateway_address: tuple[str, int] | None = None
        self.metrics_port = 0
        self.broker_id = 0
        self.pids: dict[str, int] = {}
        self._sandbox_started = False

    @property
    def gateway(self) -> str:
        return "%s:%d" % self.gateway_address

    @property
    def broker(self) -> str:
        return "%s:%d" % self.kafka_address

    def _cli(self, *args: str, check: bool = True) -> str:
        return zkcoord_cli(*args, check=check)

    def start(self) -> None:
        if (self.state_dir / "sandbox.json").exists():
            raise BenchError(f"{self.state_dir} already holds a sandbox; the benchmark starts its own")
        self._sandbox_started = True
        env = sandbox_up(self.state_dir, "--brokers", "1")
        zookeeper, bootstrap = env["ZKCOORD_ZOOKEEPER"], env["ZKCOORD_BOOTSTRAP_SERVERS"].split(",")[0]
        host, port = bootstrap.rsplit(":", 1)
        self.kafka_address = (host, int(port))
        state = sandbox_state(self.state_dir)
        self.broker_id = int(state["brokers"][0]["name"].split("-", 1)[1])
        self.pids = sandbox_pids(state)
        self._create_topics()
        self._start_daemon(zookeeper)

    def _create_topics(self) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.broker, client_id="zkcoord-bench")
        try:
            admin.create_topics([NewTopic(topic, num_partitions=self.partitions, replication_factor=1)
                                 for topic in (CONSUME_TOPIC, PRODUCE_TOPIC)], wait_for_metadata=True)
        finally:
            admin.close()

    def _start_daemon(self, zookeeper: str) -> None:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=zookeeper)
        zk.start(timeout=15)
        try:
            zk.ensure_path(self.chroot)
        finally:
            zk.stop()
            zk.close()
        # the gateway's own port, broker <id>'s and, with workers, each worker's own port after it
        port = free_port_range(2 + max(self.workers, os.cpu_count() or 1))
        self.metrics_port = free_port_range(1 + max(self.workers, os.cpu_count() or 1))  # workers: M + k
        self.gateway_address = ("127.0.0.1", port)
        command = [sys.executable, "-m", "zkcoord", "run", "--zookeeper", zookeeper + self.chroot,
                   "--listen", "127.0.0.1:0", "--node-id", "1", "--group-initial-rebalance-delay-ms", "0",
                   "--bootstrap-servers", self.broker, "--gateway-listen", self.gateway,
                   "--gateway-broker-ids", f"{self.broker_id}-{self.broker_id}",
                   "--metrics-listen", f"127.0.0.1:{self.metrics_port}", "--workers", str(self.workers)]
        # Exactly these flags: no ZKCOORD_... setting (a config file, say) of the caller's.
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZKCOORD_")}
        with open(self.workdir / "zkcoord.log", "ab") as log:
            # Its own session: Ctrl-C reaches only us, and we stop it in order.
            self.daemon = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                           env=env, start_new_session=True)
        self.pids["zkcoord"] = self.daemon.pid
        deadline = time.monotonic() + 30
        while True:  # until the gateway answers ApiVersions with the broker's APIs (Fetch) too
            if self.daemon.poll() is not None:
                raise BenchError(f"zkcoord run exited with {self.daemon.returncode}; "
                                 f"see {self.workdir / 'zkcoord.log'}")
            try:
                if port_open(port + 1) and FETCH in versions(*self.gateway_address):
                    return
            except (OSError, ConnectionError, asyncio.TimeoutError, BenchError):
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"the gateway did not answer on {self.gateway} within 30 s; "
                                 f"see {self.workdir / 'zkcoord.log'}")
            time.sleep(0.2)

    def metrics(self) -> dict[str, float]:
        """The daemon's Prometheus samples, "name{labels}" -> value."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            text = response.read().decode()
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def stop(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)  # it releases its groups
            try:
                self.daemon.wait(20)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        if self._sandbox_started:
            print("stopping the sandbox ...", flush=True)
            self._cli("local", "down", "--state-dir", str(self.state_dir), check=False)


def versions(host: str, port: int) -> dict[int, tuple[int, int]]:
    async def ask():
        conn = await KafkaConnection.open(host, port, "zkcoord-bench")
        try:
            return await asyncio.wait_for(served_versions(conn), 10)
        finally:
            conn.close()
    return asyncio.run(ask())


# -- running the tools -------------------------------------------------------------------------

def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_java(classpath: str, main_class: str, args: list[str], *, timeout_s: float,
             log_path: Path) -> java_tools.ToolResult:
    """Run a Kafka tool to its exit (C2 and G1, as for a benchmark; the JVM in
    a session of its own, killed if we are interrupted) and keep its output
    in ``log_path``; :class:`JavaToolError` if it fails or times out."""
    cmd = [jars.find_java(), *java_tools.HEAP, *java_tools.JVM_COMMON, f"-Dzkcoord.marker={process_marker()}",
           f"-Dlog4j.configuration=file:{java_tools.log4j_config()}", "-cp", classpath, main_class, *args]
    env = {k: v for k, v in os.environ.items()
           if k not in {"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH"}}
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)
    what = ""
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        what = f"did not exit within {timeout_s:g} s (killed)"
    except BaseException:  # Ctrl-C, SIGTERM: leave no JVM behind
        proc.kill()
        proc.wait()
        raise
    result = java_tools.ToolResult(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
    log_path.write_text(f"$ {' '.join(cmd)}\n== exit {result.returncode}\n== stdout\n{result.stdout}\n"
                        f"== stderr\n{result.stderr}")
    if what or result.returncode != 0:
        raise java_tools.JavaToolError(
            f"{main_class.rsplit('.', 1)[-1]} {what or f'exited with {result.returncode}'} (log: {log_path})\n"
            f"  stderr:\n{java_tools._tail(result.stderr)}\n  stdout:\n{java_tools._tail(result.stdout)}")
    return result


def warnings_of(stderr: str) -> list[str]:
    """The tool's WARN/ERROR log lines (reload4j: "[time] LEVEL message (logger)")."""
    return [line for line in stderr.splitlines() if re.match(r"^\[[^]]+\] (WARN|ERROR|FATAL) ", line)]


@dataclass
class Round:
    phase: str  # "consume" or "produce"
    round: int
    target: str  # "gateway" or "direct"
    wall_s: float
    daemon_cpu_s: float
    broker_cpu_s: float
    zookeeper_cpu_s: float
    tool_cpu_s: float  # the tool's JVM
    other_cores: float  # everything else on the machine, in cores
    forwarded: dict[str, float]  # the gateway's forwarded requests in the round, by API
    connect_failures: float
    tool_warnings: list[str]
    result: dict = field(default_factory=dict)  # the tool's parsed numbers


class Meter:
    """CPU of the daemon, broker, ZooKeeper and tool JVM, and the gateway's
    counters, around one round."""

    def __init__(self, env: GatewayEnvironment) -> None:
        self.env = env

    def __enter__(self) -> Meter:
        self.cpu = cpu_snapshot(self.env.pids)
        self.children = _children_cpu_s()
        self.samples = self.env.metrics()
        return self

    def __exit__(self, *exc) -> None:
        self.cpu_after = cpu_snapshot(self.env.pids)
        self.children_after = _children_cpu_s()
        self.samples_after = self.env.metrics()

    def round(self, phase: str, number: int, target: str, result: dict, warnings: list[str]) -> Round:
        a, b = self.cpu, self.cpu_after
        wall = max(b.wall - a.wall, 1e-9)
        procs = {name: b.procs[name] - a.procs[name] for name in a.procs}
        tool = self.children_after - self.children
        me = b.client - a.client
        other = max(0.0, (b.machine - a.machine - sum(procs.values()) - tool - me) / wall)
        forwarded: dict[str, float] = {}
        failures = 0.0
        for name, value in self.samples_after.items():  # summed over the workers (worker="k" labels)
            found = re.fullmatch(r'zkcoord_gateway_forwarded_requests_total\{(?:worker="\d+",)?api="([^"]+)"\}', name)
            if found:
                forwarded[found.group(1)] = forwarded.get(found.group(1), 0.0) + value - self.samples.get(name, 0.0)
            if re.fullmatch(r'zkcoord_gateway_broker_connect_failures_total(\{worker="\d+"\})?', name):
                failures += value - self.samples.get(name, 0.0)
        return Round(phase, number, target, wall, procs["zkcoord"], procs["kafka"], procs["zookeeper"], tool, other,
                     {k: v for k, v in forwarded.items() if v}, failures, warnings, result)


def order(rounds: int) -> list[tuple[int, str]]:
    """gateway, direct, direct, gateway, gateway, direct, ...: each side
    first in every other pair, so a drift of the machine's speed is shared."""
    plan = []
    for number in range(1, rounds + 1):
        pair = TARGETS if number % 2 else TARGETS[::-1]
        plan += [(number, target) for target in pair]
    return plan


def run_phase(phase: str, warmup: int, rounds: int, run_round, describe) -> list[Round]:
    """An unmeasured round through the gateway first (with ``warmup``: the
    broker's first round after a topic was written or created was the
    slowest in every run, whichever side it fell on), then the measured
    rounds in :func:`order`."""
    if warmup:
        print(f"{phase} warm-up ({TARGETS[0]}, not measured) ...", flush=True)
        print(f"  {describe(run_round(0, TARGETS[0]).result)}", flush=True)
    done = []
    for number, target in order(rounds):
        print(f"{phase} round {number} {target} ...", flush=True)
        done.append(run_round(number, target))
        print(f"  {describe(done[-1].result)}", flush=True)
    return done


def load_topic(env: GatewayEnvironment, args, kafka_classpath: str) -> dict:
    """The consume topic, written once directly to the broker (3.9 ProducerPerformance, unthrottled)."""
    mb = args.records * args.record_size / MB
    print(f"writing {args.records:,} records of {args.record_size:,} B ({mb:,.1f} MB) to {CONSUME_TOPIC} "
          f"directly to the broker ...", flush=True)
    props = {"bootstrap.servers": env.broker, "acks": "all", "linger.ms": 10, "batch.size": 262144,
             **dict(p.split("=", 1) for p in args.producer_property)}
    tool_args = ["--topic", CONSUME_TOPIC, "--num-records", str(args.records), "--throughput", "-1",
                 "--record-size", str(args.record_size), "--producer-props", *(f"{k}={v}" for k, v in props.items())]
    started = time.perf_counter()
    result = run_java(kafka_classpath, java_tools.PRODUCER_PERFORMANCE, tool_args,
                      timeout_s=max(600.0, args.records / 1000), log_path=args.workdir / "load-producer.log")
    try:
        summary = java_tools.parse_producer_performance(result.stdout)
    except ValueError as exc:
        raise BenchError(f"the load: {exc} (see {args.workdir / 'load-producer.log'})") from None
    if summary.records_sent != args.records:
        raise BenchError(f"the load had {summary.records_sent} of {args.records} records acknowledged "
                         f"(see {args.workdir / 'load-producer.log'})")
    wall = time.perf_counter() - started
    print(f"  {summary.records_per_sec:,.0f} records/s, {summary.mb_per_sec:.1f} MB/s ({wall:.1f} s with the JVM)",
          flush=True)
    return {"records_per_sec": summary.records_per_sec, "mb_per_sec": summary.mb_per_sec, "wall_s": wall}


def consume_round(env: GatewayEnvironment, args, kafka_classpath: str, number: int, target: str) -> Round:
    bootstrap = env.gateway if target == "gateway" else env.broker
    group = f"bench-gw-{os.getpid()}-{number}-{target}"
    config = args.workdir / "consumer.properties"
    config.write_text("".join(f"{p}\n" for p in args.consumer_property))
    tool_args = ["--bootstrap-server", bootstrap, "--topic", CONSUME_TOPIC, "--messages", str(args.records),
                 "--timeout", str(args.consume_timeout_ms), "--group", group, "--consumer.config", str(config)]
    log_path = args.workdir / f"consume-{number}-{target}.log"
    with Meter(env) as meter:
        result = run_java(kafka_classpath, java_tools.CONSUMER_PERFORMANCE, tool_args,
                          timeout_s=max(600.0, args.records / 500), log_path=log_path)
    try:
        row = java_tools.parse_consumer_performance(result.stdout)
    except ValueError as exc:
        raise BenchError(f"ConsumerPerformance through {target}: {exc} (log: {log_path})") from None
    if row.messages_consumed < args.records:
        raise BenchError(f"ConsumerPerformance through {target} consumed {row.messages_consumed:,} of "
                         f"{args.records:,} records ({'; '.join(row.warnings)}; log: {log_path})")
    return meter.round("consume", number, target, asdict(row), warnings_of(result.stderr))


def produce_round(env: GatewayEnvironment, args, tools4_classpath: str, number: int, target: str) -> Round:
    bootstrap = env.gateway if target == "gateway" else env.broker
    props = {"acks": "all", **dict(p.split("=", 1) for p in args.producer_property)}
    tool_args = ["--bootstrap-server", bootstrap, "--topic", PRODUCE_TOPIC,
                 "--num-records", str(args.produce_records), "--warmup-records", str(args.produce_warmup_records),
                 "--throughput", str(args.produce_rate), "--record-size", str(args.record_size),
                 "--print-metrics", "--command-property", *(f"{k}={v}" for k, v in props.items())]
    log_path = args.workdir / f"produce-{number}-{target}.log"
    with Meter(env) as meter:
        result = run_java(tools4_classpath, java_tools.PRODUCER_PERFORMANCE, tool_args,
                          timeout_s=args.produce_records / args.produce_rate + 300, log_path=log_path)
    lines, windows, client = {}, [], {}
    for line in result.stdout.splitlines():
        metric = PRODUCER_METRIC.match(line.strip())
        if metric and metric.group("name") in PRODUCER_METRICS:
            try:
                client[metric.group("name")] = float(metric.group("value"))
            except ValueError:  # NaN and the like
                pass
        found = PRODUCER_SUMMARY.match(line.strip())
        if found:
            lines["steady" if found.group("steady") else "all"] = found.groupdict()
        window = PRODUCER_WINDOW.match(line.strip())
        if window:  # records/s, avg ms, max ms of a 5-second window
            windows.append([float(window.group("rps")), float(window.group("avg")), float(window.group("max"))])
    if "all" in lines and not args.produce_warmup_records:
        lines.setdefault("steady", lines["all"])  # no warm-up: no separate steady-state line
    if "steady" not in lines or "all" not in lines:
        raise BenchError(f"ProducerPerformance through {target} printed no whole-run and steady-state summary "
                         f"(log: {log_path})")
    if int(lines["all"]["sent"]) != args.produce_records:
        raise BenchError(f"ProducerPerformance through {target} had {lines['all']['sent']} of "
                         f"{args.produce_records:,} records acknowledged (log: {log_path})")
    steady = lines["steady"]
    parsed = {"steady_records": int(steady["sent"]), "records_per_sec": float(steady["rps"]),
              "mb_per_sec": float(steady["mbps"]), "avg_ms": float(steady["avg"]), "max_ms": float(steady["max"]),
              "p50_ms": int(steady["p50"]), "p95_ms": int(steady["p95"]), "p99_ms": int(steady["p99"]),
              "p999_ms": int(steady["p999"]), "all_p99_ms": int(lines["all"]["p99"]),
              "all_max_ms": float(lines["all"]["max"]), "windows": windows,
              "request_latency_avg_ms": client.get("request-latency-avg", float("nan")),
              "records_per_request": client.get("records-per-request-avg", float("nan")),
              "requests": client.get("request-total", float("nan"))}
    return meter.round("produce", number, target, parsed, warnings_of(result.stderr))


# -- the report --------------------------------------------------------------------------------

def _fmt_forwarded(r: Round, apis: tuple[str, ...]) -> str:
    return " ".join(f"{r.forwarded.get(api, 0):,.0f}" for api in apis)


def consume_table(rounds: list[Round]) -> None:
    print("\n== consume (ConsumerPerformance 3.9.2, whole topic, a fresh group per round) ==")
    head = (f"{'round':>5}  {'target':<8} {'fetch MB/s':>10} {'MB/s':>8} {'join ms':>8} {'fetch s':>8} "
            f"{'wall s':>7} {'daemon cpu s':>12} {'broker cpu s':>12} {'tool cpu s':>10} {'other cores':>11} "
            f"{'fwd Fetch':>9} {'warns':>5}")
    print(head)
    for r in rounds:
        x = r.result
        print(f"{r.round:>5}  {r.target:<8} {x['fetch_mb_per_sec']:>10.1f} {x['mb_per_sec']:>8.1f} "
              f"{x['rebalance_time_ms']:>8,} {x['fetch_time_ms'] / 1000:>8.2f} {r.wall_s:>7.1f} "
              f"{r.daemon_cpu_s:>12.2f} {r.broker_cpu_s:>12.2f} {r.tool_cpu_s:>10.2f} {r.other_cores:>11.2f} "
              f"{_fmt_forwarded(r, ('Fetch',)):>9} {len(r.tool_warnings):>5}")
    for target in TARGETS:
        mine = [r for r in rounds if r.target == target]
        if mine:
            med = lambda f: statistics.median(f(r) for r in mine)  # noqa: E731
            print(f"{'median':>5}  {target:<8} {med(lambda r: r.result['fetch_mb_per_sec']):>10.1f} "
                  f"{med(lambda r: r.result['mb_per_sec']):>8.1f} {med(lambda r: r.result['rebalance_time_ms']):>8,.0f} "
                  f"{med(lambda r: r.result['fetch_time_ms']) / 1000:>8.2f} {med(lambda r: r.wall_s):>7.1f} "
                  f"{med(lambda r: r.daemon_cpu_s):>12.2f} {med(lambda r: r.broker_cpu_s):>12.2f} "
                  f"{med(lambda r: r.tool_cpu_s):>10.2f} {med(lambda r: r.other_cores):>11.2f}")


def produce_table(rounds: list[Round], args) -> None:
    print(f"\n== produce latency (ProducerPerformance {jars.TOOLS4_KAFKA_VERSION}, {args.produce_rate:,} records/s, "
          f"acks=all; steady state: the last {args.produce_records - args.produce_warmup_records:,} of "
          f"{args.produce_records:,}) ==")
    print(f"{'round':>5}  {'target':<8} {'rec/s':>8} {'avg ms':>7} {'p50':>5} {'p95':>5} {'p99':>5} {'p99.9':>6} "
          f"{'max ms':>7} {'p99 all':>7} {'req ms':>6} {'rec/req':>7} {'daemon cpu s':>12} {'broker cpu s':>12} "
          f"{'tool cpu s':>10} {'other cores':>11} {'fwd Produce':>11} {'warns':>5}")
    for r in rounds:
        x = r.result
        print(f"{r.round:>5}  {r.target:<8} {x['records_per_sec']:>8,.0f} {x['avg_ms']:>7.2f} {x['p50_ms']:>5} "
              f"{x['p95_ms']:>5} {x['p99_ms']:>5} {x['p999_ms']:>6} {x['max_ms']:>7.0f} {x['all_p99_ms']:>7} "
              f"{x['request_latency_avg_ms']:>6.2f} {x['records_per_request']:>7.1f} {r.daemon_cpu_s:>12.2f} {r.broker_cpu_s:>12.2f} {r.tool_cpu_s:>10.2f} {r.other_cores:>11.2f} "
              f"{_fmt_forwarded(r, ('Produce',)):>11} {len(r.tool_warnings):>5}")
    for target in TARGETS:
        mine = [r for r in rounds if r.target == target]
        if mine:
            med = lambda key: statistics.median(r.result[key] for r in mine)  # noqa: E731
            print(f"{'median':>5}  {target:<8} {med('records_per_sec'):>8,.0f} {med('avg_ms'):>7.2f} "
                  f"{med('p50_ms'):>5g} {med('p95_ms'):>5g} {med('p99_ms'):>5g} {med('p999_ms'):>6g} "
                  f"{med('max_ms'):>7.0f} {med('all_p99_ms'):>7g} {med('request_latency_avg_ms'):>6.2f} "
                  f"{med('records_per_request'):>7.1f} "
                  f"{statistics.median(r.daemon_cpu_s for r in mine):>12.2f} "
                  f"{statistics.median(r.broker_cpu_s for r in mine):>12.2f} "
                  f"{statistics.median(r.tool_cpu_s for r in mine):>10.2f} "
                  f"{statistics.median(r.other_cores for r in mine):>11.2f}")


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def summary(consume: list[Round], produce: list[Round], args) -> dict:
    """Ratios and goals, from the medians."""
    print("\n== gateway vs direct (medians of this run) ==")
    out: dict = {}
    side = lambda rounds, target: [r for r in rounds if r.target == target]  # noqa: E731
    if side(consume, "gateway") and side(consume, "direct"):
        g, d = side(consume, "gateway"), side(consume, "direct")
        med = lambda rs, f: statistics.median(f(r) for r in rs)  # noqa: E731
        fetch = med(g, lambda r: r.result["fetch_mb_per_sec"]) / med(d, lambda r: r.result["fetch_mb_per_sec"])
        whole = med(g, lambda r: r.result["mb_per_sec"]) / med(d, lambda r: r.result["mb_per_sec"])
        mb = args.records * args.record_size / MB
        daemon_ms_per_mb = 1000 * med(g, lambda r: r.daemon_cpu_s) / mb
        broker_g = 1000 * med(g, lambda r: r.broker_cpu_s) / mb
        broker_d = 1000 * med(d, lambda r: r.broker_cpu_s) / mb
        out.update(fetch_ratio=fetch, whole_run_ratio=whole, daemon_cpu_ms_per_mb=daemon_ms_per_mb,
                   broker_cpu_ms_per_mb_gateway=broker_g, broker_cpu_ms_per_mb_direct=broker_d)
        print(f"consume fetch MB/s gateway/direct     {fetch:6.2f}   goal >= {FETCH_GOAL}: {_verdict(fetch >= FETCH_GOAL)}"
              f"; aim >= {FETCH_AIM}: {_verdict(fetch >= FETCH_AIM)}")
        print(f"consume whole-run MB/s gateway/direct {whole:6.2f}   (includes the group join)")
        print(f"CPU per MB consumed: daemon (gateway) {daemon_ms_per_mb:.2f} ms; broker {broker_g:.2f} ms through "
              f"the gateway, {broker_d:.2f} ms direct")
    if side(produce, "gateway") and side(produce, "direct"):
        g, d = side(produce, "gateway"), side(produce, "direct")
        med = lambda rs, key: statistics.median(r.result[key] for r in rs)  # noqa: E731
        diffs = {key: med(g, key) - med(d, key) for key in ("p50_ms", "p99_ms", "p999_ms", "avg_ms")}
        out.update(p99_diff_ms=diffs["p99_ms"], p50_diff_ms=diffs["p50_ms"], p999_diff_ms=diffs["p999_ms"],
                   avg_diff_ms=diffs["avg_ms"])
        print(f"produce p99 gateway - direct          {diffs['p99_ms']:+6g} ms   goal <= {P99_GOAL_MS:g} ms: "
              f"{_verdict(diffs['p99_ms'] <= P99_GOAL_MS)}  (the tool's latencies are whole ms)")
        print(f"produce p50 / p99.9 / avg difference  {diffs['p50_ms']:+g} / {diffs['p999_ms']:+g} / "
              f"{diffs['avg_ms']:+.2f} ms")
        rate = med(g, "records_per_sec") / med(d, "records_per_sec")
        print(f"produce rate gateway/direct           {rate:6.2f}   (both should be {args.produce_rate:,}/s)")
    return out


def checks(rounds: list[Round], env: GatewayEnvironment, args) -> list[str]:
    """Did the traffic take the path the row says, did a producer fall
    behind its rate, and did anything complain?"""
    notes = []
    for r in rounds:
        x = r.result
        if r.phase == "produce" and (x["records_per_sec"] < BEHIND_RATE * args.produce_rate
                                     or x["p50_ms"] > BEHIND_P50_MS):
            windows = ", ".join(f"{rps:,.0f}/s avg {avg:,.0f} ms" for rps, avg, _ in x["windows"]) or "none (< 5 s)"
            notes.append(f"produce round {r.round} {r.target}: the producer fell behind {args.produce_rate:,}/s "
                         f"(steady state {x['records_per_sec']:,.0f}/s, p50 {x['p50_ms']} ms): its latencies are "
                         f"mostly queueing in its buffer (requests of {x['records_per_request']:.0f} records took "
                         f"{x['request_latency_avg_ms']:.1f} ms on average); 5-s windows: {windows}")
        data_api = "Fetch" if r.phase == "consume" else "Produce"
        if r.target == "gateway" and not r.forwarded.get(data_api):
            notes.append(f"{r.phase} round {r.round} gateway: the gateway forwarded no {data_api} requests")
        if r.target == "direct" and r.forwarded:
            notes.append(f"{r.phase} round {r.round} direct: the gateway forwarded {r.forwarded} (expected nothing)")
        if r.connect_failures:
            notes.append(f"{r.phase} round {r.round} {r.target}: {r.connect_failures:g} gateway broker connect failures")
        for line in r.tool_warnings[:5]:
            notes.append(f"{r.phase} round {r.round} {r.target} tool: {line}")
        if len(r.tool_warnings) > 5:
            notes.append(f"{r.phase} round {r.round} {r.target} tool: ... {len(r.tool_warnings) - 5} more")
    log = env.workdir / "zkcoord.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    bad = [line for line in lines if re.search(r" (WARNING|ERROR|CRITICAL) |Traceback", line)]
    if bad:
        notes.append(f"daemon log {log}: {len(bad)} warning/error lines, first: {bad[0]}")
    return notes


# -- main --------------------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--only", default="consume,produce", help="consume, produce or both")
    p.add_argument("--records", type=int, default=2_000_000, help="records in the consume topic")
    p.add_argument("--record-size", type=int, default=1024, help="bytes per record (both phases)")
    p.add_argument("--partitions", type=int, default=6, help="partitions of each topic")
    p.add_argument("--consume-rounds", type=int, default=3, help="consume rounds per target")
    p.add_argument("--consume-warmup", type=int, choices=(0, 1), default=1,
                   help="1: one unmeasured consume of the whole topic (through the gateway) first")
    p.add_argument("--consume-timeout-ms", type=int, default=30_000,
                   help="ConsumerPerformance --timeout: longest wait for a record")
    p.add_argument("--produce-rounds", type=int, default=3, help="produce rounds per target")
    p.add_argument("--produce-warmup", type=int, choices=(0, 1), default=1,
                   help="1: one unmeasured produce round (through the gateway) first")
    p.add_argument("--produce-records", type=int, default=150_000, help="records per produce round, warm-up included")
    p.add_argument("--produce-warmup-records", type=int, default=50_000,
                   help="records of each produce round left out of its percentiles")
    p.add_argument("--produce-rate", type=int, default=10_000, help="records/s of each produce round")
    p.add_argument("--consumer-property", action="append", default=[], metavar="K=V",
                   help="extra consumer setting for every consume round (repeatable)")
    p.add_argument("--producer-property", action="append", default=[], metavar="K=V",
                   help="extra producer setting for the load and every produce round (repeatable)")
    p.add_argument("--workers", type=int, default=0,
                   help="the daemon's --workers (0: one per core, zkcoord run's default); its CPU counts them all")
    p.add_argument("--workdir", type=Path, help="where the sandbox and the logs go [a new /tmp/zkcoord-gateway-bench-*]")
    p.add_argument("--json", type=Path, help="also write every measurement here")
    args = p.parse_args(argv)
    args.only = tuple(s for s in args.only.split(",") if s)
    if not args.only or set(args.only) - {"consume", "produce"}:
        p.error("--only takes consume, produce or consume,produce")
    if min(args.records, args.record_size, args.partitions, args.consume_rounds, args.produce_rounds,
           args.produce_records, args.produce_rate) < 1:
        p.error("counts, sizes and rates must be at least 1")
    if not 0 <= args.produce_warmup_records < args.produce_records:
        p.error("--produce-warmup-records must be at least 0 and below --produce-records")
    bad = [x for x in args.consumer_property + args.producer_property if "=" not in x or not x.split("=", 1)[0]]
    if bad:
        p.error(f"{bad[0]!r}: expected K=V")
    return args


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # SIGTERM cleans up as Ctrl-C does


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    args.workdir = args.workdir or Path(tempfile.mkdtemp(prefix="zkcoord-gateway-bench-"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"gateway benchmark; workdir {args.workdir}; {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    env = GatewayEnvironment(args.workdir, args.partitions, args.workers)
    consume: list[Round] = []
    produce: list[Round] = []
    code = 1
    try:
        kafka_classpath = jars.kafka_distribution(print).classpath
        tools4_classpath = jars.tools4_distribution(print).classpath if "produce" in args.only else ""
        env.start()
        print(f"broker {env.broker} (id {env.broker_id}); gateway {env.gateway} (broker {env.broker_id} on "
              f"{env.gateway_address[1] + 1}); daemon log {args.workdir / 'zkcoord.log'}", flush=True)
        served = {"gateway": versions(*env.gateway_address), "direct": versions(*env.kafka_address)}
        for api, name in ((FETCH, "Fetch"), (PRODUCE, "Produce")):
            print(f"  {name} versions: gateway v{served['gateway'][api][0]}-{served['gateway'][api][1]}, "
                  f"broker v{served['direct'][api][0]}-{served['direct'][api][1]}", flush=True)
        load = None
        if "consume" in args.only:
            load = load_topic(env, args, kafka_classpath)
            consume = run_phase("consume", args.consume_warmup, args.consume_rounds,
                                lambda number, target: consume_round(env, args, kafka_classpath, number, target),
                                lambda x: f"fetch {x['fetch_mb_per_sec']:.1f} MB/s, whole run {x['mb_per_sec']:.1f} MB/s")
        if "produce" in args.only:
            produce = run_phase("produce", args.produce_warmup, args.produce_rounds,
                                lambda number, target: produce_round(env, args, tools4_classpath, number, target),
                                lambda x: f"p50 {x['p50_ms']} ms, p99 {x['p99_ms']} ms, p99.9 {x['p999_ms']} ms")
        if consume:
            consume_table(consume)
        if produce:
            produce_table(produce, args)
        ratios = summary(consume, produce, args)
        notes = checks(consume + produce, env, args)
        print("\n== checks ==")
        for note in notes or ["gateway rounds went through the gateway, direct rounds did not; "
                              "no tool warnings, no daemon log warnings"]:
            print(f"  {note}")
        print(f"\nload average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}; settings: "
              f"{json.dumps({k: str(v) for k, v in vars(args).items()})}")
        if args.json:
            args.json.write_text(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()},
                                             "versions": served, "load": load, "ratios": ratios, "notes": notes,
                                             "rounds": [asdict(r) for r in consume + produce]}, indent=1))
        code = 0
    except KeyboardInterrupt:
        print("\ninterrupted; stopping everything", file=sys.stderr)
        code = 130
    except (BenchError, ZkcoordError, java_tools.JavaToolError, OSError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # let the cleanup finish
            signal.signal(sig, signal.SIG_IGN)
        env.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    print(f"logs in {args.workdir}")
    return code


if __name__ == "__main__":
    sys.exit(main())
