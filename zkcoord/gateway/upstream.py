"""The broker side of one gateway client connection: a pipe to its broker.

Owns :class:`BrokerLink`, the way from one client connection to its broker
(one per client connection, :mod:`.connection` rule 5): the frames not yet
written, the answers awaited (:class:`Expected`, in request order, as
Kafka's brokers answer), and the broker connection once it is open;
:class:`Upstream`, the ``asyncio.Protocol`` of that connection, which cuts
the broker's answers; and :func:`open_upstream`, which opens it to the
first candidate that accepts, over TLS when the brokers speak it (the
daemon's ``kafka_client_config``; the broker's certificate is checked
against its host name as Kafka's clients check it).

Each answer's size and correlation id are read to pair it with the answer
awaited first. An answer whose slot is next in the client's
:class:`~.answer_order.AnswerOrder`, and that nobody must read, is streamed
straight into it, byte for byte; any other is buffered whole and handed to
the client connection.

Events go one way: the pipe tells the client connection what happened
(:class:`UpstreamEvents`) and never reaches into it; the client connection
drives the pipe through its methods.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from collections.abc import Callable
from typing import Protocol

from kafka.protocol.schemas.fields.codecs import Int32

from zkcoord.gateway.answer_order import AnswerOrder, Slot
from zkcoord.gateway.splice import SPLICE_MIN_BYTES, Splicer, splice_available
from zkcoord.wire.errors import WireProtocolError
from zkcoord.wire.framing import FRAME_SIZE_PREFIX_BYTES

__all__ = ["BrokerLink", "Expected", "Upstream", "UpstreamEvents", "open_upstream", "CONNECT_TIMEOUT_S"]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
_HEAD_BYTES = FRAME_SIZE_PREFIX_BYTES + 4  # an answer's size and correlation id


class BrokerAnswerError(WireProtocolError):
    """The broker sent an answer that pairs with no request."""


class Expected:
    """A forwarded request whose answer has not started to arrive."""

    __slots__ = ("slot", "correlation_id", "api_key", "api_version", "rewrite", "login", "read_first")

    def __init__(self, slot: Slot, correlation_id: int, api_key: int, api_version: int, rewrite: bool,
                 login=None) -> None:
        self.slot, self.correlation_id = slot, correlation_id
        self.api_key, self.api_version, self.rewrite = api_key, api_version, rewrite
        self.login = login  # a login request (decoded) whose answer the connection's login reads first
        self.read_first = rewrite or login is not None  # the client connection reads it before it goes out


class UpstreamEvents(Protocol):
    """What the pipe tells its client connection."""

    def upstream_open(self) -> None:
        """The broker connection is open and the frames held for it are written."""

    def answer_arrived(self, expected: Expected, frame: bytes) -> None:
        """A whole answer the client connection reads first (``expected.read_first``)."""

    def answers_moved(self) -> None:
        """An answer arrived and was passed on: one fewer is awaited."""

    def upstream_full(self, full: bool) -> None:
        """The broker's socket buffer is full (True) or drained (False)."""

    def upstream_closed(self, why: str, level: int) -> None:
        """The pipe is gone (``why``, for the log at ``level``): the client connection closes."""


class Measured(Protocol):
    """Where the link reports what it forwards: ``metrics`` is the daemon's
    DaemonMetrics, or None (read at each use: the daemon sets them once they exist)."""

    metrics: object


