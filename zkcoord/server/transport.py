"""asyncio TCP transport that speaks Kafka's size-prefixed framing.

This module owns the daemon's listening socket and every accepted
connection: reading frames, handing decoded requests to the handler, writing
responses, and closing connections. What the bytes mean is the wire
codec's business (:mod:`zkcoord.wire`: :mod:`~zkcoord.wire.requests`,
:mod:`~zkcoord.wire.responses`); what a request does is the handler's.

Rules:

1. One request at a time per connection. Like a Kafka broker muting a channel
   while a request is in flight, the next frame is not handled until the
   current response is written, so a JoinGroup whose answer is deferred
   delays later requests on that connection (and only on that connection).
   The socket stops being read as soon as bytes arrive while a request is
   in flight (not before: pausing and resuming costs two system calls per
   request, and most clients wait for their answer).
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
5. When a connection closes for any reason but `stop()` (the peer's EOF or
   reset, or a bad frame), the handler's `connection_closed(connection)`, if
   it has one, is called once, synchronously; it must not block.
6. The per-request path is the daemon's hottest code. Each connection is an
   `asyncio.Protocol`: the frames of one read are handled in that callback
   (at most sixteen: rule 10), and a handler with a synchronous
   `handle_now(decoded, connection)` answers
   without a task when it can (it returns None to take the awaited path).
   A handler with ``handle_soon(decoded, connection, reply)`` may then take
   the request and answer it later by calling ``reply(response)`` (an
   OffsetCommit waiting for its ZooKeeper write): the answer is written in
   that call, still without a task, and the connection reads nothing
   meanwhile (rule 1). The answers to one read go out in one write.
7. Limits (:mod:`zkcoord.core.limits`): a frame above its API's limit
   (``request_max_bytes(api_key)``) closes the connection as soon as its
   size and api key are read, before the rest is buffered. A frame above
   ``INLINE_DECODE_BYTES`` is decoded in a worker thread while the
   connection waits, so the loop keeps answering others, and the cyclic
   collector stays paused until it is answered
   (:func:`zkcoord.wire.bulk_work.collector_paused`). A connection with
   no request in flight that read and wrote nothing for
   ``connections_max_idle_ms``, or whose unfinished frame started that
   long ago, is closed (:class:`zkcoord.wire.connections.IdleSweep`). The
   bytes of unanswered frames of all connections together stay under
   ``partial_requests_max_bytes``: the connection whose read would go over
   is closed.
8. The listen backlog and sockets (:mod:`zkcoord.wire.listening`): the
   kernel's maximum backlog (``backlog``, default ``net.core.somaxconn``)
   on each of ``listen_sockets`` sockets bound to the port with
   ``SO_REUSEPORT`` (Linux), so a reconnect storm of more clients than one
   queue holds waits for the loop to accept it instead of being dropped; a
   port another process holds is refused, never shared. The workers'
   shared port gets as many sockets per worker.
9. Security (:mod:`zkcoord.wire.listener_security`): with an SSL context
   the listener speaks TLS (the handshake is done before a connection is
   seen). On a SASL listener a connection's login answers its
   SaslHandshake and SaslAuthenticate requests; until the login is done
   (its :class:`~zkcoord.wire.listener_security.LoginGate`) only
   ApiVersions and those are read (anything else closes the connection, as
   Kafka does), and frames are at most ``SASL_MAX_RECEIVE_BYTES``. The
   principal the handler sees on
   :class:`~zkcoord.wire.connections.ConnectionInfo` is set when the login
   completes.
10. Turns. A client may send many requests in one write (a Heartbeat is 60
   bytes: 16,000 of them in one MiB), and each one answered at once costs
   10-50 us. One connection handles at most :data:`FRAMES_PER_TURN` frames
   in a callback; then it stops reading, and handles the rest in a callback
   of its own (``loop.call_soon``), after the other connections that are
   ready. Without turns, one client pipelining Heartbeats made another
   group's wait 150 ms (``bench/bench_hostile.py --kinds pipelined``); a
   Kafka broker reads one request per connection at a time.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from collections.abc import Awaitable, Callable

from kafka.protocol.api_message import ApiMessage

from zkcoord.core.api_keys import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from zkcoord.core.limits import (
    DEFAULT_CONNECTIONS_MAX_IDLE_MS, DEFAULT_PARTIAL_REQUESTS_MAX_BYTES, FRAMES_PER_TURN, INLINE_DECODE_BYTES,
)
from zkcoord.wire.bulk_work import collector_paused, off_loop
from zkcoord.wire.connections import ConnectionInfo, IdleSweep
from zkcoord.wire.connections import now_ms as _now_ms
from zkcoord.wire.errors import (
    FrameSizeError, MalformedFrameError, RequestTooLargeError, ResponseEncodingError, UnsupportedRequestError,
)
from zkcoord.wire.framing import API_KEY_END, FRAME_SIZE_PREFIX_BYTES, api_key_at, frame_size
from zkcoord.wire.listening import DEFAULT_LISTEN_SOCKETS, default_backlog, reuse_port_spreads, socket_plan
from zkcoord.wire.listener_security import (
    PLAINTEXT_LISTENER, SASL_MAX_RECEIVE_BYTES, TLS_HANDSHAKE_TIMEOUT_S, ListenerSecurity, LoginGate, login_gate,
)
from zkcoord.wire.registry import COORDINATOR_APIS, ApiRegistry
from zkcoord.wire.requests import DecodedRequest, decode_request
from zkcoord.wire.responses import EncodedResponse, encode_response

log = logging.getLogger(__name__)

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024


_ANSWERED, _AWAITED, _FAILED = object(), object(), object()  # what became of one frame (_handle_frame)


Handler = Callable[[DecodedRequest, ConnectionInfo], Awaitable[ApiMessage]]


class KafkaProtocolServer:
    """Serves Kafka-protocol requests on one TCP listener.

    `handler(decoded_request, connection_info)` is awaited for every request
    the codec decodes and returns the response message (see
    :func:`zkcoord.wire.responses.response_for`). If the handler also has `handle_now(decoded,
    connection_info)`, that is tried first: a response answers at once, None
    means "await the handler". Construction does no I/O; call `start()`.

    `request_max_bytes(api_key)` (default: `max_frame_bytes` for every API)
    and `request_limit_setting(api_key)` (the setting's name, for the log)
    give each API's frame limit (rule 7).
    """

    def __init__(self, handler: Handler, host: str, port: int,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, *,
                 apis: ApiRegistry = COORDINATOR_APIS,
                 request_max_bytes: Callable[[int], int] | None = None,
                 request_limit_setting: Callable[[int], str] | None = None,
                 connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS,
                 partial_requests_max_bytes: int = DEFAULT_PARTIAL_REQUESTS_MAX_BYTES,
                 security: ListenerSecurity = PLAINTEXT_LISTENER, shared_port: int | None = None,
                 backlog: int = 0, listen_sockets: int = DEFAULT_LISTEN_SOCKETS) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} is not in 0..65535 (0 picks a free port)")
        if max_frame_bytes <= 0:
            raise ValueError(f"max_frame_bytes must be positive, got {max_frame_bytes}")
        self._handler = handler
        self._host = host
        self._port = port
        if connections_max_idle_ms <= 0 or partial_requests_max_bytes <= 0:
            raise ValueError("connections_max_idle_ms and partial_requests_max_bytes must be positive")
        self._max_frame_bytes = max_frame_bytes
        self.backlog = backlog or default_backlog()  # 0: the kernel's maximum (rule 8)
        if listen_sockets < 1:
            raise ValueError(f"listen_sockets must be at least 1, got {listen_sockets}")
        self.listen_sockets = listen_sockets if reuse_port_spreads() else 1  # rule 8
        self.security = security
        self._apis = security.apis if security.sasl and apis is COORDINATOR_APIS else apis
        self._request_max_bytes = request_max_bytes or (lambda api_key: max_frame_bytes)
        self._request_limit_setting = request_limit_setting or (lambda api_key: "max_frame_bytes")
        # Frames up to this size need no api key to be accepted (every API may be that large).
        self._any_api_bytes = min([max_frame_bytes] + [self._request_max_bytes(spec.api_key) for spec in apis])
        self.connections_max_idle_ms = connections_max_idle_ms
        self.partial_requests_max_bytes = partial_requests_max_bytes
        self.partial_bytes = 0  # bytes buffered by all connections, not yet handled
        self._sweeper = IdleSweep(lambda: self._connections.values(), lambda connection: connection.shut(),
                                  connections_max_idle_ms, log)
        self._server: asyncio.Server | None = None
        self._more: list[asyncio.Server] = []  # the listener's other sockets on its port, and the shared port's (rule 8)
        # A worker of several (zkcoord.core.workers) also serves the port all workers share (SO_REUSEPORT).
        self._shared_port = shared_port
        self._stopping = False
        self._connections: dict[int, _Connection] = {}
        self._connection_ids = itertools.count(1)

    @property
    def bound_port(self) -> int:
        """The port the listener is bound to (useful with port 0)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the server is not listening; await start() first")
        return self._server.sockets[0].getsockname()[1]

    @property
    def listening_sockets(self) -> list[socket.socket]:
        """Every socket listening for this server: its port's (rule 8), then the workers' shared port's."""
        servers = [self._server, *self._more] if self._server is not None else []
        return [sock for server in servers for sock in server.sockets]

    async def start(self) -> None:
        if self._server is not None or self._stopping:
            raise RuntimeError("KafkaProtocolServer.start() may be called once")
        own = await self._bind(self._port, shared=False)
        self._server, self._more = own[0], own[1:]
        if self._shared_port is not None:
            try:
                self._more += await self._bind(self._shared_port, shared=True)
            except OSError:
                for server in own:
                    server.close()
                raise
            log.info("serving the Kafka protocol (%s) on the workers' shared port %s:%d too", self.security.protocol,
                     self._host, self._shared_port)
        self._sweeper.start("kafka-idle-sweep")
        log.info("serving the Kafka protocol (%s) on %s:%d (listen backlog %d, %d socket%s)", self.security.protocol,
                 self._host, self.bound_port, self.backlog, len(own), "" if len(own) == 1 else "s")

    async def _bind(self, port: int, *, shared: bool) -> list[asyncio.Server]:
        """The listening sockets of one port (rule 8): ``listen_sockets`` of
        them with SO_REUSEPORT (one without, where the system does not spread
        connections over them and the port is not the workers' shared one)."""
        loop = asyncio.get_running_loop()
        tls = {} if self.security.ssl_context is None else {
            "ssl": self.security.ssl_context, "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT_S}
        count, reuse = socket_plan(self._host, port, self.listen_sockets, shared)
        servers = [await loop.create_server(lambda: _Connection(self), self._host, port, reuse_port=reuse,
                                            backlog=self.backlog, **tls)]
        ports = {sock.getsockname()[1] for sock in servers[0].sockets}
        if count > 1 and len(ports) == 1:  # (port 0 on a host of several addresses: one port each, one socket)
            try:
                for _ in range(count - 1):
                    servers.append(await loop.create_server(lambda: _Connection(self), self._host, next(iter(ports)),
                                                            reuse_port=True, backlog=self.backlog, **tls))
            except OSError:
                for server in servers:
                    server.close()
                raise
        return servers

    async def stop(self) -> None:
        """Close the listener and every connection. Safe to call twice."""
        if self._stopping:
            return
        self._stopping = True
        self._sweeper.stop()
        server = self._server
        if server is not None:
            port = self.bound_port
            server.close()
        for more in self._more:
            more.close()
        connections = list(self._connections.values())
        for connection in connections:
            connection.shut()
        await asyncio.gather(*(c.closed for c in connections), return_exceptions=True)
        for more in self._more:
            await more.wait_closed()
        if server is not None:
            await server.wait_closed()
            log.info("stopped serving the Kafka protocol on %s:%d", self._host, port)

    def _frame_limit(self, buffer: bytearray, pos: int, logging_in: bool = False) -> int | None:
        """The size of the frame at ``pos``, checked against its API's limit
        (``SASL_MAX_RECEIVE_BYTES`` before a SASL login is done); None when
        more bytes are needed to know. Raises FrameSizeError."""
        if logging_in:
            return frame_size(buffer[pos:pos + FRAME_SIZE_PREFIX_BYTES], SASL_MAX_RECEIVE_BYTES)
        size = frame_size(buffer[pos:pos + FRAME_SIZE_PREFIX_BYTES], self._max_frame_bytes)
        if size <= self._any_api_bytes:
            return size
        if len(buffer) - pos < API_KEY_END:
            return None
        api_key = api_key_at(buffer, pos)
        limit = self._request_max_bytes(api_key)
        if size > limit:
            raise RequestTooLargeError(size, limit, api_key, self._request_limit_setting(api_key))
        return size

    def _handle_soon(self, decoded: DecodedRequest, info: ConnectionInfo, reply) -> bool:
        """Did the handler take the request, to answer it by ``reply(response)``?
        False: await the handler. Raises what the handler raises."""
        handle_soon = getattr(self._handler, "handle_soon", None)
        return handle_soon is not None and handle_soon(decoded, info, reply)

    def _connection_closed(self, info: ConnectionInfo) -> None:
        """Tell the handler (rule 5); its failure is logged, never raised into the loop."""
        closed = getattr(self._handler, "connection_closed", None)
        if closed is None:
            return
        try:
            closed(info)
        except Exception:
            log.exception("the handler failed on the close of %s", info)

    async def _call_handler(self, decoded: DecodedRequest,
                            info: ConnectionInfo) -> ApiMessage | None:
        """The handler's response, or None (logged) when the handler failed."""
        try:
            response = await self._handler(decoded, info)
        except Exception:
            _log_handler_failure(decoded, info)
            return None
        if response is None:
            log.error("closing %s: handler returned no response to %s v%d (correlation id %d)",
                      info, decoded.api_name, decoded.api_version, decoded.correlation_id)
        return response


def _error_code(response) -> int:
    """A response's top-level error code (an encoded response found it when it was encoded)."""
    if type(response) is EncodedResponse:
        return response.error_code
    return getattr(response, "error_code", 0) or 0


def _log_handler_failure(decoded: DecodedRequest, info: ConnectionInfo, error: BaseException | None = None) -> None:
    log.error("closing %s: handler failed on %s v%d (correlation id %d)", info, decoded.api_name,
              decoded.api_version, decoded.correlation_id, exc_info=error or True)


class _Pending:
    """A request ``handle_soon`` took: calling it with the response (or the
    handler's exception) answers it. An answer given before ``handle_soon``
    returned is kept in ``early``; one given after :meth:`cancel` (the
    connection closed) is dropped. It stands in the connection's ``_task``
    while the answer is awaited."""

    __slots__ = ("connection", "decoded", "early", "cancelled")

    def __init__(self, connection: _Connection, decoded: DecodedRequest) -> None:
        self.connection, self.decoded = connection, decoded
        self.early = None
        self.cancelled = False

    def __call__(self, response: object) -> None:
        if self.cancelled:
            return
        connection = self.connection
        if connection._task is not self:
            self.early = response
            return
        connection._answered(self, response)

    def cancel(self) -> None:
        self.cancelled = True


class _Connection(asyncio.Protocol):
    """One accepted connection: its read buffer, the request in flight, its writes."""

    def __init__(self, server: KafkaProtocolServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self.info = ConnectionInfo(0, "?", 0)
        self._buffer = bytearray()
        self._task: asyncio.Task[None] | None = None  # the awaited request in flight
        self._write_paused = False
        self._reading_paused = False
        self._eof = False
        self._done = False
        self._held = 0  # bytes of ours counted in the server's partial_bytes
        self.last_active_ms = _now_ms()  # last read or write
        self.partial_since_ms: int | None = None  # when the unfinished frame in the buffer started
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._gate = None  # the SASL login's gate (rule 8), on SASL listeners
        self._turn: asyncio.Handle | None = None  # the next turn of a connection that sent ahead (rule 10)

    # -- asyncio.Protocol ------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        server = self._server
        peer = transport.get_extra_info("peername") or ("?", 0)
        security = server.security
        self.info = ConnectionInfo(next(server._connection_ids), str(peer[0]), int(peer[1]),
                                   security.principal_of(transport))
        if server._stopping:
            self._close()
            return
        self._gate = login_gate(security, self.info)
        server._connections[self.info.connection_id] = self
        log.debug("%s opened", self.info)

    @property
    def busy(self) -> bool:
        """A request of this connection is in flight."""
        return self._task is not None

    def data_received(self, data: bytes) -> None:
        server = self._server
        now = self.last_active_ms = _now_ms()
        if server.partial_bytes + len(data) > server.partial_requests_max_bytes:
            log.warning("closing %s: its %d more bytes would make the unanswered requests of all connections "
                        "hold more than partial_requests_max_bytes=%d", self.info, len(data),
                        server.partial_requests_max_bytes)
            self._close()
            return
        if not self._buffer:
            self.partial_since_ms = now
        self._buffer += data
        if self._task is None and not self._write_paused:
            self._process()  # accounts for what it leaves
            return
        if self._task is not None:  # a client sending ahead of its answer: the rest waits in the kernel
            self._pause_reading()
        self._account()

    def _account(self) -> None:
        """Keep the server's partial_bytes up to date with our buffer."""
        held = 0 if self._done else len(self._buffer)
        self._server.partial_bytes += held - self._held
        self._held = held

    def eof_received(self) -> bool:
        self._eof = True
        if self._task is None and self._turn is None:
            self._end_of_input()
        # we close once the request in flight is answered (TLS has no half-close: asyncio closes then)
        return self._server.security.ssl_context is None

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._task is None and not self._done:
            self._resume_reading()
            self._process()

    def connection_lost(self, exc: Exception | None) -> None:
        self._done = True
        server = self._server
        self._account()
        registered = server._connections.pop(self.info.connection_id, None) is not None
        if self._task is not None:
            self._task.cancel()
        if exc is not None:
            log.info("%s lost: %r", self.info, exc)
        log.debug("%s closed", self.info)
        if registered and not server._stopping:
            server._connection_closed(self.info)
        if not self.closed.done():
            self.closed.set_result(None)

    # -- requests --------------------------------------------------------------
    def shut(self) -> None:
        """Cancel the request in flight and close (server stop)."""
        if self._task is not None:
            self._task.cancel()
        self._close()

    def _process(self) -> None:
        """Handle every complete frame in the buffer, until one must be awaited."""
        buffer = self._buffer
        server = self._server
        info = self.info
        out: list[bytes] = []
        pos = 0
        handled = 0
        try:
            while not self._done:
                if len(buffer) - pos < FRAME_SIZE_PREFIX_BYTES:
                    break
                if handled == FRAMES_PER_TURN:  # rule 10: the rest in a turn of its own
                    self._next_turn_soon()
                    break
                gate = self._gate
                if gate is not None and not gate.closed:
                    gate = None
                size = int.from_bytes(buffer[pos:pos + FRAME_SIZE_PREFIX_BYTES], "big", signed=True)
                if gate is not None or not 0 <= size <= server._any_api_bytes:  # else any API may be this big
                    size = server._frame_limit(buffer, pos, gate is not None)
                    if size is None:
                        break
                end = pos + FRAME_SIZE_PREFIX_BYTES + size
                if len(buffer) < end:
                    break
                frame = bytes(buffer[pos + FRAME_SIZE_PREFIX_BYTES:end])
                pos = end
                handled += 1
                step = self._handle_frame(frame, gate, out)
                if step is _FAILED:
                    return
                if step is _AWAITED:
                    break
        except (FrameSizeError, MalformedFrameError, UnsupportedRequestError) as exc:
            log.warning("closing %s: %s", info, exc)
            self._fail(out)
            return
        except ResponseEncodingError:
            log.exception("closing %s: the handler's response cannot be sent", info)
            self._fail(out)
            return
        finally:
            if pos:
                del buffer[:pos]
                self.partial_since_ms = _now_ms() if buffer else None
            self._account()
        self._write(out)
        if self._eof and self._task is None and self._turn is None:
            self._end_of_input()

    def _next_turn_soon(self) -> None:
        """Rule 10: stop reading, and handle what is buffered after the others' callbacks."""
        self._pause_reading()
        if self._turn is None:
            self._turn = asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._turn = None
        if self._done or self._task is not None or self._write_paused:
            return  # the answer in flight, or resume_writing, reads on
        self._process()
        if self._turn is None and self._task is None and not self._done and not self._write_paused:
            self._resume_reading()  # drained: read on (else what took over resumes it)

    def _handle_frame(self, frame: bytes, gate: LoginGate | None, out: list[bytes]) -> object:
        """Answer one frame's request into ``out`` when it can be answered now
        (_ANSWERED); else start awaiting it (_AWAITED), or close (_FAILED).
        ``gate``: the login's, while it is not done. Raises the wire's errors."""
        info = self.info
        if gate is not None:
            api_key = int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1
            if gate.refuses(api_key):
                log.warning("closing %s: api key %d before its SASL login was done", info, api_key)
                self._fail(out)
                return _FAILED
        if len(frame) > INLINE_DECODE_BYTES:
            self._await(None, frame)
            return _AWAITED
        decoded = decode_request(frame, self._server._apis)
        response = decoded.immediate_response
        if decoded.api_key == SASL_HANDSHAKE or decoded.api_key == SASL_AUTHENTICATE:
            self._await(decoded)
            return _AWAITED
        if response is not None:
            log.debug("%s: answered %s v%d (correlation id %d) from the codec",
                      info, decoded.api_name, decoded.api_version, decoded.correlation_id)
        else:
            handle_now = getattr(self._server._handler, "handle_now", None)
            try:
                response = None if handle_now is None else handle_now(decoded, info)
            except Exception:
                _log_handler_failure(decoded, info)
                self._fail(out)
                return _FAILED
            if response is None:
                pending = _Pending(self, decoded)
                try:
                    taken = self._server._handle_soon(decoded, info, pending)
                except Exception:
                    _log_handler_failure(decoded, info)
                    self._fail(out)
                    return _FAILED
                if not taken:
                    self._await(decoded)
                    return _AWAITED
                response = pending.early
                if response is None:  # answered later: by pending(), from the handler's continuation
                    self._task = pending
                    return _AWAITED
                if isinstance(response, BaseException):
                    _log_handler_failure(decoded, info, response)
                    self._fail(out)
                    return _FAILED
        if gate is not None and decoded.api_key == API_VERSIONS:
            gate.versions_answered(_error_code(response))
        out.append(encode_response(decoded, response))
        return _ANSWERED

    def _await(self, decoded: DecodedRequest | None, frame: bytes | None = None) -> None:
        """Answer ``decoded`` in a task; with ``frame`` instead, decode it in
        a worker thread first (rule 7)."""
        step = self._answer(decoded, None) if frame is None else self._answer_big(frame)
        self._task = asyncio.get_running_loop().create_task(step, name=f"kafka-{self.info.connection_id}")

    def _answered(self, pending: _Pending, response: object) -> None:
        """A request taken by ``handle_soon`` is answered (an exception: the handler failed)."""
        if self._task is pending:
            self._task = None
        if self._done:
            return
        if isinstance(response, BaseException):
            _log_handler_failure(pending.decoded, self.info, response)
            self._close()
            return
        self._send(pending.decoded, response)

    async def _answer_big(self, frame: bytes) -> None:
        """A frame too big to decode inline: it holds the collector's pause until it
        is answered and its objects are freed (rule 7): _answer's locals are gone
        when the pause ends."""
        with collector_paused():
            await self._answer(None, frame)

    async def _answer(self, decoded: DecodedRequest | None, frame: bytes | None) -> None:
        response = None
        if decoded is None:
            try:
                decoded = await off_loop(decode_request, frame, self._server._apis)
            except (MalformedFrameError, UnsupportedRequestError) as exc:
                self._task = None
                log.warning("closing %s: %s", self.info, exc)
                self._close()
                return
            response = decoded.immediate_response
        close_after = False
        if decoded.api_key == SASL_HANDSHAKE or decoded.api_key == SASL_AUTHENTICATE:
            response, close_after = await self._log_in(decoded)
        elif response is None:
            response = await self._server._call_handler(decoded, self.info)
        self._task = None
        if self._done:
            return
        if response is None:
            self._close()
            return
        self._send(decoded, response, close_after)

    def _send(self, decoded: DecodedRequest, response: ApiMessage, close_after: bool = False) -> None:
        """Write the answer to the request that was in flight, then read on."""
        if self._gate is not None and decoded.api_key == API_VERSIONS:
            self._gate.versions_answered(_error_code(response))
        try:
            data = encode_response(decoded, response)
        except ResponseEncodingError:
            log.exception("closing %s: the handler's response cannot be sent", self.info)
            self._close()
            return
        self._transport.write(data)
        self.last_active_ms = _now_ms()
        if close_after:
            self._close()
            return
        if not self._write_paused:
            self._resume_reading()
            self._process()

    async def _log_in(self, decoded: DecodedRequest) -> tuple[ApiMessage, bool]:
        """A login request's answer (rule 8); once the login is done the
        connection's principal is its user."""
        gate = self._gate
        if gate is None:  # not decodable on a listener without SASL: the codec refused it already
            raise RuntimeError("a SASL request reached a listener without SASL")
        response, close_after = await gate.login.answer(decoded)
        info = gate.logged_in(self.info)
        if info is not None:
            self.info = info
            log.info("%s logged in", self.info)
        return response, close_after

    def _end_of_input(self) -> None:
        if self._buffer and not self._done:
            log.info("%s closed by the peer in the middle of a frame (%d bytes read)",
                     self.info, len(self._buffer))
        self._close()

    # -- the socket --------------------------------------------------------------
    def _write(self, out: list[bytes]) -> None:
        if not out or self._done:
            return
        self._transport.write(out[0] if len(out) == 1 else b"".join(out))
        self.last_active_ms = _now_ms()

    def _fail(self, out: list[bytes]) -> None:
        """Send the answers already made, then close."""
        self._write(out)
        self._close()

    def _close(self) -> None:
        self._done = True
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.close()

    def _pause_reading(self) -> None:
        if not self._reading_paused and not self._done and not self._transport.is_closing():
            self._reading_paused = True
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and not self._done and not self._transport.is_closing():
            self._reading_paused = False
            self._transport.resume_reading()
