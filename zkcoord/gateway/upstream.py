"""The broker side of one gateway client connection.

Owns :class:`Upstream`, the ``asyncio.Protocol`` of the connection the
gateway opens to a broker for one client connection (one per client
connection, :mod:`.connection` rule 5), and :func:`open_upstream`, which
opens it to the first candidate that accepts, over TLS when the brokers
speak it (the daemon's ``kafka_client_config``; the broker's certificate is
checked against its host name as Kafka's clients check it).

:class:`Upstream` writes the client's frames and cuts the broker's answers:
each answer's size and correlation id are read to pair it with its request
(:meth:`~.connection.ClientConnection.begin_answer`), then its bytes are
streamed to the client or buffered for a rewrite, as the client connection
decided.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING

from kafka.protocol.schemas.fields.codecs import Int32

from zkcoord.server.codec import FRAME_SIZE_PREFIX_BYTES, WireProtocolError

if TYPE_CHECKING:
    from zkcoord.gateway.connection import ClientConnection, _Pending

__all__ = ["Upstream", "open_upstream", "CONNECT_TIMEOUT_S"]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
_HEAD_BYTES = FRAME_SIZE_PREFIX_BYTES + 4  # an answer's size and correlation id


async def open_upstream(client: ClientConnection, candidates: list[tuple[str, int]],
                        ssl_context: ssl.SSLContext | None) -> tuple[Upstream | None, list[str]]:
    """The first candidate broker that accepts a connection for ``client``
    (None, and why each failed, when none does)."""
    loop = asyncio.get_running_loop()
    errors = []
    for host, port in candidates:
        tls = {} if ssl_context is None else {"ssl": ssl_context, "server_hostname": host}
        try:
            _, upstream = await asyncio.wait_for(
                loop.create_connection(lambda: Upstream(client), host, port, **tls), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError: a certificate refused
            errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
            continue
        return upstream, errors
    return None, errors


class Upstream(asyncio.Protocol):
    """The broker side of one client connection: writes the client's frames,
    cuts the broker's answers and hands them to the client connection."""

    def __init__(self, client: ClientConnection) -> None:
        self._client = client
        self._transport: asyncio.Transport | None = None
        self._head = bytearray()
        self._pending: _Pending | None = None
        self._remaining = 0
        self._parts: list | None = None
        self._closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def write(self, frame: bytes) -> None:
        if not self._closed:
            self._transport.write(frame)

    def writelines(self, frames: list[bytes]) -> None:
        if not self._closed:
            if len(frames) == 1:
                self._transport.write(frames[0])
            else:
                self._transport.writelines(frames)

    def pause_writing(self) -> None:
        self._client.upstream_full(True)

    def resume_writing(self) -> None:
        self._client.upstream_full(False)

    def pause_reading(self) -> None:
        if not self._closed:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if not self._closed:
            self._transport.resume_reading()

    def close(self) -> None:
        self._closed = True
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._client.upstream_lost(exc)

    def data_received(self, data: bytes) -> None:
        try:
            self._cut(data)
        except (WireProtocolError, ValueError) as exc:
            log.warning("closing gateway %s: bad answer from its broker: %s", self._client.info, exc)
            self.close()
            self._client.close()
            return
        self._client.flush()

    def _cut(self, data: bytes) -> None:
        client = self._client
        view = memoryview(data)
        pos, end = 0, len(data)
        while pos < end:
            pending = self._pending
            if pending is None:
                take = view[pos:pos + _HEAD_BYTES - len(self._head)]
                self._head += take
                pos += len(take)
                if len(self._head) < _HEAD_BYTES:
                    return
                head = bytes(self._head)
                self._head.clear()
                size, _ = Int32.decode_from(head, 0)
                correlation_id, _ = Int32.decode_from(head, FRAME_SIZE_PREFIX_BYTES)
                if size < 4:
                    raise ValueError(f"an answer of {size} bytes cannot hold a correlation id")
                pending = self._pending = client.begin_answer(correlation_id, FRAME_SIZE_PREFIX_BYTES + size)
                self._remaining = size - 4
                if pending.streamed:
                    client.write_through(head)
                else:
                    self._parts = [head]
            take = min(end - pos, self._remaining)
            if take:
                chunk = view[pos:pos + take]
                pos += take
                self._remaining -= take
                if pending.streamed:
                    client.write_through(chunk)
                else:
                    self._parts.append(chunk)
            if self._remaining == 0:
                parts, self._pending, self._parts = self._parts, None, None
                client.end_answer(pending, parts)
