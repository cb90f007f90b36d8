"""Ten thousand single-member groups on two daemons: creation, memory, heartbeats, fail-over, stop.

Issue 27, item 3. Run by hand; it prints figures and the goals they are held
against, and never asserts::

    python bench/bench_scale.py                                   # its own sandbox, 10,000 groups
    python bench/bench_scale.py --zookeeper 127.0.0.1:2181        # an existing ZooKeeper (a chroot of its own)
    python bench/bench_scale.py --groups 2000 --window-s 15       # quicker
    python bench/bench_scale.py --daemon-workers 2                # each daemon two workers (the default on 2 cores)
    python bench/bench_scale.py --target kafka                    # the peer: the same members on Kafka's coordinator

What it starts: ZooKeeper (``zkcoord local up`` in ``<workdir>/sandbox``,
unless ``--zookeeper`` names one), and two ``zkcoord run`` daemons (node ids 1
and 2, a ZooKeeper chroot of their own, ``--zk-session-timeout-ms``), as
processes, ``--workers 1`` each unless ``--daemon-workers N`` (then each
daemon is N worker processes, N nodes in the elections, under a supervisor:
its figures are the sum of them, its loop lateness each worker's, and the
kill -9 is of the supervisor, its workers dying with it); their logs are
``<workdir>/daemon-<id>.log``. The load generator
is ``--load-processes`` processes (2 by default), each with every N-th member
on an asyncio loop of its own, one connection per member (``group_client``'s
codec: kafka-python's message classes), each group one member, each member
heartbeating every ``--heartbeat-interval-ms`` on its own connection; this
process runs the phases and collects what they record (one process with
10,000 connections was late by 7-13 ms at p99 on its own loop, a latency
the daemons did not cause).

The phases, in order:

1. **create**: ``--groups`` groups, ``--create-concurrency`` at a time: each
   member looks its coordinator up (FindCoordinator, on a connection to one
   of the daemons), connects to it, joins (twice: MEMBER_ID_REQUIRED) and
   syncs; members already created heartbeat meanwhile. Printed: groups
   created per second over the first and over the last 1,000.
2. **steady, two daemons**: a ``--window-s`` window: heartbeat latency
   p50/p99/max (client side, send to decoded answer), cores used, memory per
   group (the daemons' RSS growth since they started, over the groups).
3. **kill -9**: the daemon that owns more groups is killed. Its members see
   their connection reset and do what the Java consumer does: look the
   coordinator up again (backoff 100 ms doubling to 1 s, KIP-580), connect,
   heartbeat (rejoin when told). Printed: when ZooKeeper expired the dead
   daemon's session, and the time from the kill to each of its groups being
   served again (its member's first answered heartbeat or SyncGroup): p50,
   max, against the goal of the ZooKeeper session timeout + 2 s. Also the
   kernel's ListenOverflows/ListenDrops during the fail-over (machine-wide
   counters of /proc/net/netstat: other processes' listeners count too).
4. **steady, one daemon**: the survivor now has every group: the same window
   figures ("10,000 groups on one daemon": memory per group is its RSS
   growth since it started, over the groups). The window starts once the
   survivor's log says its takeover ended: it answers a loading group's
   heartbeats at once, so the last member can be served while the last
   batches still load, and that tail is the fail-over's, not steady state.
5. **graceful stop**: the killed daemon is started again, and the survivor
   gets SIGTERM: how long it took to exit (its groups released within
   ``--shutdown-timeout-ms``?), what its log says about the release, and
   the time from the SIGTERM to each group being served again by the other.

Every request has a time-out (``--request-timeout-ms``, 30 s as the Java
client's ``request.timeout.ms``): a connection whose request is not answered
is closed and the member looks its coordinator up again, as a Java client
does with a connection the server never accepted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_env import (  # noqa: E402
    bench_main, cpu_cores, cpu_snapshot, sandbox_pids, sandbox_state, sandbox_up, zkcoord_cli,
)
from group_client import (  # noqa: E402
    COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, ILLEGAL_GENERATION, MEMBER_ID_REQUIRED, NONE,
    NOT_COORDINATOR, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, BenchError, KafkaConnection, RequestTemplate,
    build_message, common_versions, range_assignment, served_versions,
)
from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest  # noqa: E402
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription  # noqa: E402
from kafka.protocol.metadata import FindCoordinatorRequest  # noqa: E402
from zkcoord.local.procs import free_port, free_port_range  # noqa: E402

TOPIC = "scale-topic"
DISCONNECTED = -1  # a member's "error code" for a connection that failed or a request that timed out
REJOIN_CODES = {UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS}
FIRST_LAST = 1_000  # creation rate over the first and the last this many groups


@dataclass
class Settings:
    groups: int = 10_000
    heartbeat_interval_ms: int = 3_000
    session_timeout_ms: int = 30_000  # the members'
    zk_session_timeout_ms: int = 10_000  # the daemons' (their default)
    shutdown_timeout_ms: int = 5_000  # the daemons' (their default)
    create_concurrency: int = 32
    create_heartbeats: str = "on"  # off: members heartbeat only once every group exists (10-minute sessions)
    window_s: float = 30.0
    request_timeout_ms: int = 30_000
    recover_wait_s: float = 180.0
    zookeeper: str = ""
    load_processes: int = 2
    daemon_workers: int = 1
    target: str = "zkcoord"
    daemon_args: tuple[str, ...] = ()


# -- the daemons ---------------------------------------------------------------------

@dataclass
class Daemon:
    """One ``zkcoord run``: ``node_id`` is its ``--node-id`` (its first worker's);
    ``nodes``: every worker's node id -> the worker's pid (with ``--workers 1``
    the one process's)."""

    node_id: int
    port: int
    proc: subprocess.Popen
    log_path: Path
    metrics_port: int = 0
    start_rss_kb: int = 0
    nodes: dict[int, int] = field(default_factory=dict)

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    @property
    def name(self) -> str:
        return f"node {self.node_id}" if len(self.nodes) < 2 else \
            f"daemon {self.node_id} (nodes {', '.join(map(str, sorted(self.nodes)))})"

    def pids(self) -> dict[str, int]:
        """Its process by name, for ``cpu_snapshot`` (which counts a supervisor's live workers with it)."""
        return {f"zkcoord-{self.node_id}": self.proc.pid}

    def rss_kb(self) -> int:
        """The resident memory of its process, and of its workers' under a supervisor."""
        return sum(rss_kb(pid) for pid in {self.proc.pid, *self.nodes.values()})

    def alive(self) -> bool:
        return self.proc.poll() is None

    def loop_lag_buckets(self) -> dict[str, dict[float, float]]:
        """Each worker's ``zkcoord_event_loop_lag_seconds`` histogram now (the
        supervisor's endpoint labels them ``worker="k"``; one process: key ""):
        {worker: {upper bound: cumulative count}}."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as answer:
                text = answer.read().decode()
        except OSError:
            return {}
        found: dict[str, dict[float, float]] = {}
        for labels, count in re.findall(r'^zkcoord_event_loop_lag_seconds_bucket\{([^}]*)\} (\S+)$', text, re.M):
            pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            found.setdefault(pairs.get("worker", ""), {})[float(pairs["le"])] = float(count)
        return found


class Fleet:
    """The ZooKeeper (own sandbox or given), the chroot, the daemons; ``stop()`` takes down what was started."""

    def __init__(self, workdir: Path, settings: Settings) -> None:
        self.workdir, self.settings = workdir, settings
        self.chroot = f"/zkcoord-scale-{os.getpid()}"
        self.zookeeper = settings.zookeeper
        self.daemons: dict[int, Daemon] = {}
        self._sandbox = False
        self.env: dict[str, str] = {}  # the sandbox's `local env`, when the benchmark started one
        self.zk = None
        self.load: LoadHub | None = None  # the load processes, killed by stop() if still running

    def start_zookeeper(self) -> None:
        from kazoo.client import KazooClient

        if not self.zookeeper:
            self._sandbox = True
            self.env = sandbox_up(self.workdir / "sandbox")
            self.zookeeper = self.env["ZKCOORD_ZOOKEEPER"]
        self.zk = KazooClient(hosts=self.zookeeper)
        self.zk.start(timeout=15)
        self.zk.ensure_path(self.chroot)

    def start_daemon(self, node_id: int) -> Daemon:
        s = self.settings
        workers = s.daemon_workers
        if workers == 1:
            port, metrics_port = free_port(), free_port()
        else:  # the shared ports and, after them, each worker's own
            port = free_port_range(1 + workers)
            metrics_port = free_port_range(1 + workers, avoid=frozenset(range(port, port + 1 + workers)))
        command = [sys.executable, "-m", "zkcoord", "run", "--zookeeper", self.zookeeper + self.chroot,
                   "--listen", f"127.0.0.1:{port}", "--node-id", str(node_id),
                   "--metrics-listen", f"127.0.0.1:{metrics_port}",
                   "--group-initial-rebalance-delay-ms", "0", "--zk-session-timeout-ms", str(s.zk_session_timeout_ms),
                   "--shutdown-timeout-ms", str(s.shutdown_timeout_ms),
                   "--workers", str(workers),  # 1: one process, its pid, RSS and groups the node's
                   *s.daemon_args]
        log_path = self.workdir / f"daemon-{node_id}.log"
        with open(log_path, "ab") as log:  # a session of its own: Ctrl-C reaches only us
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        daemon = Daemon(node_id, port, proc, log_path, metrics_port)
        self.daemons[node_id] = daemon
        deadline = time.monotonic() + 60
        while len(daemon.nodes) < workers:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"daemon {node_id} did not start; see {log_path}")
            time.sleep(0.1)
            daemon.nodes = self.registered_nodes({proc.pid} | child_pids(proc.pid))
        time.sleep(1.0)  # let it settle before its starting RSS is read
        daemon.start_rss_kb = daemon.rss_kb()
        return daemon

    def registered_nodes(self, pids: set[int]) -> dict[int, int]:
        """The registered node ids whose pid is one of ``pids`` -> that pid."""
        from kazoo.exceptions import NoNodeError

        try:
            children = self.zk.get_children(f"{self.chroot}/zkcoord/nodes")
        except NoNodeError:
            return {}
        found = {}
        for child in children:
            pid = self.registered_pid(int(child))
            if pid in pids:
                found[int(child)] = pid
        return found

    def registered_pid(self, node_id: int) -> int | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.zk.get(f"{self.chroot}/zkcoord/nodes/{node_id}")
        except NoNodeError:
            return None
        return json.loads(data).get("pid")

    def bootstrap(self) -> list[tuple[str, int]]:
        return [d.address for d in self.daemons.values() if d.alive()]

    def stop(self) -> None:
        if self.load is not None:
            self.load.kill()
        for daemon in self.daemons.values():
            if daemon.alive():
                daemon.proc.send_signal(signal.SIGTERM)
        for daemon in self.daemons.values():
            try:
                daemon.proc.wait(30)
            except subprocess.TimeoutExpired:
                daemon.proc.kill()
                daemon.proc.wait()
        if self.zk is not None:
            try:
                self.zk.stop()
                self.zk.close()
            except Exception as exc:  # keep cleaning up
                print(f"warning: closing the ZooKeeper client: {exc!r}", file=sys.stderr)
        if self._sandbox:
            print("stopping the sandbox ...", flush=True)
            zkcoord_cli("local", "down", "--state-dir", str(self.workdir / "sandbox"), check=False)


def rss_kb(pid: int) -> int:
    """A process's resident memory (0 when it is gone)."""
    try:
        found = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    except OSError:
        return 0
    return int(found.group(1)) if found else 0


def child_pids(pid: int) -> set[int]:
    try:
        return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


# -- the members ---------------------------------------------------------------------

class Backoff:
    """KIP-580's exponential retry backoff: 100 ms doubling to 1 s, 20% jitter."""

    def __init__(self) -> None:
        self.delay = 0.1

    async def sleep(self) -> None:
        await asyncio.sleep(self.delay * random.uniform(0.8, 1.2))
        self.delay = min(self.delay * 2, 1.0)


@dataclass
class Load:
    """What every member shares: settings, versions, the bootstrap list, the recordings."""

    settings: Settings
    versions: dict[str, int]
    bootstrap: list[tuple[str, int]]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    latencies: list[tuple[float, float]] | None = None  # (sent at, seconds) per heartbeat, while a window records
    created: list[float] = field(default_factory=list)  # perf_counter of each group's first SyncGroup
    since: float | None = None  # when the fault being measured was injected
    served: dict[str, float] = field(default_factory=dict)  # group -> seconds from `since` to served again
    failures: dict[str, int] = field(default_factory=dict)
    heartbeating: asyncio.Event = field(default_factory=asyncio.Event)  # set at once with --create-heartbeats on

    def fail(self, what: str) -> None:
        self.failures[what] = self.failures.get(what, 0) + 1


class ScaleMember:
    """One group's only member, on a connection of its own."""

    def __init__(self, load: Load, group: str, index: int) -> None:
        self.load, self.group, self.index = load, group, index
        self.conn: KafkaConnection | None = None  # to the coordinator
        self.lookup: KafkaConnection | None = None  # to a bootstrap daemon, for FindCoordinator
        self.lookup_address: tuple[str, int] | None = None
        self.attempts = 0
        self.coordinator: tuple[int, str, int] | None = None
        self.member_id, self.generation = "", -1
        self.subscription = bytes(ConsumerProtocolSubscription(version=0, topics=[TOPIC], user_data=None).encode())
        self.heartbeat: RequestTemplate | None = None
        self.lost_since: float | None = None  # the fault's `since` when this member lost its coordinator

    # -- requests with a time-out -------------------------------------------------------
    async def _call(self, conn: KafkaConnection, request):
        future = conn.call_template(request) if isinstance(request, RequestTemplate) else conn.call(request)
        try:
            return await asyncio.wait_for(future, self.load.settings.request_timeout_ms / 1000)
        except asyncio.TimeoutError:
            conn.close()  # as a Java client does: the connection is given up
            self.load.fail("request timed out")
            raise ConnectionError("request timed out") from None

    async def _open(self, host: str, port: int) -> KafkaConnection:
        try:
            return await asyncio.wait_for(KafkaConnection.open(host, port, f"scale-{self.index}"), 10)
        except asyncio.TimeoutError:
            self.load.fail("connect timed out")
            raise ConnectionError("connect timed out") from None

    # -- finding the coordinator ---------------------------------------------------------
    async def connect(self) -> None:
        """Look the coordinator up and connect to it. The lookup goes over a
        connection to a bootstrap daemon that is kept while the member
        recovers (a Java client keeps its connection to the least loaded
        node), and becomes the coordinator connection when it is the
        coordinator's."""
        self.close()
        if self.lookup is None or not usable(self.lookup):
            self._drop_lookup()
            bootstrap = self.load.bootstrap
            self.lookup_address = bootstrap[(self.index + self.attempts) % len(bootstrap)]
            self.attempts += 1
            self.lookup = await self._open(*self.lookup_address)
        answer = await self._call(self.lookup, build_message(
            FindCoordinatorRequest, self.load.versions["FindCoordinator"], key=self.group, key_type=0))
        if answer.error_code != NONE:
            raise ConnectionError(f"FindCoordinator: error {answer.error_code}")
        self.coordinator = (answer.node_id, answer.host, answer.port)
        if (answer.host, answer.port) == self.lookup_address:
            self.conn, self.lookup = self.lookup, None
        else:
            self.conn = await self._open(answer.host, answer.port)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _drop_lookup(self) -> None:
        if self.lookup is not None:
            self.lookup.close()
            self.lookup = None

    # -- the group protocol --------------------------------------------------------------
    async def join_and_sync(self) -> int:
        versions = self.load.versions
        while True:
            joined = await self._call(self.conn, build_message(
                JoinGroupRequest, versions["JoinGroup"], group_id=self.group,
                session_timeout_ms=self.load.settings.session_timeout_ms,
                rebalance_timeout_ms=self.load.settings.session_timeout_ms, member_id=self.member_id,
                group_instance_id=None, protocol_type="consumer",
                protocols=[{"name": "range", "metadata": self.subscription}], reason=None))
            if joined.error_code == MEMBER_ID_REQUIRED:
                self.member_id = joined.member_id
                continue
            if joined.error_code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
            if joined.error_code != NONE:
                return joined.error_code
            self.generation = joined.generation_id
            assignments = []
            if joined.leader == self.member_id:
                assignments = [{"member_id": m, "assignment": a}
                               for m, a in range_assignment([m.member_id for m in joined.members], TOPIC, 1).items()]
            synced = await self._call(self.conn, build_message(
                SyncGroupRequest, versions["SyncGroup"], group_id=self.group, generation_id=self.generation,
                member_id=self.member_id, group_instance_id=None, protocol_type="consumer", protocol_name="range",
                assignments=assignments))
            if synced.error_code == NONE:
                self.heartbeat = RequestTemplate(build_message(
                    HeartbeatRequest, versions["Heartbeat"], group_id=self.group, generation_id=self.generation,
                    member_id=self.member_id, group_instance_id=None), self.conn.client_id)
            return synced.error_code

    async def create(self) -> None:
        """Look up, connect, join and sync until Stable."""
        backoff = Backoff()
        while True:
            try:
                if self.conn is None:
                    await self.connect()
                code = await self.join_and_sync()
            except (ConnectionError, OSError) as exc:
                self.load.fail(f"create: {type(exc).__name__}")
                self.close()
                code = DISCONNECTED
            if code == NONE:
                self._drop_lookup()
                return
            if code not in (DISCONNECTED, COORDINATOR_LOAD_IN_PROGRESS, REBALANCE_IN_PROGRESS):
                self.load.fail(f"create: error {code}")
            if code in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE):
                self.close()
            await backoff.sleep()

    async def live(self, gate: asyncio.Semaphore) -> None:
        """Create the group, then heartbeat until the load stops; recover from any fault."""
        async with gate:
            await self.create()
            self.load.created.append(time.perf_counter())
        await self.load.heartbeating.wait()
        interval = self.load.settings.heartbeat_interval_ms / 1000
        await asyncio.sleep(random.uniform(0, interval))
        while not self.load.stop.is_set():
            started = time.perf_counter()
            try:
                code = (await self._call(self.conn, self.heartbeat)).error_code if self.conn else DISCONNECTED
            except (ConnectionError, OSError):
                code = DISCONNECTED
            if code == NONE:
                if self.load.latencies is not None:
                    self.load.latencies.append((started, time.perf_counter() - started))
                self._served()
                # The next one is due an interval after this one was sent, as Java's consumer times it
                # (Heartbeat.sentHeartbeat resets its timer at the send): a late answer does not move the
                # member's phase. (Sleeping the interval after the answer did: the members answered together
                # after any stall sent together from then on, and the bunches only grew.)
                await asyncio.sleep(max(0.0, started + interval - time.perf_counter()))
                continue
            sent = await self.recover(code)
            await asyncio.sleep(max(0.0, sent + interval - time.perf_counter()))

    async def recover(self, code: int) -> float:
        """What a Java consumer does when its coordinator fails it: look it up again
        (with backoff), connect, heartbeat; rejoin when told. Returns when the
        heartbeat that succeeded was sent (or the rejoin ended): the next is due
        an interval after (a heartbeat held while the group was taken over does
        not move the member's phase to the moment it was answered)."""
        if self.lost_since is None:
            self.lost_since = self.load.since
        backoff = Backoff()
        sent = time.perf_counter()
        while not self.load.stop.is_set():
            try:
                if code in (DISCONNECTED, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) or self.conn is None:
                    await self.connect()
                    sent = time.perf_counter()
                    code = (await self._call(self.conn, self.heartbeat)).error_code
                elif code in REJOIN_CODES:
                    code = await self.join_and_sync()
                    sent = time.perf_counter()
                else:
                    sent = time.perf_counter()
                    code = (await self._call(self.conn, self.heartbeat)).error_code
            except (ConnectionError, OSError):
                self.close()
                code = DISCONNECTED
            if code == NONE:
                self._served()
                return sent
            if code == UNKNOWN_MEMBER_ID:
                self.member_id = ""
            await backoff.sleep()
        return sent

    def _served(self) -> None:
        if self.lost_since is not None:
            self._drop_lookup()
            if self.lost_since == self.load.since and self.group not in self.load.served:
                self.load.served[self.group] = time.perf_counter() - self.load.since
            self.lost_since = None


def usable(conn: KafkaConnection) -> bool:
    return conn._lost is None and conn._transport is not None and not conn._transport.is_closing()


# -- the load processes ------------------------------------------------------------------
# Times are time.perf_counter(): CLOCK_MONOTONIC on Linux, the same clock in every process.

class LoadHub:
    """The members, in ``--load-processes`` processes of their own: this
    process tells them the phases and collects what they record (groups
    created, groups served again after a fault, failures, a window's
    latencies)."""

    def __init__(self, settings: Settings, versions: dict[str, int], bootstrap: list[tuple[str, int]], run: str):
        context = multiprocessing.get_context("spawn")  # this process has kazoo's threads: no fork
        self.created: list[float] = []
        self.served: dict[str, float] = {}
        self.failures: dict[str, int] = {}
        self.errors: list[str] = []
        self._since: float | None = None
        self._children = []
        n = settings.load_processes
        for share in range(n):
            ours, theirs = context.Pipe()
            proc = context.Process(target=load_process, args=(theirs, settings, versions, bootstrap, run, share, n),
                                   name=f"scale-load-{share}", daemon=True)
            proc.start()
            theirs.close()
            replies: queue.Queue = queue.Queue()
            threading.Thread(target=self._read, args=(ours, replies), daemon=True).start()
            self._children.append((proc, ours, replies))

    @property
    def pids(self) -> dict[str, int]:
        return {f"load-{i}": proc.pid for i, (proc, _, _) in enumerate(self._children)}

    def _read(self, conn, replies: queue.Queue) -> None:
        failures: dict[str, int] = {}
        while True:
            try:
                kind, *args = conn.recv()
            except (EOFError, OSError):
                replies.put(("gone",))
                return
            if kind == "created":
                self.created.extend(args[0])
            elif kind == "served":
                since, items = args
                if since == self._since:
                    self.served.update(items)
            elif kind == "failures":
                for what, count in args[0].items():
                    self.failures[what] = self.failures.get(what, 0) + count - failures.get(what, 0)
                failures = dict(args[0])
            elif kind == "error":
                self.errors.append(args[0])
            else:
                replies.put((kind, *args))

    def _send(self, *command) -> None:
        for proc, conn, _ in self._children:
            if self.errors:
                raise BenchError(f"a load process failed: {self.errors[0]}")
            conn.send(command)

    async def _gather(self, kind: str) -> list:
        answers = []
        for proc, _, replies in self._children:
            answer = await asyncio.to_thread(replies.get)
            if answer[0] != kind:
                raise BenchError(f"load process {proc.pid}: {answer!r} where {kind!r} was expected"
                                 + (f" ({self.errors[0]})" if self.errors else ""))
            answers.append(answer[1:])
        return answers

    def check(self) -> None:
        if self.errors:
            raise BenchError(f"a member failed: {self.errors[0]}")

    @property
    def since(self) -> float | None:
        return self._since

    async def set_since(self, value: float | None) -> None:
        """The fault being measured is injected at ``value``: served times count
        from it (None: none). Returns once every load process has it, so a member
        that loses its coordinator to the fault injected next counts from it."""
        self.served = {}
        self._since = value
        self._send("since", value)
        await self._gather("since_set")

    def set_bootstrap(self, bootstrap: list[tuple[str, int]]) -> None:
        self._send("bootstrap", bootstrap)

    def settled(self) -> None:
        """Every group exists: heartbeats go on (or start), the collector is tuned."""
        self._send("settled")

    async def window(self, measure) -> tuple[list[float], list[float], list[float]]:
        """``await measure()`` while the members record their heartbeats'
        latencies: (latencies, loop lags, collector pauses) of every process."""
        self._send("window_start")
        await self._gather("window_started")
        await measure()
        self._send("window_end")
        latencies, lags, pauses = [], [], []
        for got, lag, paused in await self._gather("window"):
            latencies += got
            lags += lag
            pauses += paused
        return latencies, lags, pauses

    async def coordinators(self) -> dict[str, int]:
        """group -> the node id of its coordinator, as each member last found it."""
        self._send("coordinators")
        found: dict[str, int] = {}
        for (answer,) in await self._gather("coordinators"):
            found.update(answer)
        return found

    async def stop(self) -> None:
        self._send("stop")
        await self._gather("stopped")
        for proc, conn, _ in self._children:
            proc.join(10)
            conn.close()

    def kill(self) -> None:
        for proc, _, _ in self._children:
            if proc.is_alive():
                proc.kill()


def load_process(conn, settings: Settings, versions: dict[str, int], bootstrap: list[tuple[str, int]], run: str,
                 share: int, shares: int) -> None:
    """One load process: members ``share``, ``share + shares``, ... on an event loop of its own."""
    try:
        import uvloop
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        runner.run(_load_process(conn, settings, versions, bootstrap, run, share, shares))


async def _load_process(conn, settings: Settings, versions: dict[str, int], bootstrap: list[tuple[str, int]],
                        run: str, share: int, shares: int) -> None:
    loop = asyncio.get_running_loop()
    load = Load(settings, versions, list(bootstrap))
    if settings.create_heartbeats == "on":
        load.heartbeating.set()
    members = [ScaleMember(load, f"scale-{run}-{i:05d}", i) for i in range(share, settings.groups, shares)]
    gate = asyncio.Semaphore(max(1, settings.create_concurrency // shares))
    tasks = [asyncio.ensure_future(m.live(gate)) for m in members]
    commands: asyncio.Queue = asyncio.Queue()

    def read_commands() -> None:
        while True:
            try:
                command = conn.recv()
            except (EOFError, OSError):
                command = ("stop",)
            loop.call_soon_threadsafe(commands.put_nowait, command)
            if command[0] == "stop":
                return

    threading.Thread(target=read_commands, daemon=True).start()
    sent = {"created": 0, "served": set()}

    def report() -> None:
        if len(load.created) > sent["created"]:
            conn.send(("created", load.created[sent["created"]:]))
            sent["created"] = len(load.created)
        fresh = {g: t for g, t in load.served.items() if g not in sent["served"]}
        if fresh:
            conn.send(("served", load.since, fresh))
            sent["served"].update(fresh)
        conn.send(("failures", dict(load.failures)))
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                conn.send(("error", repr(task.exception())))
                tasks.remove(task)
                break

    async def reporting() -> None:
        while not load.stop.is_set():
            report()
            await asyncio.sleep(0.05)

    reporter = asyncio.ensure_future(reporting())
    lags: list[float] = []
    lag_stop = asyncio.Event()
    lagging = None
    while True:
        command, *args = await commands.get()
        if command == "settled":
            load.heartbeating.set()
            tune_collector()
        elif command == "since":
            load.served, sent["served"] = {}, set()
            load.since = args[0]
            conn.send(("since_set",))
        elif command == "bootstrap":
            load.bootstrap[:] = args[0]
        elif command == "window_start":
            PAUSES.take()
            load.latencies, lags, lag_stop = [], [], asyncio.Event()
            lagging = asyncio.ensure_future(loop_lag(lags, lag_stop))
            conn.send(("window_started",))
        elif command == "window_end":
            latencies, load.latencies = load.latencies or [], None
            lag_stop.set()
            if lagging is not None:
                await lagging
            conn.send(("window", latencies, lags, PAUSES.take()))
        elif command == "coordinators":
            conn.send(("coordinators", {m.group: m.coordinator[0] for m in members if m.coordinator}))
        elif command == "stop":
            load.stop.set()
            for member in members:
                member.close()
                member._drop_lookup()
            await asyncio.gather(*tasks, return_exceptions=True)
            await reporter
            report()
            conn.send(("stopped",))
            return


# -- measuring -----------------------------------------------------------------------

def tune_collector() -> None:
    """The load generator holds 10,000 members' objects: with the default
    thresholds its cyclic collector's full passes stop it for hundreds of
    milliseconds, seen as heartbeat latency. What exists once the groups are
    created is frozen and the youngest generation collected less often, as
    the daemon does (zkcoord.server.daemon.tune_interpreter)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


class CollectorPauses:
    """The load generator's own cyclic-collector pauses (gc.callbacks), for the windows' output."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._started)

    def take(self) -> list[float]:
        pauses, self.pauses = self.pauses, []
        return pauses


PAUSES = CollectorPauses()


async def loop_lag(lags: list[float], stop: asyncio.Event, every_s: float = 0.01) -> None:
    """How late the load generator's own event loop wakes a 10 ms sleep,
    into ``lags``: a latency the daemons did not cause."""
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(every_s)
        lags.append(time.perf_counter() - started - every_s)



def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def listen_counters() -> tuple[int, int]:
    """The kernel's (ListenOverflows, ListenDrops), machine-wide."""
    lines = [line.split() for line in Path("/proc/net/netstat").read_text().splitlines() if line.startswith("TcpExt:")]
    values = dict(zip(lines[0][1:], map(int, lines[1][1:])))
    return values.get("ListenOverflows", 0), values.get("ListenDrops", 0)


def lag_figures(before: dict[float, float], after: dict[float, float]) -> dict:
    """A window's event-loop lateness of one daemon, from its histogram's cumulative buckets at both ends."""
    if not after:
        return {"probes": 0, "p99_bound_ms": float("nan"), "over_10ms": 0, "over_50ms": 0, "over_100ms": 0}
    counts = {bound: after[bound] - before.get(bound, 0.0) for bound in sorted(after)}
    probes = counts[float("inf")]
    p99 = next((bound for bound, count in counts.items() if count >= 0.99 * probes), float("inf"))
    return {"probes": probes, "p99_bound_ms": p99 * 1e3,
            "over_10ms": probes - counts.get(0.01, 0.0), "over_50ms": probes - counts.get(0.05, 0.0),
            "over_100ms": probes - counts.get(0.1, 0.0)}


async def window(load: LoadHub, fleet: Fleet, daemons: list[Daemon], seconds: float, groups: int,
                 title: str) -> dict:
    """Heartbeat latency, cores and memory per group over ``seconds``."""
    pids = {name: pid for d in daemons for name, pid in d.pids().items()}
    snapshots = {}

    async def measure() -> None:
        snapshots["lag_before"] = await asyncio.gather(*(asyncio.to_thread(d.loop_lag_buckets) for d in daemons))
        snapshots["before"] = cpu_snapshot({**pids, **load.pids})
        await asyncio.sleep(seconds)
        snapshots["after"] = cpu_snapshot({**pids, **load.pids})
        snapshots["lag_after"] = await asyncio.gather(*(asyncio.to_thread(d.loop_lag_buckets) for d in daemons))

    sent, lags, pauses = await load.window(measure)
    latencies = [latency for _, latency in sent]
    lag_before, lag_after = snapshots["lag_before"], snapshots["lag_after"]
    cores = cpu_cores(snapshots["before"], snapshots["after"])
    client_cores = cores["client"] + sum(cores[name] for name in load.pids)
    grown_kb = sum(d.rss_kb() - d.start_rss_kb for d in daemons)
    figures = {"heartbeats": len(latencies), "p50_ms": percentile(latencies, 50) * 1e3,
               "p99_ms": percentile(latencies, 99) * 1e3, "max_ms": max(latencies, default=float("nan")) * 1e3,
               "daemon_cores": sum(cores[name] for name in pids), "client_cores": client_cores,
               "other_cores": cores["other"], "bytes_per_group": grown_kb * 1024 / max(groups, 1),
               "rss_mb": {d.node_id: d.rss_kb() / 1024 for d in daemons}}
    print(f"\n== {title}: {groups:,} groups, a {seconds:g} s window ==")
    print(f"heartbeats       {figures['heartbeats']:,} ({figures['heartbeats'] / seconds:,.0f}/s)   "
          f"p50 {figures['p50_ms']:.2f} ms   p99 {figures['p99_ms']:.2f} ms   max {figures['max_ms']:.1f} ms")
    figures["daemon_us_per_heartbeat"] = figures["daemon_cores"] * seconds / max(len(latencies), 1) * 1e6
    figures.update(arrival_figures(sent, seconds))
    print(f"arrivals         busiest 10 ms: {figures['busiest_10ms']} heartbeats (mean {figures['mean_10ms']:.1f}); "
          f"{figures['burst_share'] * 100:.0f}% of them sent in 10 ms slots of over twice the mean, p99 "
          f"{figures['burst_p99_ms']:.2f} ms there, {figures['calm_p99_ms']:.2f} ms in the others")
    print(f"cores            daemons {figures['daemon_cores']:.2f}   client {figures['client_cores']:.2f}   "
          f"other {figures['other_cores']:.2f}   (daemons' CPU per heartbeat {figures['daemon_us_per_heartbeat']:.0f} us)")
    figures["client_gc_pauses"] = len(pauses)
    figures["client_gc_max_ms"] = max(pauses, default=0.0) * 1e3
    figures["client_lag_p99_ms"] = percentile(lags, 99) * 1e3
    figures["client_lag_max_ms"] = max(lags, default=0.0) * 1e3
    print(f"load generator   {len(load.pids)} process(es): {len(pauses)} collector passes, the longest "
          f"{figures['client_gc_max_ms']:.1f} ms; their loops late by p99 {figures['client_lag_p99_ms']:.1f} ms, max "
          f"{figures['client_lag_max_ms']:.1f} ms")
    for daemon, first, last in zip(daemons, lag_before, lag_after):
        for worker in sorted(last):
            lag = lag_figures(first.get(worker, {}), last[worker])
            key = f"daemon_{daemon.node_id}_loop_lag" + (f"_worker_{worker}" if worker else "")
            figures[key] = lag
            print(f"daemon {daemon.node_id}{f' worker {worker}' if worker else ''} loop   late (probe every 50 ms, "
                  f"{lag['probes']:.0f} probes): p99 <= {lag['p99_bound_ms']:g} ms; later than 10 ms: "
                  f"{lag['over_10ms']:.0f}, than 50 ms: {lag['over_50ms']:.0f}, than 100 ms: {lag['over_100ms']:.0f}")
    print(f"memory per group {figures['bytes_per_group'] / 1024:.1f} KB (RSS growth since start over the groups; "
          f"RSS now {', '.join(f'node {n}: {mb:.0f} MB' for n, mb in figures['rss_mb'].items())})")
    return figures


def arrival_figures(sent: list[tuple[float, float]], seconds: float, slot_s: float = 0.01) -> dict:
    """How bunched the heartbeats were when sent (by every load process, one
    clock): the busiest 10 ms slot, and the p99 latency of the heartbeats sent
    in slots of over twice the mean against the rest."""
    slots: dict[int, int] = {}
    for started, _ in sent:
        slot = int(started / slot_s)
        slots[slot] = slots.get(slot, 0) + 1
    mean = len(sent) / max(seconds / slot_s, 1)
    burst = [latency for started, latency in sent if slots[int(started / slot_s)] > 2 * mean]
    calm = [latency for started, latency in sent if slots[int(started / slot_s)] <= 2 * mean]
    return {"busiest_10ms": max(slots.values(), default=0), "mean_10ms": mean,
            "burst_share": len(burst) / max(len(sent), 1),
            "burst_p99_ms": percentile(burst, 99) * 1e3 if burst else float("nan"),
            "calm_p99_ms": percentile(calm, 99) * 1e3 if calm else float("nan")}


async def wait_served(load: LoadHub, groups: set[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not groups <= load.served.keys():
        load.check()
        await asyncio.sleep(0.1)


async def wait_taken_over(load: LoadHub, survivor: Daemon, gone: set[int], timeout_s: float) -> float:
    """Seconds from ``load.since`` until the survivor's log says the takeover
    of every node in ``gone`` ended, in each of its workers (at most ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    workers = [""] if len(survivor.nodes) < 2 else [f"[worker {k}] " for k in range(1, len(survivor.nodes) + 1)]

    def ended() -> bool:
        lines = log_lines(survivor, r"took over \d+ groups \(node\(s\) ")
        for worker in workers:
            named: set[int] = set()
            for line in lines:
                found = re.search(r"node\(s\) ([\d, ]+) gone", line)
                if worker in line and found:
                    named |= {int(n) for n in found.group(1).replace(",", " ").split()}
            if not gone <= named:
                return False
        return True

    while not ended():
        if time.monotonic() > deadline:
            print(f"the survivor's log did not say its takeover ended within {timeout_s:g} s")
            break
        load.check()
        await asyncio.sleep(0.1)
    return time.perf_counter() - load.since


def served_figures(load: LoadHub, groups: set[str], title: str, goal_s: float | None) -> dict:
    times = [load.served[g] for g in groups if g in load.served]
    missing = len(groups) - len(times)
    slots: dict[int, int] = {}
    for t in times:
        slots[int(t / 0.01)] = slots.get(int(t / 0.01), 0) + 1
    figures = {"groups": len(groups), "served": len(times), "p50_s": percentile(times, 50),
               "max_s": max(times, default=float("nan")), "busiest_10ms": max(slots.values(), default=0),
               "busiest_10ms_at_s": max(slots, key=slots.get, default=0) * 0.01}
    line = (f"{title}: {len(times):,} of {len(groups):,} groups served again, p50 {figures['p50_s']:.2f} s, "
            f"max {figures['max_s']:.2f} s")
    if missing:
        unserved = unserved_groups(load, groups)
        line += (f", {missing:,} NOT served within the wait ({', '.join(unserved[:5])}"
                 f"{', ...' if missing > 5 else ''})")
    line += f" (the most in 10 ms: {figures['busiest_10ms']:,}, at {figures['busiest_10ms_at_s']:.2f} s)"
    if goal_s is not None:
        met = not missing and figures["max_s"] <= goal_s
        line += f"; goal <= {goal_s:g} s: {'met' if met else 'MISSED'}"
    print(line)
    return figures


def unserved_groups(load: LoadHub, groups: set[str]) -> list[str]:
    return sorted(g for g in groups if g not in load.served)


async def explain_unserved(fleet: Fleet, load: LoadHub, groups: set[str], at_most: int = 5) -> None:
    """For a few groups not served again: who contends for them in ZooKeeper, and whom their member last found."""
    unserved = unserved_groups(load, groups)[:at_most]
    if not unserved:
        return
    found = await load.coordinators()
    for group in unserved:
        try:
            contenders = await asyncio.to_thread(fleet.zk.get_children, f"{fleet.chroot}/coordinators/{group}")
        except Exception as exc:  # noqa: BLE001 (a diagnostic)
            contenders = [repr(exc)]
        print(f"  not served: {group}: contenders {sorted(contenders)}; its member last found node "
              f"{found.get(group)}")


async def wait_unregistered(fleet: Fleet, node_id: int, since: float) -> float:
    """Seconds from ``since`` until the node's registration is gone (its session ended: ended by the survivor's
    probe, or expired by ZooKeeper with ``--daemon-arg=--peer-probe-interval-ms=0``)."""
    while await asyncio.to_thread(fleet.registered_pid, node_id) is not None:
        await asyncio.sleep(0.02)
    return time.perf_counter() - since


def log_lines(daemon: Daemon, pattern: str) -> list[str]:
    return [line for line in daemon.log_path.read_text(errors="replace").splitlines() if re.search(pattern, line)]


# -- the run -------------------------------------------------------------------------

async def create_groups(load: LoadHub, settings: Settings, server_cpu: Callable[[], float], where: str) -> dict:
    """The create phase: the rate and the servers' CPU per group over the first and the last 1,000."""
    print(f"\n== create: {settings.groups:,} groups, {settings.create_concurrency} at a time, {where} ==", flush=True)
    marks = [(0, server_cpu())]  # (groups created, the servers' CPU seconds) at each FIRST_LAST
    started = time.perf_counter()
    while len(load.created) < settings.groups:
        await asyncio.sleep(0.05)
        if len(load.created) >= marks[-1][0] + FIRST_LAST:
            marks.append((len(load.created), server_cpu()))
        load.check()
    marks.append((len(load.created), server_cpu()))
    created = sorted(load.created)
    head = FIRST_LAST / (created[FIRST_LAST - 1] - started)
    tail = FIRST_LAST / (created[-1] - created[-FIRST_LAST - 1])
    cpu_head = (marks[1][1] - marks[0][1]) / marks[1][0] * 1e3
    cpu_tail = (marks[-1][1] - marks[-2][1]) / max(marks[-1][0] - marks[-2][0], 1) * 1e3
    print(f"groups created/s first {FIRST_LAST:,}: {head:,.0f}   last {FIRST_LAST:,}: {tail:,.0f}   "
          f"ratio last/first {tail / head:.2f} (goal: about 1.0)   all in {created[-1] - started:.1f} s")
    print(f"the servers' CPU per group created ({where}; heartbeats of the groups so far included"
          f"{'' if settings.create_heartbeats == 'on' else ': none, --create-heartbeats off'}): first "
          f"{FIRST_LAST:,} {cpu_head:.2f} ms, last ~{FIRST_LAST:,} {cpu_tail:.2f} ms, ratio {cpu_tail / cpu_head:.2f}")
    return {"first_per_s": head, "last_per_s": tail, "total_s": created[-1] - started,
            "cpu_ms_first": cpu_head, "cpu_ms_last": cpu_tail}


class Broker:
    """The sandbox's Kafka broker as :func:`window` measures a daemon (no loop-lateness probe)."""

    def __init__(self, pid: int) -> None:
        self.node_id, self.pid = 0, pid
        self.start_rss_kb = self.rss_kb()  # the JVM's, its heap reserved ahead: memory per group means little

    def pids(self) -> dict[str, int]:
        return {"kafka": self.pid}

    def rss_kb(self) -> int:
        return rss_kb(self.pid)

    def loop_lag_buckets(self) -> dict:
        return {}


async def kafka_scenario(fleet: Fleet, settings: Settings) -> dict:
    """``--target kafka``: the same members against the sandbox broker's own
    group coordinator (Kafka 3.9, one broker), the create phase and one steady
    window: the peer's heartbeat p99 on this machine under the same load."""
    host, _, port = fleet.env["ZKCOORD_BOOTSTRAP_SERVERS"].split(",")[0].rpartition(":")
    address = (host, int(port))
    broker = Broker(sandbox_pids(sandbox_state(fleet.workdir / "sandbox"))["kafka"])
    conn = await KafkaConnection.open(*address, "scale-versions")
    versions = common_versions(await served_versions(conn))
    conn.close()
    run = uuid.uuid4().hex[:6]
    load = fleet.load = LoadHub(settings, versions, [address], run)
    broker_cpu = lambda: sum(cpu_snapshot(broker.pids()).procs.values())  # noqa: E731
    results = {"create": await create_groups(load, settings, broker_cpu, "Kafka's coordinator")}
    load.settled()
    await asyncio.sleep(settings.heartbeat_interval_ms / 1000)  # every member heartbeats once before measuring
    results["steady_kafka"] = await window(load, fleet, [broker], settings.window_s, settings.groups,
                                           "steady, Kafka's coordinator (one broker)")
    await load.stop()
    print(f"\n== the peer ({settings.groups:,} groups) ==\nheartbeat p99, every group on Kafka 3.9's coordinator, every "
          f"{settings.heartbeat_interval_ms} ms: {results['steady_kafka']['p99_ms']:.2f} ms (zkcoord's goal: < 10 ms "
          "on one daemon; its memory per group here is the broker's JVM, not comparable)")
    return results


async def scenario(fleet: Fleet, settings: Settings) -> dict:
    if settings.target == "kafka":
        return await kafka_scenario(fleet, settings)
    results: dict = {}
    first, second = fleet.start_daemon(1), fleet.start_daemon(2)
    conn = await KafkaConnection.open(*first.address, "scale-versions")
    versions = common_versions(await served_versions(conn))
    conn.close()
    run = uuid.uuid4().hex[:6]
    load = fleet.load = LoadHub(settings, versions, fleet.bootstrap(), run)
    groups = {f"scale-{run}-{i:05d}" for i in range(settings.groups)}

    daemon_cpu = lambda: sum(cpu_snapshot({**first.pids(), **second.pids()}).procs.values())  # noqa: E731
    results["create"] = await create_groups(load, settings, daemon_cpu, "two daemons")
    load.settled()
    await asyncio.sleep(settings.heartbeat_interval_ms / 1000)  # every member heartbeats once before measuring

    results["steady_two"] = await window(load, fleet, [first, second], settings.window_s, settings.groups,
                                         "steady, two daemons")
    by_node: dict[int, set[str]] = {}
    for group, node_id in (await load.coordinators()).items():
        by_node.setdefault(node_id, set()).add(group)
    print(f"groups per node: {', '.join(f'node {n}: {len(g):,}' for n, g in sorted(by_node.items()))}")

    # -- kill -9 ------------------------------------------------------------------------
    held = {d.node_id: set().union(*(by_node.get(n, set()) for n in d.nodes)) for d in (first, second)}
    victim = max((first, second), key=lambda d: len(held[d.node_id]))
    survivor = second if victim is first else first
    orphans = held[victim.node_id]
    goal_s = settings.zk_session_timeout_ms / 1000 + 2
    print(f"\n== kill -9 of {victim.name} ({len(orphans):,} groups); ZooKeeper session timeout "
          f"{settings.zk_session_timeout_ms} ms ==", flush=True)
    overflows = listen_counters()
    await load.set_since(time.perf_counter())
    survivor_pids = survivor.pids()
    cpu_before = cpu_snapshot(survivor_pids)
    lag_before = await asyncio.to_thread(survivor.loop_lag_buckets)
    victim.proc.kill()  # its workers die with it (PR_SET_PDEATHSIG)
    victim.proc.wait()
    load.set_bootstrap(fleet.bootstrap())
    expired_s = max([await wait_unregistered(fleet, node, load.since) for node in victim.nodes])
    print(f"its session{'s' if len(victim.nodes) > 1 else ''} ended (registration gone) {expired_s:.2f} s after "
          "the kill")
    await wait_served(load, orphans, settings.recover_wait_s)
    used = cpu_cores(cpu_before, cpu_snapshot(survivor_pids))
    survivor_cores = sum(used[name] for name in survivor_pids)
    after = listen_counters()
    figures = served_figures(load, orphans, "kill -9", goal_s)
    await explain_unserved(fleet, load, orphans)
    figures.update(expired_s=expired_s, listen_overflows=after[0] - overflows[0], listen_drops=after[1] - overflows[1],
                   survivor_cores=survivor_cores)
    print(f"after the session's end: the last group served {figures['max_s'] - expired_s:.2f} s later; survivor "
          f"{survivor_cores:.2f} cores meanwhile; ListenOverflows +{figures['listen_overflows']:,}, "
          f"ListenDrops +{figures['listen_drops']:,} (machine-wide)")
    lag_after = await asyncio.to_thread(survivor.loop_lag_buckets)
    for worker in sorted(lag_after):
        lag = lag_figures(lag_before.get(worker, {}), lag_after[worker])
        figures["survivor_loop_lag" + (f"_worker_{worker}" if worker else "")] = lag
        print(f"survivor's{f' worker {worker}' if worker else ''} loop late meanwhile (probe every 50 ms, "
              f"{lag['probes']:.0f} probes): p99 <= {lag['p99_bound_ms']:g} ms; later than 10 ms: "
              f"{lag['over_10ms']:.0f}, than 50 ms: {lag['over_50ms']:.0f}, than 100 ms: {lag['over_100ms']:.0f}")
    # The survivor answers a loading group's heartbeats at once, so every member can be served again
    # while its takeover still loads the last groups: the steady window starts once that is done.
    finished_s = await wait_taken_over(load, survivor, set(victim.nodes), settings.recover_wait_s)
    figures["takeover_done_s"] = finished_s
    print(f"survivor's takeover finished {finished_s:.2f} s after the kill ({finished_s - figures['max_s']:+.2f} s "
          f"after the last group was served again); the steady window starts then")
    for line in log_lines(survivor, r"took over|taking over")[-3:]:
        print(f"  survivor's log: {line[:200]}")
    results["kill"] = figures
    await load.set_since(None)

    results["steady_one"] = await window(load, fleet, [survivor], settings.window_s, settings.groups,
                                         "steady, one daemon (every group on the survivor)")

    # -- graceful stop ------------------------------------------------------------------
    restarted = fleet.start_daemon(victim.node_id)
    load.set_bootstrap(fleet.bootstrap())
    print(f"\n== SIGTERM of {survivor.name} ({settings.groups:,} groups; --shutdown-timeout-ms "
          f"{settings.shutdown_timeout_ms}); {restarted.name} started again ==", flush=True)
    overflows = listen_counters()
    await load.set_since(time.perf_counter())
    survivor.proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(survivor.proc.wait)
    exit_s = time.perf_counter() - load.since
    load.set_bootstrap(fleet.bootstrap())
    print(f"it exited with {code} {exit_s:.2f} s after SIGTERM")
    for line in log_lines(survivor, r"releas|shutdown: could not")[-4 * len(survivor.nodes):]:
        print(f"  its log: {line[:240]}")
    released = [float(m.group(1)) for line in log_lines(survivor, r"released \d+ groups in")
                if (m := re.search(r"released \d+ groups in (\d+) ms", line))]
    cut_short = log_lines(survivor, r"shutdown: could not")
    await wait_served(load, groups, settings.recover_wait_s)
    figures = served_figures(load, groups, "SIGTERM", None)
    await explain_unserved(fleet, load, groups)
    after = listen_counters()
    figures.update(exit_s=exit_s, exit_code=code, release_ms=max(released) if released else None,  # its workers' slowest
                   cut_short=len(cut_short), listen_overflows=after[0] - overflows[0])
    print(f"ListenOverflows +{figures['listen_overflows']:,} (machine-wide)")
    results["stop"] = figures
    await load.set_since(None)

    await load.stop()
    if load.failures:
        print("\nclient-side failures (retried): " + ", ".join(f"{k} x{v}" for k, v in sorted(load.failures.items())))
    summary(results, settings)
    return results


def summary(results: dict, settings: Settings) -> None:
    """Each goal of issue 27's item 3 against this run's figures."""
    def verdict(met: bool) -> str:
        return "met" if met else "MISSED"

    create, one, kill, stop = results["create"], results["steady_one"], results["kill"], results["stop"]
    goal_s = settings.zk_session_timeout_ms / 1000 + 2
    print(f"\n== goals ({settings.groups:,} groups) ==")
    print(f"creating the last 1,000 groups costs what the first did: daemons' CPU per group "
          f"{create['cpu_ms_first']:.2f} -> {create['cpu_ms_last']:.2f} ms (x{create['cpu_ms_last'] / create['cpu_ms_first']:.2f}), "
          f"rate {create['first_per_s']:.0f} -> {create['last_per_s']:.0f}/s (x{create['last_per_s'] / create['first_per_s']:.2f})")
    print(f"memory per group < 20 KB (every group on one daemon): {one['bytes_per_group'] / 1024:.1f} KB, "
          f"{verdict(one['bytes_per_group'] < 20 * 1024)}")
    print(f"heartbeat p99 < 10 ms (every group on one daemon, every {settings.heartbeat_interval_ms} ms): "
          f"{one['p99_ms']:.2f} ms, {verdict(one['p99_ms'] < 10)}")
    print(f"kill -9: every group served again within the session timeout + 2 s ({goal_s:g} s): max "
          f"{kill['max_s']:.2f} s (session ended at {kill['expired_s']:.2f} s), "
          f"{verdict(kill['served'] == kill['groups'] and kill['max_s'] <= goal_s)}")
    print(f"no connection left unaccepted in the reconnect storm: ListenOverflows +{kill['listen_overflows']:,} "
          f"(machine-wide), {verdict(kill['listen_overflows'] == 0)}")
    release = "not logged" if stop["release_ms"] is None else f"released in {stop['release_ms']:.0f} ms"
    print(f"SIGTERM releases {settings.groups:,} groups within --shutdown-timeout-ms ({settings.shutdown_timeout_ms}): "
          f"{release}, {verdict(stop['release_ms'] is not None and stop['cut_short'] == 0)}; every group served "
          f"again by the other daemon {stop['max_s']:.2f} s after the SIGTERM (p50 {stop['p50_s']:.2f} s)")


def parse_args(argv: list[str] | None) -> tuple[Settings, Path | None, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = Settings()
    helps = {
        "groups": "single-member groups", "heartbeat_interval_ms": "each member's heartbeat interval",
        "session_timeout_ms": "the members' session time-out",
        "zk_session_timeout_ms": "the daemons' --zk-session-timeout-ms (the fail-over goal is this + 2 s)",
        "shutdown_timeout_ms": "the daemons' --shutdown-timeout-ms",
        "create_concurrency": "groups created at a time",
        "create_heartbeats": "off: no heartbeats until every group is created (the members' sessions are then "
                             "10 minutes), so the creation cost is measured alone",
        "window_s": "seconds of each steady window",
        "request_timeout_ms": "a request unanswered this long closes its connection (Java's request.timeout.ms)",
        "recover_wait_s": "how long to wait for every group to be served again after a fault",
        "zookeeper": "HOST:PORT of a ZooKeeper to use (a chroot of its own) [default: start a sandbox]",
        "load_processes": "processes the members are spread over (each its own asyncio loop, every N-th member)",
        "target": "zkcoord: two daemons and every phase; kafka: the same members against the sandbox broker's own "
                  "coordinator (Kafka 3.9), the create phase and one steady window, the peer's p99 here",
        "daemon_workers": "each daemon's --workers (1: one process, a node per daemon; N: the kill -9 and the "
                          "SIGTERM are of a daemon's N workers at once)",
    }
    for name, text in helps.items():
        default = getattr(defaults, name)
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default,
                            help=f"{text} [default: {default}]")
    parser.add_argument("--daemon-arg", action="append", default=[], help="one more `zkcoord run` argument "
                        "(repeatable), e.g. --daemon-arg=--listen-backlog=100")
    parser.add_argument("--workdir", type=Path, help="logs (and the sandbox) go here [a new temp dir]")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = vars(parser.parse_args(argv))
    workdir, json_path = args.pop("workdir"), args.pop("json")
    args["daemon_args"] = tuple(args.pop("daemon_arg"))
    settings = Settings(**args)
    if settings.groups <= FIRST_LAST:
        parser.error(f"--groups must be above {FIRST_LAST}")
    if settings.load_processes < 1:
        parser.error("--load-processes is at least 1")
    if settings.daemon_workers < 1:
        parser.error("--daemon-workers is at least 1")
    if settings.target not in ("zkcoord", "kafka"):
        parser.error("--target is zkcoord or kafka")
    if settings.target == "kafka" and settings.zookeeper:
        parser.error("--target kafka measures the broker of the benchmark's own sandbox: leave out --zookeeper")
    if settings.create_heartbeats not in ("on", "off"):
        parser.error("--create-heartbeats is on or off")
    if settings.create_heartbeats == "off":
        settings.session_timeout_ms = max(settings.session_timeout_ms, 600_000)
    return settings, workdir, json_path


def main(argv: list[str] | None = None) -> int:
    settings, workdir, json_path = parse_args(argv)
    fleet: Fleet | None = None

    def run(path: Path) -> int:
        nonlocal fleet
        print(f"zkcoord scale benchmark; workdir {path}; {os.cpu_count()} cores, load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        fleet = Fleet(path, settings)
        fleet.start_zookeeper()
        try:
            import uvloop
            runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
        except ImportError:
            runner = asyncio.Runner()
        with runner:
            results = runner.run(scenario(fleet, settings))
        if json_path:
            json_path.write_text(json.dumps(results, indent=2, default=str))
        print(f"\nlogs in {path}")
        return 0

    return bench_main(workdir, "zkcoord-bench-scale-", run, lambda: fleet and fleet.stop())


if __name__ == "__main__":
    sys.exit(main())