class BrokerLink:
    """One client connection's way to its broker. ``forward`` a frame (with
    the answer it expects, if any), ``push`` what was forwarded; ``connect``
    opens the broker connection, once."""

    def __init__(self, events: UpstreamEvents, answers: AnswerOrder, measured: Measured,
                 candidates: Callable[[], list[tuple[str, int]]], ssl_context: ssl.SSLContext | None,
                 broker_id: int | None) -> None:
        self.events = events
        self.answers = answers
        self._measured = measured
        self._candidates = candidates
        self._ssl = ssl_context
        self._broker_id = broker_id
        self.expected: deque[Expected] = deque()  # forwarded, answer not started, in request order
        self._frames: list[bytes] = []  # forwarded, not written yet
        self._upstream: Upstream | None = None
        self._connecting: asyncio.Task | None = None
        self._paused = False  # the client does not read: neither do we read the broker
        self._closed = False
        self.task_name = "gateway-upstream"  # its connecting task's, for debugging
        # The client's transport, where answers may be spliced to (zkcoord.gateway.splice); None: never.
        self.splice_target: Callable[[], asyncio.Transport | None] | None = None

    @property
    def paused(self) -> bool:
        """The client does not read: the broker's socket is not read either."""
        return self._paused

    @property
    def held(self) -> int:
        """Frames waiting for the broker connection to open."""
        return len(self._frames) if self._upstream is None else 0

    def forward(self, frame: bytes, api_key: int, expected: Expected | None) -> None:
        """``frame`` goes to the broker at the next :meth:`push`; its answer is
        ``expected`` (None: it gets none)."""
        if expected is not None:
            self.expected.append(expected)
        metrics = self._measured.metrics
        if metrics is not None:
            metrics.observe_forward(api_key, len(frame))
        self._frames.append(frame)
        if self._upstream is None and self._connecting is None:
            self.connect()

    def push(self) -> None:
        """Write the forwarded frames, in one call (held until the connection is open)."""
        if self._upstream is not None and self._frames:
            self._upstream.writelines(self._frames)
            self._frames = []

    def connect(self) -> None:
        if not self._closed:  # a closed link opens nothing more
            self._connecting = asyncio.get_running_loop().create_task(self._open(), name=self.task_name)

    def pause_reading(self) -> None:
        self._paused = True
        if self._upstream is not None:
            self._upstream.pause_reading()

    def resume_reading(self) -> None:
        self._paused = False
        if self._upstream is not None:
            self._upstream.resume_reading()

    def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._upstream is not None:
            self._upstream.close()

    async def _open(self) -> None:
        candidates = self._candidates()
        if not candidates:
            self._connecting = None
            self.events.upstream_closed(f"broker {self._broker_id} has no known address", logging.INFO)
            return
        upstream, errors = await open_upstream(lambda: Upstream(self), candidates, self._ssl)
        self._connecting = None
        if upstream is None:
            metrics = self._measured.metrics
            if metrics is not None:
                metrics.observe_broker_connect_failure()
            self.events.upstream_closed(f"no broker accepts a connection ({'; '.join(errors)})", logging.INFO)
            return
        if self._closed:
            upstream.close()
            return
        self._upstream = upstream
        if self._paused:
            upstream.pause_reading()
        self.push()
        self.events.upstream_open()

    # -- what its Upstream asks --------------------------------------------------------
    def pair(self, correlation_id: int, frame_bytes: int) -> tuple[Expected, bool]:
        """Whose answer of ``frame_bytes`` (size prefix included) this is,
        and whether it streams into the answer order."""
        if not self.expected:
            raise BrokerAnswerError(f"the broker sent an answer (correlation id {correlation_id}) to no request")
        expected = self.expected.popleft()
        if expected.correlation_id != correlation_id:
            raise BrokerAnswerError(f"the broker answered correlation id {correlation_id}, expected "
                                    f"{expected.correlation_id}")
        metrics = self._measured.metrics
        if metrics is not None:
            metrics.observe_forwarded_answer(expected.api_key, frame_bytes)
        return expected, not expected.read_first and self.answers.stream_if_next(expected.slot)


