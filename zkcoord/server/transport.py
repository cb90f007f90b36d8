"""asyncio TCP transport that speaks Kafka's size-prefixed framing.

This module owns the listening socket and every accepted connection: reading
frames, handing decoded requests to the handler, writing responses, and
closing connections. What the bytes mean is `codec.py`'s business; what a
request does is the handler's.

Rules:

1. One request at a time per connection. Like a Kafka broker muting a channel
   while a request is in flight, the next frame is not read until the current
   response is written, so a JoinGroup whose answer is deferred delays later
   requests on that connection (and only on that connection).
2. A bad frame closes that connection only, with a warning: a size prefix
   that is negative or above `max_frame_bytes`, a header or body that does not
   decode, an api key we do not serve, or a version outside the served range.
   An ApiVersions request of a version we do not serve is not bad: the codec
   answers it (KIP-511) and the connection stays open.
3. A handler exception, or a handler response that cannot be encoded, is
   logged at error level with its traceback and closes that connection; the
   server keeps serving the others.
4. `stop()` closes the listener, then every connection (cancelling handlers
   still running for them).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kafka.protocol.api_message import ApiMessage

from .codec import (
    COORDINATOR_APIS, FRAME_SIZE_PREFIX_BYTES, ApiRegistry, DecodedRequest,
    FrameSizeError, MalformedFrameError, ResponseEncodingError, UnsupportedRequestError,
    decode_request, encode_response, frame_size,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class ConnectionInfo:
    """Who is on the other end of a connection."""

    connection_id: int
    peer_host: str
    peer_port: int

    @property
    def client_host(self) -> str:
        """The peer as Kafka reports it in JoinGroup/DescribeGroups (`/1.2.3.4`)."""
        return "/" + self.peer_host

    def __str__(self) -> str:
        return f"connection {self.connection_id} from {self.peer_host}:{self.peer_port}"


Handler = Callable[[DecodedRequest, ConnectionInfo], Awaitable[ApiMessage]]


class KafkaProtocolServer:
    """Serves Kafka-protocol requests on one TCP listener.

    `handler(decoded_request, connection_info)` is awaited for every request
    the codec decodes and returns the response message (see
    `codec.response_for`). Construction does no I/O; call `start()`.
    """

    def __init__(self, handler: Handler, host: str, port: int,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, *,
                 apis: ApiRegistry = COORDINATOR_APIS) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} is not in 0..65535 (0 picks a free port)")
        if max_frame_bytes <= 0:
            raise ValueError(f"max_frame_bytes must be positive, got {max_frame_bytes}")
        self._handler = handler
        self._host = host
        self._port = port
        self._max_frame_bytes = max_frame_bytes
        self._apis = apis
        self._server: asyncio.Server | None = None
        self._stopping = False
        self._connections: dict[int, asyncio.Task[None]] = {}
        self._connection_ids = itertools.count(1)

    @property
    def bound_port(self) -> int:
        """The port the listener is bound to (useful with port 0)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the server is not listening; await start() first")
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        if self._server is not None or self._stopping:
            raise RuntimeError("KafkaProtocolServer.start() may be called once")
        self._server = await asyncio.start_server(self._accept, self._host, self._port)
        log.info("serving the Kafka protocol on %s:%d", self._host, self.bound_port)

    async def stop(self) -> None:
        """Close the listener and every connection. Safe to call twice."""
        if self._stopping:
            return
        self._stopping = True
        server = self._server
        if server is not None:
            port = self.bound_port
            server.close()
        tasks = list(self._connections.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()
            log.info("stopped serving the Kafka protocol on %s:%d", self._host, port)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain callback that starts a task we own: asyncio's own wrapper
        # task (used for coroutine callbacks) is registered too late for
        # stop() to see it, and Python 3.11 logs an error when it is cancelled.
        if self._stopping:
            writer.close()
            return
        peer = writer.get_extra_info("peername") or ("?", 0)
        info = ConnectionInfo(next(self._connection_ids), str(peer[0]), int(peer[1]))
        task = asyncio.get_running_loop().create_task(
            self._serve_connection(reader, writer, info), name=f"kafka-{info.connection_id}")
        self._connections[info.connection_id] = task
        task.add_done_callback(functools.partial(self._connection_done, info))

    def _connection_done(self, info: ConnectionInfo, task: asyncio.Task[None]) -> None:
        self._connections.pop(info.connection_id, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", info, exc_info=task.exception())

    async def _serve_connection(self, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter, info: ConnectionInfo) -> None:
        log.debug("%s opened", info)
        try:
            await self._request_loop(reader, writer, info)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass
            log.debug("%s closed", info)

    async def _request_loop(self, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter, info: ConnectionInfo) -> None:
        try:
            while True:
                frame = await self._read_frame(reader)
                if frame is None:
                    return
                decoded = decode_request(frame, self._apis)
                response = decoded.immediate_response
                if response is not None:
                    log.debug("%s: answered %s v%d (correlation id %d) from the codec",
                              info, decoded.api_name, decoded.api_version,
                              decoded.correlation_id)
                else:
                    response = await self._call_handler(decoded, info)
                    if response is None:
                        return
                writer.write(encode_response(decoded, response))
                await writer.drain()
        except (FrameSizeError, MalformedFrameError, UnsupportedRequestError) as exc:
            log.warning("closing %s: %s", info, exc)
        except ResponseEncodingError:
            log.exception("closing %s: the handler's response cannot be sent", info)
        except asyncio.IncompleteReadError as exc:
            log.info("%s closed by the peer in the middle of a frame (%d bytes read)",
                     info, len(exc.partial))
        except (ConnectionError, OSError) as exc:
            log.info("%s lost: %r", info, exc)

    async def _read_frame(self, reader: asyncio.StreamReader) -> bytes | None:
        """The next request payload, or None when the peer closed between frames."""
        try:
            prefix = await reader.readexactly(FRAME_SIZE_PREFIX_BYTES)
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                return None
            raise
        size = frame_size(prefix, self._max_frame_bytes)
        return await reader.readexactly(size)

    async def _call_handler(self, decoded: DecodedRequest,
                            info: ConnectionInfo) -> ApiMessage | None:
        """The handler's response, or None (logged) when the handler failed."""
        try:
            response = await self._handler(decoded, info)
        except Exception:
            log.exception("closing %s: handler failed on %s v%d (correlation id %d)",
                          info, decoded.api_name, decoded.api_version, decoded.correlation_id)
            return None
        if response is None:
            log.error("closing %s: handler returned no response to %s v%d (correlation id %d)",
                      info, decoded.api_name, decoded.api_version, decoded.correlation_id)
        return response
