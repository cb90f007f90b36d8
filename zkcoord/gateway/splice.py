"""The rest of a streamed broker answer moved from socket to socket in the
kernel (Linux ``splice(2)``), never read into the gateway.

Owns :class:`Splicer`, one per broker connection: once an answer that
streams to the client has more than ``SPLICE_MIN_BYTES`` still to come, its
:class:`~.upstream.Upstream` stops the event loop's reading of the broker's
socket and hands the splicer the count; the splicer moves exactly that many
bytes through a pipe of its own, from the broker's socket to the client's,
waiting for either socket as needed, and then gives the broker's socket
back to the event loop. Without a copy into user space and without Python
per chunk, a MB costs the gateway about a sixth of the CPU of reading and
writing it (bench/RESULTS.md).

Rules:

1. Only where both sockets are plain TCP (TLS needs the bytes), the platform
   has ``os.splice`` and the client transport holds nothing unwritten when
   the splice starts (order: what it holds was before these bytes).
2. The splicer reads no further than the answer's last byte, so the next
   answer's head reaches the event loop's reading as before.
3. While it runs, the client transport writes nothing (the answer order
   writes nothing while an answer streams) and the broker transport reads
   nothing; the client's requests still go on to the broker.
4. It waits on duplicates of the two sockets' descriptors (the event loop
   refuses a transport's own), one direction at a time: readable broker
   when the pipe is empty, writable client when it is not. While it waits
   for the broker, the socket's ``SO_RCVLOWAT`` is the smaller of what is
   still to come and ``WAKE_BYTES``, so it wakes once per that many bytes,
   not per TCP segment (and never waits for bytes the answer does not
   have); it is 1 again when the splice ends.
5. A broker that closes, or either socket failing, mid-answer is the
   answer's failure: ``on_error`` (the client connection closes).
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import socket
from collections.abc import Callable

__all__ = ["SPLICE_MIN_BYTES", "Splicer", "splice_available"]

SPLICE_MIN_BYTES = 128 * 1024
WAKE_BYTES = 512 * 1024
PIPE_BYTES = 1 << 20  # asked of F_SETPIPE_SZ; the kernel may give less (fs.pipe-max-size)
_F_SETPIPE_SZ = 1031
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)
_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)


def splice_available() -> bool:
    return hasattr(os, "splice")


def _fd_of(transport: asyncio.BaseTransport) -> int | None:
    """A plain TCP transport's descriptor, None for TLS or anything else."""
    if transport is None or transport.is_closing() or transport.get_extra_info("sslcontext") is not None:
        return None
    sock = transport.get_extra_info("socket")
    try:
        return sock.fileno() if sock is not None else None
    except (OSError, ValueError):
        return None


class Splicer:
    """Moves answer bytes from ``source`` (the broker transport) to ``target``
    (the client transport) in the kernel; ``on_done()`` when all are moved,
    ``on_error(why)`` when they cannot be."""

    def __init__(self, source: asyncio.Transport, target: asyncio.Transport, on_done: Callable[[], None],
                 on_error: Callable[[str], None], on_fallback: Callable[[], None]) -> None:
        self._source, self._target = source, target
        self._on_done, self._on_error, self._on_fallback = on_done, on_error, on_fallback
        self._count = 0
        self._loop = asyncio.get_running_loop()
        self._pipe: tuple[int, int] | None = None
        self._pipe_bytes = PIPE_BYTES
        self._src = self._dst = -1  # our duplicates, while a splice runs
        self._src_sock: socket.socket | None = None  # owns self._src (for SO_RCVLOWAT)
        self._lowat = 1
        self._to_read = 0
        self._in_pipe = 0
        self._waiting: str | None = None  # "read" or "write"
        self.active = False
        self._broken = False

    def usable(self) -> bool:
        """Rule 1, now."""
        if self._broken or self.active or self._source.is_closing() or self._target.is_closing():
            return False
        return self._target.get_write_buffer_size() == 0

    def start(self, count: int) -> bool:
        """Move the next ``count`` bytes of the broker's socket to the client's.
        False when it cannot start (nothing changed: the caller reads as before)."""
        if self._pipe is None:  # the first splice of this connection: the pipe and descriptors, kept
            src, dst = _fd_of(self._source), _fd_of(self._target)
            if src is None or dst is None:
                return False
            try:
                self._pipe = os.pipe()
                try:
                    fcntl.fcntl(self._pipe[1], _F_SETPIPE_SZ, PIPE_BYTES)
                except OSError:  # the pipe's default (64 KiB) works, with more wake-ups
                    self._pipe_bytes = 64 * 1024
                self._src_sock = socket.socket(fileno=os.dup(src))
                self._src, self._dst = self._src_sock.fileno(), os.dup(dst)
            except OSError:
                self._broken = True
                self.close()
                return False
        self._source.pause_reading()
        self.active = True
        self._count = self._to_read = count
        self._in_pipe = 0
        self._pump()
        return True

    def close(self) -> None:
        """The connection is going: stop, and free the pipe and descriptors."""
        self._stop_waiting()
        self.active = False
        if self._src_sock is not None:
            self._src_sock.close()
            self._src_sock = None
        if self._dst >= 0:
            os.close(self._dst)
        self._src = self._dst = -1
        if self._pipe is not None:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None

    # -- the pump --------------------------------------------------------------------
    def _pump(self) -> None:
        read_end, write_end = self._pipe
        try:
            while True:
                if self._in_pipe:
                    try:
                        moved = os.splice(read_end, self._dst, self._in_pipe, flags=_FLAGS)
                    except BlockingIOError:
                        self._wait("write")
                        return
                    self._in_pipe -= moved
                    continue
                if not self._to_read:
                    break
                try:
                    moved = os.splice(self._src, write_end, min(self._to_read, self._pipe_bytes), flags=_FLAGS)
                except BlockingIOError:
                    self._wait("read")
                    return
                if not moved:
                    self._fail("its broker connection closed in the middle of an answer")
                    return
                self._to_read -= moved
                self._in_pipe += moved
        except OSError as exc:
            if exc.errno in _UNSUPPORTED and self._to_read == self._count and not self._in_pipe:
                self._broken = True  # nothing moved, and this kernel cannot splice these: read as before
                self._end()
                self._on_fallback()
                return
            self._fail(f"moving an answer to the client failed ({exc})")
            return
        self._end()
        self._on_done()

    def _set_lowat(self, count: int) -> None:
        if count != self._lowat and self._src_sock is not None:
            try:
                self._src_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, count)
                self._lowat = count
            except OSError:
                pass

    def _wait(self, direction: str) -> None:
        if direction == "read" and self._waiting == "read":
            self._set_lowat(min(self._to_read, WAKE_BYTES))
        if self._waiting == direction:
            return
        self._stop_waiting()
        if direction == "read":
            self._set_lowat(min(self._to_read, WAKE_BYTES))
            self._loop.add_reader(self._src, self._pump)
        else:
            self._loop.add_writer(self._dst, self._pump)
        self._waiting = direction

    def _stop_waiting(self) -> None:
        if self._waiting == "read":
            self._loop.remove_reader(self._src)
        elif self._waiting == "write":
            self._loop.remove_writer(self._dst)
        self._waiting = None

    def _fail(self, why: str) -> None:
        self._end()
        self._on_error(why)

    def _end(self) -> None:
        self._stop_waiting()
        self.active = False
        self._set_lowat(1)  # the event loop reads this socket again: every byte wakes it
