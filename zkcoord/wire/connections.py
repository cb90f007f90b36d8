"""What every listener knows of its connections: who is on the other end,
and when a connection has been idle too long.

This module owns :class:`ConnectionInfo` (the peer and its principal, as
the handlers and the log see a connection), :data:`ANONYMOUS` (the
principal of a connection nobody logged in on, as Kafka names it), the
monotonic millisecond clock connections note their activity with
(:func:`now_ms`), and :class:`IdleSweep`, which closes the connections of
one listener idle for ``connections_max_idle_ms`` (Kafka's
``connections.max.idle.ms``). Both the daemon's listener
(:mod:`zkcoord.server.transport`) and the gateway's
(:mod:`zkcoord.gateway.gateway`) use them.

Idle (:func:`zkcoord.core.limits.idle_expired`): nothing read or written
for that long and nothing in flight, or an unfinished frame that started
that long ago. The sweep runs every quarter of the limit, at most every
second and at least every 10 ms.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from zkcoord.core.limits import idle_expired

__all__ = ["ANONYMOUS", "ConnectionInfo", "IdleSweep", "Sweepable", "now_ms"]

ANONYMOUS = "User:ANONYMOUS"


def now_ms() -> int:
    """Monotonic milliseconds: what connections note their last activity in."""
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True)
class ConnectionInfo:
    """Who is on the other end of a connection."""

    connection_id: int
    peer_host: str
    peer_port: int
    principal: str = ANONYMOUS  # who is on the other end (listener_security rule 1)

    @property
    def client_host(self) -> str:
        """The peer as Kafka reports it in JoinGroup/DescribeGroups (`/1.2.3.4`)."""
        return "/" + self.peer_host

    def __str__(self) -> str:
        who = "" if self.principal == ANONYMOUS else f" ({self.principal})"
        return f"connection {self.connection_id} from {self.peer_host}:{self.peer_port}{who}"


class Sweepable(Protocol):
    """What the sweep reads of a connection."""

    info: ConnectionInfo
    last_active_ms: int  # the last read or write
    partial_since_ms: int | None  # when the unfinished frame in its buffer started

    @property
    def busy(self) -> bool:
        """A request of this connection is in flight."""


SWEEP_SLICE = 500  # connections looked at between two yields to the event loop


class IdleSweep:
    """Closes a listener's idle connections; ``start()``, ``stop()``.

    ``connections()`` gives the listener's open connections, ``close(c)``
    closes one; the log line goes to the listener's logger, the
    connection named after ``what`` (``"gateway "``: ``closing gateway
    connection 3 from ...``).
    """

    def __init__(self, connections: Callable[[], Iterable[Sweepable]], close: Callable[[Sweepable], None],
                 idle_ms: int, log: logging.Logger, what: str = "") -> None:
        self._connections = connections
        self._close = close
        self.idle_ms = idle_ms
        self._log = log
        self._what = what
        self._task: asyncio.Task | None = None

    def start(self, name: str) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=name)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def sweep(self, now: int, connections: Iterable[Sweepable] | None = None) -> None:
        """Close the connections (``connections``, default all) idle at ``now`` (monotonic ms)."""
        idle_ms = self.idle_ms
        for connection in list(self._connections()) if connections is None else connections:
            why = idle_expired(now, connection.last_active_ms, connection.partial_since_ms, connection.busy,
                               idle_ms)
            if why is not None:
                self._log.info("closing %s%s: %s (connections_max_idle_ms=%d)", self._what, connection.info, why,
                               idle_ms)
                self._close(connection)

    async def _run(self) -> None:
        period_s = min(max(self.idle_ms / 4, 10), 1000) / 1000
        while True:
            await asyncio.sleep(period_s)
            # In slices: 10,000 connections at once would hold the loop about 15 ms, every second,
            # in front of every request arriving meanwhile.
            connections = list(self._connections())
            for start in range(0, len(connections), SWEEP_SLICE):
                if start:
                    await asyncio.sleep(0)
                self.sweep(now_ms(), connections[start:start + SWEEP_SLICE])
