"""Real ``zkcoord run`` daemon processes for fault tests.

This module owns starting coordinator daemons as subprocesses
(``python -X zkcoord-test-process=... -m zkcoord -v run ...``) inside a
test's ZooKeeper chroot, waiting until each is registered under
``/zkcoord/nodes``, signalling them (SIGKILL, SIGTERM, SIGSTOP, SIGCONT) and
always killing every one of them at teardown, also when the test failed.

How stray processes are found: every command line carries
``-X zkcoord-test-process=$ZKCOORD_TEST_STATE_DIR``. CPython keeps unknown
``-X`` options in ``sys._xoptions`` without acting on them (the sandbox marks
its daemons the same way), so the daemon is unaffected, while ``.ci/run``'s
``pkill -f "zkcoord-test-process=$ZKCOORD_TEST_STATE_DIR"`` matches it. An
environment variable would not do: ``pkill -f`` reads only the command line.

Each daemon listens on ``127.0.0.1:0``: the kernel picks a free loopback port
at bind time (no pick-then-bind race), and the test learns it from the
daemon's registration, which is what clients are told by FindCoordinator too.
Logs (``-v``: INFO) go to ``<log_dir>/daemon-<id>.log``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError

from zkcoord.local.procs import tail

MARKER_OPTION = "zkcoord-test-process"
START_TIMEOUT_S = 90.0  # a bound on a failure, not a wait: a daemon on a machine ten times oversubscribed took over 30 s to import and connect
STOP_TIMEOUT_S = 10.0


def process_marker() -> str:
    """The ``-X`` value ``.ci/run`` kills by: ``zkcoord-test-process=<state dir>``."""
    return f"{MARKER_OPTION}={os.environ.get('ZKCOORD_TEST_STATE_DIR', '')}"


def wait_for(condition, timeout_s: float, what: str, interval_s: float = 0.05):
    """Poll ``condition()`` until it returns something truthy (returned), or
    raise AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(interval_s)


@dataclass
class DaemonProcess:
    """One ``zkcoord run`` subprocess."""

    node_id: int
    proc: subprocess.Popen
    log_path: Path
    host: str = "127.0.0.1"
    port: int = 0
    stopped: bool = False  # SIGSTOPped by the test
    gateway: tuple[str, int] | None = None  # its gateway's registered address (--gateway-listen)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def gateway_address(self) -> str:
        """``host:port`` of its gateway, a bootstrap.servers entry for stock clients."""
        if self.gateway is None:
            raise AssertionError(f"daemon {self.node_id} runs no gateway (start it with gateway_listen)")
        return f"{self.gateway[0]}:{self.gateway[1]}"

    def log(self, lines: int = 60) -> str:
        return tail(self.log_path, lines)

    def kill(self) -> None:
        """SIGKILL (kill -9) and reap: no graceful step runs."""
        self.resume()
        self.proc.kill()
        self.proc.wait(STOP_TIMEOUT_S)

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then the exit status (AssertionError if it does not exit in time)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"daemon {self.node_id} did not exit within {timeout_s:g} s of SIGTERM; "
                                 f"its log:\n{self.log()}") from None

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        if self.stopped and self.alive():
            self.proc.send_signal(signal.SIGCONT)
        self.stopped = False


