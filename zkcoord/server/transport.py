"""asyncio TCP transport that speaks Kafka's size-prefixed framing.

This module owns the listening socket and every accepted connection: reading
frames, handing decoded requests to the handler, writing responses, and
closing connections. What the bytes mean is `codec.py`'s business; what a
request does is the handler's.

Rules:

1. One request at a time per connection. Like a Kafka broker muting a channel
   while a request is in flight, the next frame is not decoded until the
   current response is written, so a JoinGroup whose answer is deferred delays
   later requests on that connection (and only on that connection). Bytes of
   pipelined requests are buffered meanwhile, up to `READ_BUFFER_BYTES`; then
   the connection stops reading until the handler is done.
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
5. Responses are written as they come; while the peer does not read them
   (the socket's write buffer is above asyncio's high-water mark) no further
   request of that connection is served. A peer that goes away does not
   cancel its running handler (a parked JoinGroup still counts, as on a
   broker); the answer is dropped.

Each connection is an `asyncio.Protocol` rather than a stream reader/writer
pair: the request path is the daemon's hottest loop, and the streams cost
several Python-level calls and a future per frame. The handler runs in a task
of its own per request, so it may await (locks, ZooKeeper writes).
"""

from __future__ import annotations

import asyncio
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
READ_BUFFER_BYTES = 64 * 1024  # pipelined bytes buffered while a request is served


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
        self._connections: dict[int, _Connection] = {}
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
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), self._host, self._port)
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
        tasks = []
        for connection in list(self._connections.values()):
            task = connection.close()
            if task is not None:
                task.cancel()
                tasks.append(task)
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()
            log.info("stopped serving the Kafka protocol on %s:%d", self._host, port)

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


class _Connection(asyncio.Protocol):
    """One accepted connection: buffered bytes in, one request at a time, responses out."""

    def __init__(self, server: KafkaProtocolServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self.info: ConnectionInfo | None = None
        self._buffer = bytearray()
        self._handling: asyncio.Task[None] | None = None  # the request with the handler
        self._write_paused = False
        self._read_paused = False
        self._eof = False
        self._closed = False

    # -- asyncio.Protocol ----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername") or ("?", 0)
        server = self._server
        self.info = ConnectionInfo(next(server._connection_ids), str(peer[0]), int(peer[1]))
        if server._stopping:
            self._closed = True
            transport.close()
            return
        server._connections[self.info.connection_id] = self
        log.debug("%s opened", self.info)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._handling is None and not self._write_paused:
            self._serve_buffered()
        else:
            self._update_reading()

    def eof_received(self) -> bool:
        self._eof = True
        if self._handling is None and not self._write_paused:
            self._serve_buffered()
        return True  # half-open: requests already received are still answered

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._server._connections.pop(self.info.connection_id, None)
        if exc is not None:
            log.info("%s lost: %r", self.info, exc)
        log.debug("%s closed", self.info)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._handling is None:
            self._serve_buffered()

    # -- serving -------------------------------------------------------------------
    def close(self) -> asyncio.Task[None] | None:
        """Close the socket; returns the handler task still running, if any."""
        if not self._closed:
            self._closed = True
            self._transport.close()
        return self._handling

    def _serve_buffered(self) -> None:
        """Serve buffered requests until one goes to the handler, the peer
        stops reading our responses, or no whole frame is left."""
        while self._handling is None and not self._write_paused and not self._closed:
            try:
                frame = self._next_frame()
                if frame is None:
                    break
                decoded = decode_request(frame, self._server._apis)
            except (FrameSizeError, MalformedFrameError, UnsupportedRequestError) as exc:
                log.warning("closing %s: %s", self.info, exc)
                self.close()
                return
            response = decoded.immediate_response
            if response is None:
                self._handling = asyncio.get_running_loop().create_task(self._handle(decoded))
                break
            log.debug("%s: answered %s v%d (correlation id %d) from the codec", self.info,
                      decoded.api_name, decoded.api_version, decoded.correlation_id)
            self._send(decoded, response)
        if self._eof and self._handling is None and not self._closed and not self._write_paused:
            if self._buffer:
                log.info("%s closed by the peer in the middle of a frame (%d bytes read)",
                         self.info, len(self._buffer))
            self.close()
            return
        self._update_reading()

    def _next_frame(self) -> bytes | None:
        buffer = self._buffer
        if len(buffer) < FRAME_SIZE_PREFIX_BYTES:
            return None
        end = FRAME_SIZE_PREFIX_BYTES + frame_size(bytes(buffer[:FRAME_SIZE_PREFIX_BYTES]),
                                                   self._server._max_frame_bytes)
        if len(buffer) < end:
            return None
        frame = bytes(buffer[FRAME_SIZE_PREFIX_BYTES:end])
        del buffer[:end]
        return frame

    def _update_reading(self) -> None:
        """Stop reading while requests are held back and enough bytes wait; else read."""
        held = self._handling is not None or self._write_paused
        pause = held and len(self._buffer) >= READ_BUFFER_BYTES and not self._closed
        if pause != self._read_paused and not self._closed:
            self._read_paused = pause
            if pause:
                self._transport.pause_reading()
            else:
                self._transport.resume_reading()

    async def _handle(self, decoded: DecodedRequest) -> None:
        try:
            response = await self._server._call_handler(decoded, self.info)
        finally:
            self._handling = None
        try:
            if response is None:
                self.close()
            elif self._send(decoded, response) and not self._write_paused:
                self._serve_buffered()
        except Exception:  # a bug here must not pass silently
            log.exception("closing %s: failed after %s v%d (correlation id %d)", self.info,
                          decoded.api_name, decoded.api_version, decoded.correlation_id)
            self.close()

    def _send(self, decoded: DecodedRequest, response: ApiMessage) -> bool:
        """Write the response; False when the connection is (now) closed."""
        try:
            data = encode_response(decoded, response)
        except ResponseEncodingError:
            log.exception("closing %s: the handler's response cannot be sent", self.info)
            self.close()
            return False
        if self._closed:
            return False
        self._transport.write(data)
        return True
