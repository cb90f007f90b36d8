"""``zkcoord run --workers N``: N worker processes behind one set of addresses.

A daemon uses one core (one event loop; the GIL). To use every core of a
machine, ``zkcoord run`` with N > 1 workers (the default: one per core) is
this supervisor and N worker processes (:mod:`zkcoord.server.worker`), each
a whole daemon and its own node in the group elections: its own node id and
ZooKeeper session, the groups it wins, its gateway. So a worker that dies is
a fail-over of its groups only, exactly as a daemon's death is.

Ports (:mod:`zkcoord.core.workers`): every worker serves the configured
listener and gateway ports (and the gateway's broker ports) with
``SO_REUSEPORT``, so the kernel spreads new connections over the workers,
and each has ports of its own, which it registers: FindCoordinator, from any
worker, names the owning worker's own address, so a group's members reach
the worker that owns it. The supervisor binds each shared port first (not
listening: the kernel gives it no connections), which reserves it across
worker restarts and resolves a port 0 to the number the workers share.

Rules:

1. **Start**: worker 1 first (node id ``--node-id``; it applies the
   ZooKeeper layout on an empty ZooKeeper), then the others at once (node
   ids allocated, 1001 up). A worker that fails to start stops the start:
   every worker is stopped and ``zkcoord run`` exits with the worker's code
   (its ``error:`` line is in the log).
2. **A worker that dies** (kill -9, a crash, the OOM killer) is started again
   with the same node id and ports, at once if it ran for 30 s, else after
   a pause that doubles from 1 s up to 30 s. Its groups fail over meanwhile
   (its session expires; the other workers and daemons take them), and the
   new worker registers once the old registration is gone with that
   session.
3. **Stop** (SIGTERM, SIGINT): every worker gets SIGTERM and stops as a
   daemon does (groups released at once); a worker still running after
   ``shutdown_timeout_ms`` + 5 s is killed. Exit 0.
4. **Metrics and health** (``--metrics-listen``): served here, made of every
   worker's (:mod:`.worker_metrics`); each worker serves its own on the
   metrics port + k.
5. If the supervisor itself is killed, the workers die with it (rule 1 of
   :mod:`.worker`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from typing import TYPE_CHECKING

from zkcoord.config import DaemonConfig, parse_listener
from zkcoord.core.workers import WorkerPlan
from zkcoord.errors import ConfigError, ZkcoordError
from zkcoord.server.metrics import MetricsServer
from zkcoord.wire.listening import check_port_free
from zkcoord.server.worker import WorkerSpec
from zkcoord.server.worker_metrics import WorkerEndpoint, WorkersMetrics

if TYPE_CHECKING:
    from zkcoord.core.gateway import BrokerPorts

__all__ = ["Supervisor", "run_supervisor"]

log = logging.getLogger("zkcoord.supervisor")

POLL_S = 0.1
STABLE_RUN_S = 30.0  # a worker that ran this long is restarted at once
MAX_RESTART_DELAY_S = 30.0
STOP_GRACE_S = 5.0


class _Worker:
    """One worker process and what the supervisor knows of it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.node_id: int | None = None
        self.proc: subprocess.Popen | None = None
        self.status_fd: int | None = None
        self.status = b""
        self.report: dict | None = None
        self.started_at = 0.0
        self.state = "starting"
        self.restart_delay_s = 0.0
        self.restart_at: float | None = None

    def endpoint(self, host: str) -> WorkerEndpoint:
        port = self.report.get("metrics_port") if self.report and self.state == "ready" else None
        return WorkerEndpoint(self.index, self.node_id, self.state, host, port)


