"""Helpers for the zk adapter tests (no tests here): a daemon's connection, a
TCP proxy whose connections a test can cut (SUSPENDED without expiry), and
waiting for an outcome without asserting on time."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading

from zkcoord.zk.connection import ZkConnection


@contextlib.asynccontextmanager
async def connection(hosts: str, *, events: list | None = None, session_timeout_ms: int = 6000,
                     request_timeout_ms: int = 20_000):
    """A started ZkConnection, like a daemon's; ``events`` collects its session events."""
    conn = ZkConnection(hosts, session_timeout_ms=session_timeout_ms, connect_timeout_ms=20_000,
                        request_timeout_ms=request_timeout_ms)
    if events is not None:
        conn.add_listener(events.append, asyncio.get_running_loop())
    await asyncio.to_thread(conn.start)
    try:
        yield conn
    finally:
        await asyncio.to_thread(conn.stop)


async def eventually(predicate, what: str, timeout_s: float = 30.0):
    """Wait until ``predicate()`` is truthy (polling the loop); return its value."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() > end:
            raise AssertionError(f"gave up after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.02)


async def eventually_equal(coro_fn, expected, what: str, timeout_s: float = 30.0):
    """Wait until ``await coro_fn() == expected`` (for eventually consistent caches)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while (value := await coro_fn()) != expected:
        if loop.time() > end:
            raise AssertionError(f"gave up after {timeout_s} s waiting for {what}: still {value!r}")
        await asyncio.sleep(0.02)


class _Pair:
    """One proxied connection: its client and upstream sockets; while ``held``, what the client sends
    is kept in ``kept`` (not forwarded) and what ZooKeeper sends is dropped, as in a network cut."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client, self.upstream = client, upstream
        self.held = False
        self.kept = bytearray()
        self.upstream_ended = False  # ZooKeeper closed its end


class CuttableProxy:
    """A TCP proxy to ZooKeeper. ``cut()`` drops every connection and refuses
    new ones until ``resume()``: the client sees SUSPENDED, and reconnects
    with the same session after ``resume()`` (if it did not expire).
    ``hold(n)`` cuts the n-th connection (from 0, in the order accepted) the
    way a network does: nothing goes through and nothing is closed; what the
    client sent meanwhile reaches ZooKeeper at ``release(n)``, as a kernel's
    retransmissions do when the network heals."""

    def __init__(self, upstream: str, port: int = 0) -> None:
        host, _, upstream_port = upstream.rpartition(":")
        self._upstream = (host, int(upstream_port))
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.pairs: list[_Pair] = []
        self._refusing = False
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def hosts(self, chroot: str) -> str:
        return f"127.0.0.1:{self.port}{chroot}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._refusing:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            pair = _Pair(client, upstream)
            with self._lock:
                self._sockets += [client, upstream]
                self.pairs.append(pair)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst, pair), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, pair: _Pair) -> None:
        try:
            while data := src.recv(65536):
                if not pair.held:
                    dst.sendall(data)
                elif src is pair.client:
                    pair.kept += data
        except OSError:
            pass
        if src is pair.upstream:
            pair.upstream_ended = True
        if pair.held:
            return  # a cut network closes nothing
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def hold(self, n: int) -> None:
        self.pairs[n].held = True

    def release(self, n: int) -> None:
        """Send what connection ``n`` kept to ZooKeeper (if it still takes it), and pass bytes again."""
        pair = self.pairs[n]
        with contextlib.suppress(OSError):
            pair.upstream.sendall(bytes(pair.kept))
        pair.held = False

    def cut(self) -> None:
        self._refusing = True
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def resume(self) -> None:
        self._refusing = False

    def refuse_new(self) -> None:
        """Close each new connection as soon as it is accepted, as ZooKeeper does past
        ``maxClientCnxns``; the connections open stay, until ``resume()``."""
        self._refusing = True

    def close(self) -> None:
        self._closed = True
        self.cut()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (a close alone does not)
        self._listener.close()