@dataclass
class DaemonFleet:
    """Daemons of one test, in its chroot. Use as a context manager (or call
    :meth:`close`): every process is killed on exit, pass or fail.

    ``zk`` is a kazoo client inside the same chroot, used to watch the
    registrations. ``options`` are ``zkcoord run`` settings for every daemon
    (``zk_session_timeout_ms=4000`` becomes ``--zk-session-timeout-ms 4000``).
    """

    zk_hosts: str
    zk: object
    log_dir: Path
    options: dict = field(default_factory=dict)
    daemons: dict[int, DaemonProcess] = field(default_factory=dict)
    _all: list[subprocess.Popen] = field(default_factory=list)

    def __enter__(self) -> DaemonFleet:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # ------------------------------------------------------------ processes
    def command(self, node_id: int, **options) -> list[str]:
        # One process per daemon (what these tests kill, stop and pause) unless a test asks for workers.
        settings = {"zookeeper": self.zk_hosts, "listen": "127.0.0.1:0", "node_id": node_id, "workers": 1,
                    **self.options, **options}
        argv = [sys.executable, "-X", process_marker(), "-m", "zkcoord", "-v", "run"]
        for name, value in settings.items():
            argv += [f"--{name.replace('_', '-')}", str(value)]
        return argv

    @staticmethod
    def _env() -> dict[str, str]:
        """The caller's ZKCOORD_... settings (a config file, say) must not
        reach a daemon: it runs with exactly the flags of :meth:`command`."""
        return {k: v for k, v in os.environ.items() if not k.startswith("ZKCOORD_") or k == "ZKCOORD_TEST_STATE_DIR"}

    def _spawn(self, argv: list[str], log_path: Path) -> subprocess.Popen:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=self._env())
        self._all.append(proc)
        return proc

    def start(self, node_id: int, **options) -> DaemonProcess:
        """Start daemon ``node_id`` and wait until it is registered (its pid in
        ``/zkcoord/nodes/<id>``); its port is the one it registered."""
        log_path = self.log_dir / f"daemon-{node_id}.log"
        proc = self._spawn(self.command(node_id, **options), log_path)
        daemon = DaemonProcess(node_id, proc, log_path)
        self.daemons[node_id] = daemon

        def registered():
            if not daemon.alive():
                raise AssertionError(f"daemon {node_id} exited with {proc.returncode} while starting; "
                                     f"its log:\n{daemon.log()}")
            info = self.registration(node_id)
            return info if info is not None and info["pid"] == proc.pid else None

        try:
            info = wait_for(registered, START_TIMEOUT_S, f"daemon {node_id} registered in /zkcoord/nodes")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nits log:\n{daemon.log()}") from None
        daemon.host, daemon.port = info["host"], info["port"]
        if info.get("gateway_port"):
            daemon.gateway = (info["gateway_host"], info["gateway_port"])
        return daemon

    def start_many(self, *node_ids: int, **options) -> list[DaemonProcess]:
        return [self.start(node_id, **options) for node_id in node_ids]

    def run_to_exit(self, node_id: int, timeout_s: float = 60.0, **options) -> subprocess.CompletedProcess:
        """Run a ``zkcoord run`` that is expected to exit by itself; its
        stdout and stderr are captured separately."""
        argv = self.command(node_id, **options)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=self._env())
        self._all.append(proc)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"zkcoord run --node-id {node_id} did not exit within {timeout_s:g} s; "
                                 f"stderr:\n{err}") from None
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def close(self) -> None:
        """Kill every process this fleet started (stopped ones are continued
        first so SIGKILL is delivered at once) and reap them."""
        for daemon in self.daemons.values():
            daemon.resume()
        for proc in self._all:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                except ProcessLookupError:
                    pass
        for proc in self._all:
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:  # cannot happen after SIGKILL; say so if it does
                raise AssertionError(f"process {proc.pid} survived SIGKILL") from None

    # ---------------------------------------------------------- ZooKeeper
    def registration(self, node_id: int) -> dict | None:
        """``/zkcoord/nodes/<id>`` as a dict, None if absent or if this test's
        own ZooKeeper session is being re-established (after a ZooKeeper
        restart it may have expired; kazoo opens a new one): callers poll."""
        try:
            data, _ = self.zk.get(f"/zkcoord/nodes/{node_id}")
        except (NoNodeError, ConnectionLoss, SessionExpiredError):
            return None
        return json.loads(data)

    def contenders(self, group: str) -> list[int]:
        """Node ids of the group's election znodes, owner first."""
        from zkcoord.zk import paths

        try:
            children = self.zk.get_children(paths.owner_dir(group))
        except NoNodeError:
            return []
        ordered = sorted((c for c in children if paths.contender_sequence(c) is not None),
                         key=paths.contender_sequence)
        found = []
        for name in ordered:
            try:
                found.append(int(self.zk.get(paths.contender(group, name))[0]))
            except NoNodeError:
                continue
        return found

    def session_gone(self, node_id: int) -> bool:
        """True once the daemon's registration is gone (its session ended)."""
        return self.registration(node_id) is None


@contextlib.contextmanager
def logged_fleet(zk_hosts: str, zk, log_dir: Path, lines: int = 40, **options) -> Iterator[DaemonFleet]:
    """A :class:`DaemonFleet` with ``options`` whose daemons' last ``lines``
    log lines are printed when the block ends (pytest shows them when the
    test failed)."""
    with DaemonFleet(zk_hosts, zk, log_dir, options=options) as fleet:
        try:
            yield fleet
        finally:
            for daemon in fleet.daemons.values():
                print(f"---- daemon {daemon.node_id} (pid {daemon.pid}), {daemon.log_path}:\n{daemon.log(lines)}")