async def open_upstream(protocol: Callable[[], Upstream], candidates: list[tuple[str, int]],
                        ssl_context: ssl.SSLContext | None) -> tuple[Upstream | None, list[str]]:
    """The first candidate broker that accepts a connection (None, and why
    each failed, when none does)."""
    loop = asyncio.get_running_loop()
    errors = []
    for host, port in candidates:
        tls = {} if ssl_context is None else {"ssl": ssl_context, "server_hostname": host}
        try:
            _, upstream = await asyncio.wait_for(loop.create_connection(protocol, host, port, **tls),
                                                 CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError: a certificate refused
            errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
            continue
        return upstream, errors
    return None, errors


class Upstream(asyncio.Protocol):
    """The broker connection of one :class:`BrokerLink`: writes the client's
    frames, cuts the broker's answers and passes them on."""

    def __init__(self, link: BrokerLink) -> None:
        self._link = link
        self._events = link.events
        self._answers = link.answers
        self._transport: asyncio.Transport | None = None
        self._head = bytearray()
        self._expected: Expected | None = None
        self._streamed = False
        self._remaining = 0
        self._parts: list | None = None
        self._closed = False
        self._splicer: Splicer | None = None
        self._splice = splice_available() and link.splice_target is not None and link._ssl is None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def writelines(self, frames: list[bytes]) -> None:
        if not self._closed:
            if len(frames) == 1:
                self._transport.write(frames[0])
            else:
                self._transport.writelines(frames)

    def pause_writing(self) -> None:
        self._events.upstream_full(True)

    def resume_writing(self) -> None:
        self._events.upstream_full(False)

    def pause_reading(self) -> None:
        if not self._closed and not self._splicing:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if not self._closed and not self._splicing:
            self._transport.resume_reading()

    @property
    def _splicing(self) -> bool:
        return self._splicer is not None and self._splicer.active

    def close(self) -> None:
        self._closed = True
        if self._splicer is not None:
            self._splicer.close()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._splicer is not None:
            self._splicer.close()
        self._events.upstream_closed(f"its broker connection closed{f' ({exc!r})' if exc else ''}", logging.INFO)

    def data_received(self, data: bytes) -> None:
        try:
            self._cut(data)
        except (WireProtocolError, ValueError) as exc:
            self.close()
            self._events.upstream_closed(f"bad answer from its broker: {exc}", logging.WARNING)
            return
        self._answers.flush()
        if self._streamed and self._remaining >= SPLICE_MIN_BYTES and self._splice and not self._closed:
            self._start_splice()

    # -- the rest of a long streamed answer, in the kernel (zkcoord.gateway.splice) -----
    def _start_splice(self) -> None:
        splicer = self._splicer
        if splicer is None:
            target = self._link.splice_target()
            if target is None:
                self._splice = False
                return
            splicer = self._splicer = Splicer(self._transport, target, self._spliced, self._splice_failed,
                                              self._splice_fell_back)
        if splicer.usable():
            splicer.start(self._remaining)

    def _spliced(self) -> None:
        """The streamed answer's last byte went to the client."""
        self._remaining = 0
        if not self._link.paused:
            self._transport.resume_reading()
        self._answer_ends()

    def _splice_fell_back(self) -> None:
        self._splice = False
        if not self._link.paused:
            self._transport.resume_reading()

    def _splice_failed(self, why: str) -> None:
        self.close()
        self._events.upstream_closed(why, logging.INFO)

    def _cut(self, data: bytes) -> None:
        """Pass on the answers in ``data``."""
        view = memoryview(data)
        pos, end = 0, len(data)
        while pos < end:
            if self._expected is None:
                pos = self._read_head(view, pos)
                if self._expected is None:
                    return
            take = min(end - pos, self._remaining)
            if take:
                chunk = view[pos:pos + take]
                pos += take
                self._remaining -= take
                if self._streamed:
                    self._answers.stream(chunk)
                else:
                    self._parts.append(chunk)
            if self._remaining == 0:
                self._answer_ends()

    def _read_head(self, view: memoryview, pos: int) -> int:
        """Read what ``view`` has of the next answer's size and correlation
        id from ``pos``; once whole, pair the answer. Where reading stopped."""
        take = view[pos:pos + _HEAD_BYTES - len(self._head)]
        self._head += take
        pos += len(take)
        if len(self._head) < _HEAD_BYTES:
            return pos
        head = bytes(self._head)
        self._head.clear()
        size, _ = Int32.decode_from(head, 0)
        correlation_id, _ = Int32.decode_from(head, FRAME_SIZE_PREFIX_BYTES)
        if size < 4:
            raise ValueError(f"an answer of {size} bytes cannot hold a correlation id")
        self._expected, self._streamed = self._link.pair(correlation_id, FRAME_SIZE_PREFIX_BYTES + size)
        self._remaining = size - 4
        if self._streamed:
            self._answers.stream(head)
        else:
            self._parts = [head]
        return pos

    def _answer_ends(self) -> None:
        """An answer is whole: out with it (each at once, so that the next
        answer whose slot then comes first streams)."""
        expected, parts = self._expected, self._parts
        self._expected, self._parts = None, None
        if self._streamed:
            self._answers.stream_ended()
        elif expected.read_first:
            self._events.answer_arrived(expected, b"".join(parts))
        else:  # its slot was not next: it waits there for its turn
            expected.slot.data = b"".join(parts)
        self._answers.flush()
        self._events.answers_moved()
