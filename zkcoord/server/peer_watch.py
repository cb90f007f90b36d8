"""The daemon's probe of the next live daemon: a dead one's session ended at once.

This module owns the loop that, every ``--peer-probe-interval-ms``, opens
and closes a TCP connection to the listener of the daemon
:func:`~zkcoord.core.peer_probe.probe_target` names, feeds the outcome to
:class:`~zkcoord.core.peer_probe.PeerProbe`, and on its verdict ends that
daemon's ZooKeeper session (:meth:`~zkcoord.zk.nodes.NodeRegistry.end_session`):
the registration goes, the takeover (:mod:`zkcoord.server.takeover`) of
every daemon starts, and the groups are served again without waiting for
ZooKeeper's expiry. Why a refused connection is proof enough, and why
ending a session is always safe: :mod:`zkcoord.core.peer_probe`.

The live daemons are read with a watch (read again only when one joins or
leaves); each probe waits at most the interval (a connection not accepted
by then is ``no-answer``). The connection sends nothing: the daemon probed
sees a client that connected and left.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from zkcoord.core.peer_probe import Outcome, Peer, PeerProbe, probe_target
from zkcoord.errors import ZkcoordError
from zkcoord.tasks import Background
from zkcoord.zk.nodes import NodeInfo, NodeRegistry

__all__ = ["PeerWatch", "probe"]

log = logging.getLogger(__name__)
RETRY_S = 1.0  # after ZooKeeper trouble reading the live daemons


async def probe(host: str, port: int, timeout_s: float) -> Outcome:
    """One TCP connection to ``host:port``, closed at once: its outcome."""
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        return Outcome.REFUSED
    except (TimeoutError, OSError):
        return Outcome.NO_ANSWER
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return Outcome.ACCEPTED


def _peer(info: NodeInfo) -> Peer:
    return Peer(info.node_id, info.host, info.port, info.start_time_ms, info.pid)


class PeerWatch:
    """Probes the next live daemon; ends its session once it is proved dead."""

    def __init__(self, nodes: NodeRegistry, interval_s: float, metrics=None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._nodes = nodes
        self._interval_s = interval_s
        self._metrics = metrics
        self._clock = clock
        self._probe = PeerProbe()
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._background = Background(log, "peer probe")

    def start(self) -> None:
        if self._task is None and self._interval_s > 0:
            self._task = self._background.spawn(self._run(), "probe the next daemon")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        live: dict[int, NodeInfo] | None = None
        while True:
            if live is None or self._changed.is_set():
                self._changed.clear()
                try:
                    live = await self._nodes.nodes(on_change=self._changed.set)
                except ZkcoordError as exc:
                    log.warning("peer probe: cannot read the live daemons (%s); trying again in %g s", exc, RETRY_S)
                    live = None
                    await asyncio.sleep(RETRY_S)
                    continue
                self._probe.forget(_peer(i) for i in live.values())
            target = probe_target(self._nodes.node_id, live) if self._nodes.node_id is not None else None
            started = self._clock()
            if target is not None:
                await self._probe_once(live[target])
            await asyncio.sleep(max(0.0, self._interval_s - (self._clock() - started)))

    async def _probe_once(self, info: NodeInfo) -> None:
        outcome = await probe(info.host, info.port, self._interval_s)
        if self._metrics is not None:
            self._metrics.peer_probes.labels(outcome.value).inc()
        if not self._probe.observe(_peer(info), outcome, self._clock()):
            return
        log.warning("node %s at %s:%d refused %d connections in a row: its process is gone; ending its ZooKeeper "
                    "session so that its groups are taken over now", info.node_id, info.host, info.port,
                    self._probe.refused)
        try:
            result = await self._nodes.end_session(info.node_id, info)
        except ZkcoordError as exc:
            result = "failed"
            log.warning("could not end the session of node %s (%s); ZooKeeper's expiry will", info.node_id, exc)
        else:
            log.warning("node %s: session %s", info.node_id, result)
        if self._metrics is not None:
            self._metrics.peer_sessions_ended.labels(result).inc()
