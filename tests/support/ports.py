"""A port another process listens on, as the tests of zkcoord.wire.listening's check see one."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def foreign_listener(reuse_port: bool, port: int = 0) -> Iterator[socket.socket]:
    """A socket listening on ``port`` of 127.0.0.1 (0: a free one), closed on
    exit; with ``reuse_port`` it has SO_REUSEPORT, as another daemon's
    listener does (the kernel would let a reuse-port socket of ours join it)."""
    sock = socket.socket()
    try:
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(8)
        yield sock
    finally:
        sock.close()
