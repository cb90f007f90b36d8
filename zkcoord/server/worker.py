"""One worker process of ``zkcoord run --workers N`` (N > 1).

Started by :mod:`zkcoord.server.supervisor` as ``python -m
zkcoord.server.worker``, with its :class:`WorkerSpec` pickled on stdin. A
worker is a whole daemon (:class:`~zkcoord.server.daemon.Daemon`): its own
node id and ZooKeeper session, its groups, its listener and gateway ports
of its own beside the shared ones (:mod:`zkcoord.core.workers`).

Rules:

1. It dies with its supervisor (Linux ``PR_SET_PDEATHSIG``: SIGKILL), so a
   ``kill -9`` of ``zkcoord run`` is a kill -9 of every worker, as of a
   daemon without workers: their sessions expire and other daemons take
   their groups.
2. SIGTERM and SIGINT stop it gracefully (the daemon's stop: groups
   released at once).
3. Once serving it writes one JSON line to the supervisor's status pipe:
   its node id and the ports it bound; a start that fails prints one
   ``error:`` line and exits with the error's code, as ``zkcoord run`` does.
4. Its log lines say which worker wrote them (``[worker k]``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import signal
import sys
from contextlib import suppress
from dataclasses import dataclass

from zkcoord.config import DaemonConfig
from zkcoord.core.workers import WorkerPlan
from zkcoord.errors import ZkcoordError

__all__ = ["WorkerSpec", "main"]

log = logging.getLogger("zkcoord.worker")

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker is told on stdin."""

    config: DaemonConfig  # node_id: its own (-1: allocate one)
    plan: WorkerPlan
    supervisor_pid: int
    status_fd: int  # where the ready line goes
    log_level: int
    quiet_level: int  # kazoo's and kafka-python's
    replaces_pid: int | None = None  # a restart: the worker it replaces


def _die_with_parent(supervisor_pid: int) -> None:
    """Rule 1 (Linux); elsewhere the worker outlives a killed supervisor."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != supervisor_pid:  # it died before prctl took effect
        os._exit(1)


def _setup_logging(spec: WorkerSpec) -> None:
    logging.basicConfig(level=spec.log_level,
                        format=f"%(asctime)s %(levelname)s [worker {spec.plan.index}] %(name)s: %(message)s")
    for noisy in ("kazoo", "kafka"):
        logging.getLogger(noisy).setLevel(spec.quiet_level)


async def _serve(spec: WorkerSpec) -> None:
    from zkcoord.server.daemon import Daemon, tune_interpreter

    daemon = Daemon(spec.config, spec.plan, spec.replaces_pid)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        running = await daemon.start()
        report = {"node_id": running.node_id, "port": running.bound_port, "advertised": list(running.advertised),
                  "gateway": list(running.gateway) if running.gateway else None,
                  "metrics_port": running.metrics_port, "pid": os.getpid()}
        with suppress(OSError):
            os.write(spec.status_fd, (json.dumps(report) + "\n").encode())
        with suppress(OSError):
            os.close(spec.status_fd)
        tune_interpreter()
        await stop.wait()
        log.info("signal received, stopping")
        await daemon.stop()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with suppress(Exception):
                loop.remove_signal_handler(sig)


def main() -> None:
    spec: WorkerSpec = pickle.load(sys.stdin.buffer)
    _die_with_parent(spec.supervisor_pid)
    _setup_logging(spec)
    from zkcoord.server.daemon import _loop_factory, exit_now

    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(_serve(spec))
        exit_now(0)
    except ZkcoordError as exc:
        print(f"error: worker {spec.plan.index}: {exc}", file=sys.stderr, flush=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