class Supervisor:
    """``await start()``, ``await wait()`` (returns when a stop was asked and
    every worker is gone), ``request_stop()``."""

    def __init__(self, config: DaemonConfig, count: int) -> None:
        config.check_worker_ports(count)
        self.config = config
        self.count = count
        self.workers = [_Worker(i) for i in range(1, count + 1)]
        self._sockets: list[socket.socket] = []
        self._plans: dict[int, WorkerPlan] = {}
        self._metrics_server: MetricsServer | None = None
        self.metrics_port: int | None = None
        self._stopping = asyncio.Event()
        logger = logging.getLogger("zkcoord")
        self._log_level = logger.getEffectiveLevel()
        self._quiet_level = logging.getLogger("kazoo").getEffectiveLevel()

    # -- start -----------------------------------------------------------------------
    async def start(self) -> None:
        config = self.config
        _, host, port = parse_listener(config.listen, "listen")
        listen_port = self._reserve(host, port, "listen")
        gateway_port, span, refused = None, 0, frozenset()
        if config.gateway_listen:
            from zkcoord.core.gateway import BrokerPorts, parse_broker_ids

            _, gateway_host, gateway_configured = parse_listener(config.gateway_listen, "gateway_listen")
            gateway_port = self._reserve(gateway_host, gateway_configured, "gateway_listen")
            brokers = BrokerPorts(*parse_broker_ids(config.gateway_broker_ids))
            span = brokers.count
            if gateway_configured:
                refused = self._refused_broker_ports(gateway_host, gateway_port, brokers)
        for worker in self.workers:
            self._plans[worker.index] = WorkerPlan(worker.index, self.count, listen_port, gateway_port, span,
                                                   refused)
        await self._start_metrics()
        log.info("zkcoord run: %d workers, listener %s:%d shared (each worker's own port registered), ZooKeeper %s",
                 self.count, host, listen_port, config.zookeeper)
        first, rest = self.workers[0], self.workers[1:]
        self._spawn(first, config.node_id)
        await self._until_ready([first])
        for worker in rest:
            self._spawn(worker, -1)
        await self._until_ready(rest)
        log.info("zkcoord run: %d workers serving: %s", self.count,
                 ", ".join(f"worker {w.index} node {w.node_id} on {w.report['advertised'][0]}:"
                           f"{w.report['advertised'][1]} (pid {w.proc.pid})" for w in self.workers))

    def _reserve(self, host: str, port: int, setting: str) -> int:
        """Bind (not listen) the shared port: held across worker restarts; 0 resolved."""
        try:
            if port:  # SO_REUSEPORT would join another process's listener there: refuse it as a plain bind would
                check_port_free(host, port)
            family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                                 flags=socket.AI_PASSIVE)[0]
            sock = socket.socket(family, kind, proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
        except OSError as exc:
            raise ConfigError(f"{setting}: cannot listen on {host}:{port}: {exc}") from None
        self._sockets.append(sock)
        return sock.getsockname()[1]

    @staticmethod
    def _refused_broker_ports(host: str, gateway_port: int, brokers: BrokerPorts) -> frozenset[int]:
        """The gateway's broker ports (``gateway_port`` + 1 ..) another process
        is bound to. No worker binds them: with SO_REUSEPORT a worker's socket
        would join that process's listener and the two would split its clients.
        The broker there has no gateway port, as a single process's gateway
        leaves it. (Checked, not held: up to 1,024 of them.)"""
        refused = set()
        for broker_id in range(brokers.low_id, brokers.high_id + 1):
            port = gateway_port + brokers.offset(broker_id)
            try:
                check_port_free(host, port)
            except OSError as exc:
                refused.add(port)
                log.error("gateway: broker %d will have no gateway port: cannot listen on %s:%d: %s; free the port "
                          "and restart, or choose another --gateway-listen port", broker_id, host, port, exc)
        return frozenset(refused)

    async def _start_metrics(self) -> None:
        address = self.config.metrics_address
        if address is None:
            return
        self._metrics_server = MetricsServer(WorkersMetrics(lambda: [w.endpoint(address[0]) for w in self.workers]),
                                             *address)
        try:
            await self._metrics_server.start()
        except OSError as exc:
            raise ConfigError(f"metrics_listen: cannot listen on {address[0]}:{address[1]}: {exc}") from None
        self.metrics_port = self._metrics_server.bound_port
        log.info("metrics and health of all workers on http://%s:%d/metrics", address[0], self.metrics_port)

    def _spawn(self, worker: _Worker, node_id: int, replaces_pid: int | None = None) -> None:
        """Start the worker's process (from the loop's thread: the worker's
        death signal is tied to the thread that started it)."""
        read_fd, write_fd = os.pipe()
        config = dataclasses.replace(self.config, node_id=node_id, workers=1)
        spec = WorkerSpec(config, self._plans[worker.index], os.getpid(), write_fd, self._log_level,
                          self._quiet_level, replaces_pid)
        xoptions = [f"-X{k}" if v is True else f"-X{k}={v}" for k, v in sys._xoptions.items()]
        try:
            proc = subprocess.Popen([sys.executable, *xoptions, "-m", "zkcoord.server.worker"],
                                    stdin=subprocess.PIPE, pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        try:
            proc.stdin.write(pickle.dumps(spec))
            proc.stdin.close()
        except OSError:  # it died at once: seen by the watch
            pass
        os.set_blocking(read_fd, False)
        worker.proc, worker.status_fd, worker.status, worker.report = proc, read_fd, b"", None
        worker.started_at, worker.state, worker.restart_at = time.monotonic(), "starting", None
        log.info("worker %d started (pid %d%s)", worker.index, proc.pid,
                 f", node {node_id}" if node_id != -1 else "")

    def _read_status(self, worker: _Worker) -> None:
        if worker.status_fd is None:
            return
        try:
            data = os.read(worker.status_fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        worker.status += data
        if b"\n" in worker.status:
            worker.report = json.loads(worker.status.split(b"\n", 1)[0])
            worker.node_id = worker.report["node_id"]
            worker.state = "ready"
            self._close_status(worker)
        elif not data:
            self._close_status(worker)

    @staticmethod
    def _close_status(worker: _Worker) -> None:
        if worker.status_fd is not None:
            with suppress(OSError):
                os.close(worker.status_fd)
            worker.status_fd = None

    async def _until_ready(self, workers: list[_Worker]) -> None:
        """Wait until each worker reported ready; ZkcoordError (its exit code)
        when one exits first, or a stop was asked."""
        while True:
            for worker in workers:
                self._read_status(worker)
                code = worker.proc.poll()
                if code is not None and worker.state != "ready":
                    raise _WorkerStartError(worker.index, code)
            if all(w.state == "ready" for w in workers):
                return
            if self._stopping.is_set():
                raise _StoppedWhileStarting()
            await asyncio.sleep(POLL_S / 2)

    # -- running -----------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stopping.set()

    async def watch(self) -> None:
        """Restart workers that die (rule 2) until a stop is asked."""
        while not self._stopping.is_set():
            now = time.monotonic()
            for worker in self.workers:
                self._read_status(worker)
                if worker.state == "restarting":
                    if worker.restart_at is not None and now >= worker.restart_at:
                        self._spawn(worker, worker.node_id if worker.node_id is not None else -1,
                                    replaces_pid=worker.proc.pid)
                    continue
                code = worker.proc.poll()
                if code is not None:
                    self._died(worker, code, now)
            with suppress(TimeoutError):
                async with asyncio.timeout(POLL_S):
                    await self._stopping.wait()

    def _died(self, worker: _Worker, code: int, now: float) -> None:
        self._close_status(worker)
        ran = now - worker.started_at
        if ran >= STABLE_RUN_S:
            worker.restart_delay_s = 0.0
        else:
            worker.restart_delay_s = min(MAX_RESTART_DELAY_S, max(1.0, 2 * worker.restart_delay_s))
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        log.error("worker %d (node %s, pid %d) ended with %s after %.1f s; its groups fail over; starting it again "
                  "in %.1f s", worker.index, worker.node_id, worker.proc.pid, how, ran, worker.restart_delay_s)
        worker.state = "restarting"
        worker.restart_at = now + worker.restart_delay_s

    # -- stop ------------------------------------------------------------------------
    async def stop(self) -> int:
        """Rule 3; the exit code (0, or 1 when a worker had to be killed)."""
        self._stopping.set()
        running = [w for w in self.workers if w.proc is not None and w.proc.poll() is None]
        for worker in running:
            with suppress(ProcessLookupError):
                worker.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.shutdown_timeout_ms / 1000 + STOP_GRACE_S
        while any(w.proc.poll() is None for w in running) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S / 2)
        code = 0
        for worker in running:
            if worker.proc.poll() is None:
                log.error("worker %d (pid %d) did not stop in time; killing it", worker.index, worker.proc.pid)
                with suppress(ProcessLookupError):
                    worker.proc.kill()
                worker.proc.wait()
                code = 1
            worker.state = "stopped"
            self._close_status(worker)
        if self._metrics_server is not None:
            await self._metrics_server.stop()
        for sock in self._sockets:
            sock.close()
        log.info("zkcoord run: all workers stopped")
        return code


class _WorkerStartError(ZkcoordError):
    def __init__(self, index: int, code: int) -> None:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
        super().__init__(f"worker {index} {how} while starting (its error is in the log above)")
        self.exit_code = code if code > 0 else 1


class _StoppedWhileStarting(Exception):
    """SIGTERM or SIGINT before every worker was serving."""


async def _supervise(config: DaemonConfig, count: int) -> int:
    supervisor = Supervisor(config, count)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, supervisor.request_stop)
    try:
        try:
            await supervisor.start()
        except _StoppedWhileStarting:
            return await supervisor.stop()
        except BaseException:
            await supervisor.stop()
            raise
        await supervisor.watch()
        log.info("signal received, stopping %d workers", count)
        return await supervisor.stop()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with suppress(Exception):
                loop.remove_signal_handler(sig)


def run_supervisor(config: DaemonConfig, count: int) -> None:
    """Blocking entry point of ``zkcoord run`` with ``count`` > 1 workers."""
    root = logging.getLogger()
    if root.level > logging.INFO:
        root.setLevel(logging.INFO)
        logging.getLogger("zkcoord").setLevel(logging.INFO)
    code = asyncio.run(_supervise(config, count))
    if code:
        sys.exit(code)
