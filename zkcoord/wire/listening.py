"""Listening sockets sized for a reconnect storm, shared by the daemon's
listener (:mod:`zkcoord.server.transport`), the gateway's
(:mod:`zkcoord.gateway.gateway`) and the workers' supervisor.

Rules:

1. The backlog is the kernel's maximum (:func:`default_backlog`, Linux's
   ``net.core.somaxconn``), not asyncio's 100: after a fail-over thousands
   of clients connect within a second. A connection the kernel cannot
   queue is dropped (``ListenOverflows``) and its client, which saw the
   handshake complete, waits for answers nobody reads: up to its request
   time-out, or minutes of retransmissions.
2. One socket's queue is capped at ``somaxconn`` (4096 on current kernels),
   and a storm of 10,000 clients comes faster than one event loop accepts
   them (30-50 us each). Where the kernel spreads one port's connections
   over several ``SO_REUSEPORT`` listeners (:func:`reuse_port_spreads`:
   Linux), a port is ``count`` such sockets (default
   :data:`DEFAULT_LISTEN_SOCKETS`), each with its own queue, all served by
   the same process.
3. ``SO_REUSEPORT`` lets any socket of the same user join the port. So
   before a port of ours is bound that way, it is bound once without it
   and released (:func:`check_port_free`): a port another process holds is
   refused as a single socket would be, never silently shared. A port the
   workers share on purpose (the supervisor holds it) is not checked.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

__all__ = ["DEFAULT_LISTEN_SOCKETS", "default_backlog", "reuse_port_spreads", "check_port_free", "socket_plan",
           "listening_sockets"]

DEFAULT_LISTEN_SOCKETS = 4  # rule 2: 4 x somaxconn (16,384 on current kernels) queued for the loop to accept
SOMAXCONN = Path("/proc/sys/net/core/somaxconn")


def default_backlog() -> int:
    """The most connections the kernel queues for a listener (Linux's
    ``net.core.somaxconn``; elsewhere the C library's SOMAXCONN): asking for
    more is capped to it, asking for less wastes it (rule 1)."""
    try:
        return max(1, int(SOMAXCONN.read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return socket.SOMAXCONN


def reuse_port_spreads() -> bool:
    """Does this system spread one port's connections over several
    ``SO_REUSEPORT`` listeners (rule 2)? Elsewhere one socket listens."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def _bind_error(exc: OSError, address) -> OSError:
    """``exc`` worded as asyncio words a failed bind (the address, then the reason)."""
    reason = exc.strerror.lower() if exc.strerror else str(exc)
    return OSError(exc.errno, f"error while attempting to bind on address {address!r}: {reason}")


def check_port_free(host: str | None, port: int) -> None:
    """OSError (EADDRINUSE, worded as a failed bind) when anything is bound
    to ``port`` on an address ``host`` names (rule 3). The probe is bound,
    never listening, and closed at once."""
    for family, kind, proto, _, address in dict.fromkeys(
            socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)):
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio binds: TIME_WAIT is no owner
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                raise _bind_error(exc, address) from None


def socket_plan(host: str | None, port: int, count: int, shared: bool) -> tuple[int, bool]:
    """(how many sockets, whether with ``SO_REUSEPORT``) for ``count`` wanted
    on ``port``: one where the system does not spread connections over
    several (rule 2), reuse-port for several or for the workers' ``shared``
    port; a port another process holds is refused here (rule 3): OSError."""
    count = count if reuse_port_spreads() else 1
    reuse = shared or count > 1
    if reuse and not shared and port:
        check_port_free(host, port)
    return count, reuse


def listening_sockets(host: str | None, port: int, *, count: int = DEFAULT_LISTEN_SOCKETS, backlog: int = 0,
                      shared: bool = False) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets on ``host``'s first address
    and ``port`` (0: the kernel picks one, shared by all of them): ``count``
    with ``SO_REUSEPORT`` where the system spreads connections over them,
    else one (rules 2 and 3). ``shared``: a port the workers share, bound
    with ``SO_REUSEPORT`` and not checked. OSError when one cannot be bound
    (nothing is left open)."""
    count, reuse = socket_plan(host, port, count, shared)
    family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            where = address if len(sockets) == 1 else (address[0], sockets[0].getsockname()[1], *address[2:])
            try:
                sock.bind(where)
            except OSError as exc:
                raise _bind_error(exc, where) from None
            sock.listen(backlog or default_backlog())
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets
