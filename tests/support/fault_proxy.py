"""A TCP proxy that delays, stalls, drops and cuts, for fault tests.

The kernel here has no ``netem`` qdisc and there is no iptables, so what
``tc netem`` would do to a link is done in user space, between one process
and one service: the process is given the proxy's address instead of the
service's (a daemon's ``--zookeeper``, a member's ``--coordinators``, or a
daemon's ``--advertised`` address so that FindCoordinator sends its clients
through the proxy). :class:`FaultProxy` runs an asyncio loop in a thread of
the test process; every setter is thread-safe and takes effect at once.

Faults, per direction (``up``: client to service, ``down``: back):

* **delay** (:meth:`FaultProxy.delay`): each chunk read is written
  ``delay_ms`` later; order is kept (a chunk never overtakes the one before,
  also when the delay shrinks), as on a slow link;
* **stall** (:meth:`FaultProxy.stall`): nothing is written until
  :meth:`FaultProxy.heal`, then everything held goes, in order (a
  partition that heals: TCP would retransmit); the connections stay open;
  new connections are accepted and stall too (the kernel completes the
  handshake before the proxy sees it);
* **drops** (:meth:`FaultProxy.drop`): each chunk, with the given
  probability, resets its connection (both sides; an RST, as a broken
  link or a middlebox gives); and stalls of a chunk for ``stall_ms`` with
  another probability;
* **cut** (:meth:`FaultProxy.cut`): every connection reset now, new ones
  reset as they come, until :meth:`FaultProxy.heal`.

Random choices come from one ``random.Random(seed)``, drawn in the order
chunks arrive: the same seed and the same traffic give the same faults
(what the traffic is depends on timing, as with any fault run).
:attr:`FaultProxy.stats` counts connections, bytes, resets.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
from dataclasses import dataclass, field

CHUNK = 65536
CONNECT_TIMEOUT_S = 10.0
UP, DOWN = "up", "down"


@dataclass
class ProxyStats:
    connections: int = 0
    refused: int = 0  # closed at once (cut, or the service did not answer)
    resets: int = 0  # connections reset by drop() or cut()
    read: dict[str, int] = field(default_factory=lambda: {UP: 0, DOWN: 0})  # bytes the proxy received
    bytes: dict[str, int] = field(default_factory=lambda: {UP: 0, DOWN: 0})  # bytes it passed on


@dataclass
class _Direction:
    delay_s: float = 0.0
    stalled: bool = False


class _Link:
    """One proxied connection: two pipes and their writers."""

    def __init__(self, client: asyncio.StreamWriter, service: asyncio.StreamWriter) -> None:
        self.writers = {UP: service, DOWN: client}  # who a direction writes to
        self.tasks: list[asyncio.Task] = []
        self.closed = False

    def reset(self) -> None:
        if self.closed:
            return
        self.closed = True
        for writer in self.writers.values():
            _abort(writer)
        for task in self.tasks:
            task.cancel()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with an RST, not a FIN: the peer sees the connection broken
    (SO_LINGER 0; asyncio's ``abort`` alone closes normally)."""
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()