GATEWAY_FLEET_OPTIONS = {"gateway_listen": "127.0.0.1:0", "zk_session_timeout_ms": 4000,
                         "group_initial_rebalance_delay_ms": 0, "topic_metadata_refresh_ms": 1000}


def gateway_fleet(zk_hosts: str, zk, log_dir: Path, bootstrap_servers: str, *node_ids: int, **options):
    """A fleet whose daemons run gateways in front of ``bootstrap_servers``
    (kernel-picked ports, short ZooKeeper sessions, no initial rebalance
    delay; ``options``: more ``zkcoord run`` settings), started; use as a
    context manager. Prints each daemon's log tail when it closes, so a
    failed test shows it."""
    fleet = DaemonFleet(zk_hosts, zk, log_dir, options={"bootstrap_servers": bootstrap_servers,
                                                        **GATEWAY_FLEET_OPTIONS, **options})
    close = fleet.close

    def close_with_logs() -> None:
        for daemon in fleet.daemons.values():
            print(f"---- daemon {daemon.node_id} (pid {daemon.pid}), {daemon.log_path}:\n{daemon.log(60)}")
        close()

    fleet.close = close_with_logs
    try:
        fleet.start_many(*node_ids)
    except BaseException:
        fleet.close()
        raise
    return fleet



@dataclass
class WorkerDaemon:
    """One ``zkcoord run --workers N`` (its supervisor ``proc``) and its
    workers' registrations, by node id (``{"host", "port", "pid", ...}``)."""

    proc: subprocess.Popen
    log_path: Path
    listen_port: int  # the shared listener port
    gateway_port: int | None  # the shared gateway port
    metrics_port: int
    workers: dict[int, dict] = field(default_factory=dict)

    def log(self, lines: int = 80) -> str:
        return tail(self.log_path, lines)

    def worker_pids(self) -> set[int]:
        """The live children of the supervisor."""
        try:
            return {int(p) for p in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()}
        except OSError:
            return set()


def start_worker_daemon(fleet: DaemonFleet, workers: int, node_id: int, timeout_s: float = 60.0,
                        avoid: frozenset[int] = frozenset(), **options) -> WorkerDaemon:
    """``zkcoord run --workers <workers> --node-id <node_id>`` in the fleet's
    chroot, on fixed free ports (listener P and P+1..P+N, metrics M and
    M+1..M+N, with ``gateway_broker_ids`` LOW-HIGH a gateway G, G+1.. for
    brokers and its workers' own ports after them); returned once every
    worker is registered with a pid of the supervisor's children and the
    supervisor's /health answers 200; ``avoid``: ports the listener and
    metrics ranges must not take (a gateway port given in ``options``). The
    fleet kills it at its close."""
    from zkcoord.core.gateway import parse_broker_ids
    from zkcoord.local.procs import free_port_range, http_status

    listen = free_port_range(1 + workers, avoid=avoid)
    metrics = free_port_range(1 + workers, avoid=avoid | frozenset(range(listen, listen + 1 + workers)))
    settings = {"listen": f"127.0.0.1:{listen}", "metrics_listen": f"127.0.0.1:{metrics}", "workers": workers,
                **options}
    gateway = None
    if settings.get("gateway_listen") == "auto":
        low, high = parse_broker_ids(settings.get("gateway_broker_ids", "0-31"))
        taken = frozenset(range(listen, listen + 1 + workers)) | frozenset(range(metrics, metrics + 1 + workers))
        gateway = free_port_range(1 + (high - low + 1) + workers, avoid=taken)
        settings["gateway_listen"] = f"127.0.0.1:{gateway}"
    log_path = fleet.log_dir / f"workers-{node_id}.log"
    proc = fleet._spawn(fleet.command(node_id, **settings), log_path)
    daemon = WorkerDaemon(proc, log_path, listen, gateway, metrics)

    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"zkcoord run --workers {workers} exited with {proc.returncode}; its log:\n"
                                 f"{daemon.log()}")
        found = {}
        children = daemon.worker_pids()
        for child in fleet.zk.get_children("/zkcoord/nodes") if fleet.zk.exists("/zkcoord/nodes") else []:
            info = fleet.registration(int(child))
            if info is not None and info["pid"] in children:
                found[int(child)] = info
        if len(found) == workers and http_status(f"http://127.0.0.1:{metrics}/health") == 200:
            return found
        return None

    try:
        daemon.workers = wait_for(ready, timeout_s, f"{workers} workers registered and /health 200")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nits log:\n{daemon.log()}") from None
    return daemon