class FaultProxy:
    """``listen`` -> ``upstream``, with faults (module docstring). Use as a
    context manager, or :meth:`start` / :meth:`stop`."""

    def __init__(self, upstream: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0), seed: int = 0,
                 name: str = "") -> None:
        self.upstream = upstream
        self.listen = listen
        self.name = name or f"proxy to {upstream[0]}:{upstream[1]}"
        self.rng = random.Random(seed)
        self.stats = ProxyStats()
        self.directions = {UP: _Direction(), DOWN: _Direction()}
        self.drop_probability = 0.0
        self.stall_probability = 0.0
        self.stall_s = 0.0
        self.is_cut = False
        self._links: set[_Link] = set()
        self._healed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self.address: tuple[str, int] | None = None

    # -- life ------------------------------------------------------------------------------
    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> FaultProxy:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=self.name, daemon=True)
        self._thread.start()
        self._call(self._start())
        return self

    async def _start(self) -> None:
        self._healed = asyncio.Event()
        self._healed.set()
        self._server = await asyncio.start_server(self._serve, *self.listen)
        self.address = self._server.sockets[0].getsockname()[:2]

    def stop(self) -> None:
        """Close the listener and every connection; end the thread."""
        if self._loop is None:
            return
        try:
            self._call(self._stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()
            self._loop = None

    async def _stop(self) -> None:
        self._server.close()
        for link in list(self._links):
            link.reset()
        await self._server.wait_closed()

    @property
    def hostport(self) -> str:
        """``host:port`` of the proxy, to give the process instead of the service's."""
        return f"{self.address[0]}:{self.address[1]}"

    def _call(self, coro, timeout_s: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    # -- faults (any thread) -----------------------------------------------------------
    def delay(self, up_ms: float = 0, down_ms: float = 0) -> None:
        """Write each chunk this much later, per direction (0: no delay)."""
        self.directions[UP].delay_s = up_ms / 1000
        self.directions[DOWN].delay_s = down_ms / 1000

    def drop(self, probability: float = 0.0, stall_probability: float = 0.0, stall_ms: float = 0) -> None:
        """Per chunk: reset its connection with ``probability``; else hold it
        ``stall_ms`` with ``stall_probability``."""
        self.drop_probability = probability
        self.stall_probability, self.stall_s = stall_probability, stall_ms / 1000

    def stall(self, up: bool = True, down: bool = True) -> None:
        """Hold every byte of these directions until :meth:`heal`."""
        self._call(self._stall(up, down))

    async def _stall(self, up: bool, down: bool) -> None:
        self.directions[UP].stalled = up
        self.directions[DOWN].stalled = down
        if up or down:
            self._healed.clear()

    def cut(self) -> None:
        """Reset every connection and each new one, until :meth:`heal`."""
        self._call(self._cut())

    async def _cut(self) -> None:
        self.is_cut = True
        for link in list(self._links):
            self.stats.resets += not link.closed
            link.reset()

    def heal(self) -> None:
        """No more faults: no delay, no drops, no stall (what was held goes now), no cut."""
        self._call(self._heal())

    async def _heal(self) -> None:
        self.delay(0, 0)
        self.drop(0.0)
        self.is_cut = False
        for direction in self.directions.values():
            direction.stalled = False
        self._healed.set()

    def open_connections(self) -> int:
        return sum(not link.closed for link in self._links)

    # -- the connections ---------------------------------------------------------------------
    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        if self.is_cut:
            self.stats.refused += 1
            _abort(client_writer)
            return
        try:
            service_reader, service_writer = await asyncio.wait_for(asyncio.open_connection(*self.upstream),
                                                                    CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            self.stats.refused += 1
            _abort(client_writer)
            return
        link = _Link(client_writer, service_writer)
        self._links.add(link)
        link.tasks = [asyncio.ensure_future(self._pipe(link, UP, client_reader)),
                      asyncio.ensure_future(self._pipe(link, DOWN, service_reader))]
        try:
            await asyncio.gather(*link.tasks, return_exceptions=True)
        finally:
            self._links.discard(link)
            if not link.closed:
                link.closed = True
                for writer in link.writers.values():
                    writer.close()

    async def _pipe(self, link: _Link, direction: str, reader: asyncio.StreamReader) -> None:
        """Read ``direction``'s chunks as they come; a writer task sends them
        when due, in order."""
        queue: asyncio.Queue = asyncio.Queue()
        writer = asyncio.ensure_future(self._write(link, direction, queue))
        link.tasks.append(writer)
        loop = asyncio.get_running_loop()
        due = 0.0
        try:
            while True:
                try:
                    data = await reader.read(CHUNK)
                except (ConnectionError, OSError):
                    data = b""
                self.stats.read[direction] += len(data)
                if data and self.drop_probability and self.rng.random() < self.drop_probability:
                    self.stats.resets += 1
                    link.reset()
                    return
                extra = self.stall_s if data and self.stall_probability and \
                    self.rng.random() < self.stall_probability else 0.0
                due = max(due, loop.time() + self.directions[direction].delay_s + extra)
                await queue.put((due, data))
                if not data:
                    break
            await writer
        finally:
            if not writer.done():
                writer.cancel()

    async def _write(self, link: _Link, direction: str, queue: asyncio.Queue) -> None:
        loop = asyncio.get_running_loop()
        out = link.writers[direction]
        while True:
            due, data = await queue.get()
            wait_s = due - loop.time()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            while self.directions[direction].stalled:
                await self._healed.wait()
            if link.closed:
                return
            if not data:  # the sender closed its side: pass the half-close on
                if out.can_write_eof():
                    out.write_eof()
                return
            self.stats.bytes[direction] += len(data)
            out.write(data)
            try:
                await out.drain()
            except (ConnectionError, OSError):
                link.reset()
                return
