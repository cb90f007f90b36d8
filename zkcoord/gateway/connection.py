"""One client connection to a gateway port, and its connection to a broker.

Rules:

1. **Routing** (:mod:`zkcoord.core.gateway`): each request frame is read only
   as far as its api key, version and correlation id. Group APIs are decoded
   and answered by the daemon's API handler, ApiVersions by the gateway,
   everything else is written to this connection's upstream broker as the
   client sent it. An API the gateway does not serve, or an upstream API the
   broker does not list, closes the connection, as a broker does.
2. **Order.** Answers go back in request order, whoever made them: a slot
   per request that expects an answer, filled by the handler or by the
   broker, written once every earlier slot is. A broker answer whose slot is
   next is streamed to the client as its bytes arrive (no buffering, no
   decoding) unless it may carry broker addresses; those are buffered whole,
   decoded, rewritten (:mod:`.rewrite`) and re-encoded.
3. **One request of the handler at a time**, like a broker's muted channel:
   while a group request waits for its answer (a JoinGroup parked for a
   rebalance), the connection reads nothing more. Forwarded requests are
   pipelined up to ``MAX_IN_FLIGHT`` unanswered requests.
4. **Backpressure both ways**: the client's socket is not read while the
   broker's is full, the broker's is not read while the client's is full.
   The gateway buffers at most one request frame per client (the size
   limit) plus what asyncio's write buffers hold.
5. **Upstream**: one broker connection per client connection. On a broker's
   own gateway port it is opened at once to that broker; on the gateway's
   own port, on the first request to forward, to the first broker that
   accepts. When it fails or closes, the client connection closes: the
   client sees what it would see without the gateway.
6. A Produce with ``acks=0`` gets no answer from the broker, so it gets no
   slot.
7. **Login** (docs/security.md): on a SASL listener nothing but
   ApiVersions, SaslHandshake and SaslAuthenticate is read until the
   connection's login is done (anything else closes it, as a broker does),
   and frames are at most ``SASL_MAX_RECEIVE_BYTES`` until then. The login
   requests go to the connection's login: answered there
   (:class:`~zkcoord.server.authentication.SaslLogin`), or passed through
   to the broker and its answers shown to the login before they go out
   (:class:`~.login.PassthroughLogin`). The principal the group APIs see is
   the login's user (on SSL, the client certificate's).
8. **Limits** (:mod:`zkcoord.core.limits`): a group request the gateway
   decodes is refused (the connection closes) above its API's limit, as on
   the daemon's own port. The connection notes when it last read from or
   wrote to its client and when its unfinished frame started, for the
   gateway's idle sweep; it is busy while any answer is owed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING

from kafka.protocol.metadata import ApiVersionsResponse

from zkcoord.core.gateway import PRODUCE, Route, needs_rewrite, route_of
from zkcoord.gateway.frames import RequestFrames, produce_expects_response, request_prefix
from zkcoord.server.codec import (
    COORDINATOR_APIS, FRAME_SIZE_PREFIX_BYTES, MessageBuildError, WireProtocolError,
    build_message,
    decode_request, encode_response, encode_response_frame,
)
from zkcoord.gateway.upstream import Upstream, open_upstream
from zkcoord.server.listener_security import SASL_MAX_RECEIVE_BYTES
from zkcoord.server.transport import ConnectionInfo

if TYPE_CHECKING:
    from zkcoord.gateway.gateway import Gateway

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 256
CLIENT_SEND_BUFFER_BYTES = 4 << 20
VERSIONS_WAIT_S = 5.0  # an ApiVersions waits this long for the brokers' versions, then lists the group APIs alone
UNSUPPORTED_VERSION = 35
API_VERSIONS_SERVED = COORDINATOR_APIS[18].max_version


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class RefusedRequestError(WireProtocolError):
    """A request the gateway does not pass on; the connection closes."""


class _Slot:
    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data: bytes | None = None


class _Pending:
    """A forwarded request whose answer has not started to arrive."""

    __slots__ = ("slot", "correlation_id", "api_key", "api_version", "rewrite", "streamed", "login")

    def __init__(self, slot: _Slot, correlation_id: int, api_key: int, api_version: int, rewrite: bool,
                 login=None) -> None:
        self.slot, self.correlation_id = slot, correlation_id
        self.api_key, self.api_version, self.rewrite = api_key, api_version, rewrite
        self.streamed = False
        self.login = login  # a login request (decoded) whose answer the connection's login reads first


class ClientConnection(asyncio.Protocol):
    """A client of the gateway; ``broker_id`` None on the gateway's own port."""

    def __init__(self, gateway: Gateway, broker_id: int | None) -> None:
        self._gateway = gateway
        self.broker_id = broker_id
        self._transport: asyncio.Transport | None = None
        self.info = ConnectionInfo(0, "?", 0)
        self._frames = RequestFrames(gateway.max_frame_bytes, self._limit_of)
        self._held = 0  # bytes of ours counted in the gateway's partial_bytes
        self._order: deque[_Slot] = deque()  # answers not written yet, in request order
        self._awaiting: deque[_Pending] = deque()  # forwarded, answer not started
        self._upstream: Upstream | None = None
        self._connecting: asyncio.Task | None = None
        self._backlog: list[bytes] = []  # frames waiting for the upstream connection
        self._local: asyncio.Task | None = None  # the handler's request in flight
        self._streaming = False  # a broker answer is being written through
        self._through: list = []  # streamed bytes of broker answers, written at the next _flush
        self._outbox: list[bytes] = []  # requests for the broker, written at the end of _process
        self._upstream_full = False
        self._client_full = False  # our writes to the client are paused: so is reading the broker
        self._reading = True
        self.last_active_ms = _now_ms()  # last read from or write to the client
        self.partial_since_ms: int | None = None  # when the unfinished request frame started
        self.closed = False
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._login = None  # the connection's SASL login (rule 7), on SASL listeners

    # -- asyncio.Protocol ----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        _deep_send_buffer(transport)
        peer = transport.get_extra_info("peername") or ("?", 0)
        security = self._gateway.security
        self.info = ConnectionInfo(self._gateway.next_connection_id(), str(peer[0]), int(peer[1]),
                                   security.principal_of(transport))
        if not self._gateway.register(self):
            self.close()
            return
        if security.new_login is not None:
            self._login = security.new_login(self.info)
        if self.broker_id is not None:
            self._connect_upstream()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        now = self.last_active_ms = _now_ms()
        gateway = self._gateway
        if gateway.partial_bytes + len(data) > gateway.partial_requests_max_bytes:
            log.warning("closing gateway %s: its %d more bytes would make the unfinished requests of all "
                        "connections hold more than %d bytes (partial_requests_max_bytes, at least "
                        "socket_request_max_bytes)", self.info, len(data), gateway.partial_requests_max_bytes)
            self.close()
            return
        if self.partial_since_ms is None:
            self.partial_since_ms = now
        self._frames.feed(data)
        self._process()
        if not self._frames.buffered_bytes:
            self.partial_since_ms = None

    @property
    def busy(self) -> bool:
        """An answer is owed to the client, or a request waits for the broker connection."""
        return bool(self._order) or self._local is not None or bool(self._backlog) or self._streaming

    def eof_received(self) -> bool:
        self.close()
        return False

    def pause_writing(self) -> None:
        self._client_full = True
        if self._upstream is not None:
            self._upstream.pause_reading()

    def resume_writing(self) -> None:
        self._client_full = False
        if self._upstream is not None:
            self._upstream.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._account()
        if exc is not None:
            log.info("gateway %s lost: %r", self.info, exc)
        for task in (self._local, self._connecting):
            if task is not None:
                task.cancel()
        if self._upstream is not None:
            self._upstream.close()
        self._gateway.unregister(self)
        if not self.done.done():
            self.done.set_result(None)

    def close(self) -> None:
        self.closed = True
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.close()

    # -- requests ------------------------------------------------------------------
    def _process(self) -> None:
        """Route every buffered request until one must be awaited (rule 3)."""
        try:
            while (not self.closed and self._local is None and len(self._order) < MAX_IN_FLIGHT
                   and len(self._backlog) < MAX_IN_FLIGHT):
                frame = self._frames.next_frame()
                if frame is None:
                    break
                self.partial_since_ms = _now_ms() if self._frames.buffered_bytes else None
                self._route(frame)
        except WireProtocolError as exc:
            log.warning("closing gateway %s: %s", self.info, exc)
            self.close()
            return
        finally:
            if self._outbox:
                self._upstream.writelines(self._outbox)
                self._outbox = []
            self._account()
        self._update_reading()

    def _route(self, frame: bytes) -> None:
        api_key, version, correlation_id = request_prefix(frame)
        login = self._login
        if login is not None and not login.done and not login.admits(api_key):
            raise RefusedRequestError(f"api key {api_key} (correlation id {correlation_id}) before the SASL "
                                      "login was done")
        route = route_of(api_key)
        if route is Route.FORWARD or route is Route.REWRITE:
            self._check_upstream_api(api_key, version)
            answered = api_key != PRODUCE or produce_expects_response(frame, version)
            rewrite = route is Route.REWRITE and needs_rewrite(api_key, version)
            self._forward(frame, correlation_id, api_key, version, rewrite, answered)
        elif route is Route.LOCAL:
            self._handle(decode_request(memoryview(frame)[FRAME_SIZE_PREFIX_BYTES:], COORDINATOR_APIS))
        elif route is Route.COORDINATOR:
            decoded = decode_request(memoryview(frame)[FRAME_SIZE_PREFIX_BYTES:], COORDINATOR_APIS)
            if (getattr(decoded.request, "key_type", 0) or 0) == 0:
                self._handle(decoded)
            else:  # transaction ids (and any future key type): the brokers' coordinators
                self._forward(frame, correlation_id, api_key, version, True, True)
        elif route is Route.VERSIONS:
            self._api_versions(frame, version, correlation_id)
        elif route is Route.LOGIN and login is not None:
            decoded = decode_request(memoryview(frame)[FRAME_SIZE_PREFIX_BYTES:], self._gateway.security.apis)
            self._local = asyncio.get_running_loop().create_task(self._log_in(frame, decoded))
        else:
            raise RefusedRequestError(f"api key {api_key} v{version} (correlation id {correlation_id}) is a "
                                      "group API zkcoord does not serve; the gateway does not advertise it")

    def _limit_of(self, api_key: int) -> tuple[int, str] | None:
        """A group request's limit, checked as soon as its size and API key
        are read, before the rest is buffered (rule 8); any request's before
        the login is done (rule 7); None: forwarded requests, bounded by
        max_frame_bytes."""
        if self._login is not None and not self._login.done:
            return SASL_MAX_RECEIVE_BYTES, "sasl.server.max.receive.size (before the login)"
        if route_of(api_key) in (Route.LOCAL, Route.COORDINATOR):
            request_limits = self._gateway.request_limits
            return request_limits.request_max_bytes(api_key), request_limits.setting_of(api_key)
        return None

    def _account(self) -> None:
        """Keep the gateway's partial_bytes up to date with what we hold."""
        held = 0 if self.closed else self._frames.buffered_bytes
        self._gateway.partial_bytes += held - self._held
        self._held = held

    def _check_upstream_api(self, api_key: int, version: int) -> None:
        table = self._gateway.advertised(self.broker_id)
        versions = table.get(api_key)
        if versions is None and self._gateway.versions_known(self.broker_id):
            raise RefusedRequestError(f"api key {api_key} v{version} is not served by the brokers behind "
                                      "this gateway")
        if versions is not None and needs_rewrite(api_key, version) and version > versions[1]:
            raise RefusedRequestError(f"api key {api_key} v{version} is above the advertised v{versions[1]}")

    def _handle(self, decoded) -> None:
        """A group request, answered by the daemon's handler."""
        handler = self._gateway.handler
        try:
            response = handler.handle_now(decoded, self.info)
        except Exception:
            log.exception("closing gateway %s: the handler failed on %s", self.info, decoded.api_name)
            self.close()
            return
        if response is not None and not self._order and not self._streaming:
            self._through.append(encode_response(decoded, response))  # nothing ahead of it: out now
            self._flush()
            return
        slot = _Slot()
        self._order.append(slot)
        if response is None:
            self._local = asyncio.get_running_loop().create_task(self._answer(decoded, slot))
            return
        slot.data = encode_response(decoded, response)
        self._flush()

    async def _answer(self, decoded, slot: _Slot) -> None:
        async def encoded() -> bytes:
            return encode_response(decoded, await self._gateway.handler(decoded, self.info))

        data = await self._local_step(encoded(), "no answer to", decoded)
        if data is None:
            return
        slot.data = data
        self._flush()
        self._process()

    async def _local_step(self, step, what: str, decoded):
        """``await step`` for the request in flight (rule 3); None when the
        connection closed meanwhile, or closes because the step failed."""
        try:
            result = await step
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("closing gateway %s: %s %s v%d", self.info, what, decoded.api_name, decoded.api_version)
            self._local = None
            self.close()
            return None
        self._local = None
        return None if self.closed else result

    async def _log_in(self, frame: bytes, decoded) -> None:
        """A SaslHandshake / SaslAuthenticate (rule 7): answered by the login,
        or passed to the broker."""
        answered = await self._local_step(self._login.answer(decoded), "the login failed on", decoded)
        if answered is None:
            return
        response, close_after = answered
        if response is None:
            self._forward(frame, decoded.correlation_id, decoded.api_key, decoded.api_version, False, True,
                          login=decoded)
        else:
            slot = _Slot()
            self._order.append(slot)
            slot.data = encode_response(decoded, response)
            self._flush()
            self._logged_in()
            if close_after:
                self.close()
                return
        self._process()

    def _login_answered(self, pending: _Pending, frame: bytes) -> None:
        """The broker's answer to a login request, as the login lets it out."""
        try:
            pending.slot.data, close_after = self._login.answered(pending.login, frame)
        except WireProtocolError as exc:
            log.warning("closing gateway %s: the broker's login answer: %s", self.info, exc)
            self.close()
            return
        self._logged_in()
        if close_after:
            self._flush()
            self.close()

    def _logged_in(self) -> None:
        login = self._login
        if login.done and self.info.principal != login.principal:
            self.info = replace(self.info, principal=login.principal)
            log.info("gateway %s logged in", self.info)

    def _api_versions(self, frame: bytes, version: int, correlation_id: int) -> None:
        if not self._gateway.versions_known(self.broker_id):  # just started, or Kafka is down: ask first
            slot = _Slot()
            self._order.append(slot)
            self._local = asyncio.get_running_loop().create_task(
                self._api_versions_later(frame, version, correlation_id, slot))
            return
        self._answer_versions(frame, version, correlation_id, None)

    async def _api_versions_later(self, frame: bytes, version: int, correlation_id: int, slot: _Slot) -> None:
        await self._gateway.cluster.versions_ready(self.broker_id, VERSIONS_WAIT_S)
        self._local = None
        if self.closed:
            return
        try:
            self._answer_versions(frame, version, correlation_id, slot)
        except WireProtocolError as exc:
            log.warning("closing gateway %s: %s", self.info, exc)
            self.close()
            return
        self._process()

    def _answer_versions(self, frame: bytes, version: int, correlation_id: int, slot: _Slot | None) -> None:
        """ApiVersions from what the brokers support (the group APIs alone while none is known)."""
        table, extras = self._gateway.api_versions(self.broker_id)
        entries = [{"api_key": k, "min_version": low, "max_version": high} for k, (low, high) in table.items()]
        if slot is None:
            slot = _Slot()
            self._order.append(slot)
        if not 0 <= version <= API_VERSIONS_SERVED:  # KIP-511 (negative too): v0 error answer listing what we serve
            response = build_message(ApiVersionsResponse, 0, error_code=UNSUPPORTED_VERSION, api_keys=entries)
            slot.data = encode_response_frame(response, 0, correlation_id)
        else:
            decoded = decode_request(frame[FRAME_SIZE_PREFIX_BYTES:], COORDINATOR_APIS)
            if version >= 3:
                extras = _with_notice(extras, self._gateway.handler, decoded, self.info)
            try:
                response = build_message(ApiVersionsResponse, version, error_code=0, api_keys=entries,
                                         throttle_time_ms=0, **(extras if version >= 3 else {}))
            except MessageBuildError:
                log.exception("gateway: the brokers' ApiVersions extras do not fit v%d; left out", version)
                response = build_message(ApiVersionsResponse, version, error_code=0, api_keys=entries,
                                         throttle_time_ms=0)
            slot.data = encode_response(decoded, response)
        if self._login is not None and not self._login.done:
            self._login.versions_answered(0 if 0 <= version <= API_VERSIONS_SERVED else UNSUPPORTED_VERSION)
        self._flush()

    # -- forwarding ----------------------------------------------------------------
    def _forward(self, frame: bytes, correlation_id: int, api_key: int, version: int, rewrite: bool,
                 answered: bool, login=None) -> None:
        if answered:
            slot = _Slot()
            self._order.append(slot)
            self._awaiting.append(_Pending(slot, correlation_id, api_key, version, rewrite, login))
        metrics = self._gateway.metrics
        if metrics is not None:
            metrics.observe_forward(api_key, len(frame))
        if self._upstream is not None:
            self._outbox.append(frame)  # written at the end of _process, with the others of this read
            return
        self._backlog.append(frame)
        if self._connecting is None:
            self._connect_upstream()

    def _connect_upstream(self) -> None:
        self._connecting = asyncio.get_running_loop().create_task(self._open_upstream(),
                                                                  name=f"gateway-upstream-{self.info.connection_id}")

    async def _open_upstream(self) -> None:
        candidates = self._gateway.upstream_candidates(self.broker_id)
        if not candidates:
            log.info("closing gateway %s: broker %s has no known address", self.info, self.broker_id)
            self._connecting = None
            self.close()
            return
        upstream, errors = await open_upstream(self, candidates, self._gateway.upstream_ssl)
        if upstream is None:
            log.info("closing gateway %s: no broker accepts a connection (%s)", self.info, "; ".join(errors))
            if self._gateway.metrics is not None:
                self._gateway.metrics.observe_broker_connect_failure()
            self._connecting = None
            self.close()
            return
        self._connecting = None
        if self.closed:
            upstream.close()
            return
        self._upstream = upstream
        if self._client_full:
            upstream.pause_reading()
        for frame in self._backlog:
            upstream.write(frame)
        self._backlog.clear()
        self._update_reading()
        self._process()

    def flush(self) -> None:
        self._flush()

    def upstream_full(self, full: bool) -> None:
        self._upstream_full = full
        self._update_reading()
        if not full:
            self._process()

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            log.info("closing gateway %s: its broker connection closed%s", self.info,
                     f" ({exc!r})" if exc else "")
            self.close()

    # -- answers -------------------------------------------------------------------
    def begin_answer(self, correlation_id: int, frame_bytes: int) -> _Pending:
        """A broker answer of ``frame_bytes`` (size prefix included) starts:
        whose it is, and whether it streams (rule 2)."""
        if not self._awaiting:
            raise RefusedRequestError(f"the broker sent an answer (correlation id {correlation_id}) to no request")
        pending = self._awaiting.popleft()
        if pending.correlation_id != correlation_id:
            raise RefusedRequestError(f"the broker answered correlation id {correlation_id}, expected "
                                      f"{pending.correlation_id}")
        metrics = self._gateway.metrics
        if metrics is not None:
            metrics.observe_forwarded_answer(pending.api_key, frame_bytes)
        if not pending.rewrite and pending.login is None and self._order and self._order[0] is pending.slot:
            self._order.popleft()
            self._streaming = pending.streamed = True
        return pending

    def write_through(self, data) -> None:
        """Bytes of a streamed answer; they go out before anything else at the next _flush."""
        self._through.append(data)

    def end_answer(self, pending: _Pending, parts: list | None) -> None:
        if pending.streamed:
            self._streaming = False
        elif pending.login is not None:
            self._login_answered(pending, b"".join(parts))
        else:
            frame = b"".join(parts)
            pending.slot.data = self._gateway.rewrite(pending, frame) if pending.rewrite else frame
        self._flush()
        if not self._reading and not self.closed:
            self._process()

    def _flush(self) -> None:
        """Write what may go out now, in one call: streamed bytes (always ahead of
        the slots: a streamed answer's slot has left the queue), then the answers
        whose turn it is, unless an answer is still streaming."""
        if self.closed:
            self._through.clear()
            return
        out = self._through
        if not self._streaming:
            order = self._order
            while order and order[0].data is not None:
                out.append(order.popleft().data)
        if out:
            if len(out) == 1:
                self._transport.write(out[0])
            else:
                self._transport.writelines(out)
            self._through = []
            self.last_active_ms = _now_ms()

    def _update_reading(self) -> None:
        if self.closed or self._transport is None:
            return
        reading = (self._local is None and not self._upstream_full and len(self._order) < MAX_IN_FLIGHT
                   and len(self._backlog) < MAX_IN_FLIGHT)  # acks=0 Produces wait without a slot
        if reading != self._reading:
            self._reading = reading
            if reading:
                self._transport.resume_reading()
            else:
                self._transport.pause_reading()


def _deep_send_buffer(transport: asyncio.BaseTransport) -> None:
    """Let the kernel hold up to CLIENT_SEND_BUFFER_BYTES of answers for a
    client: a consumer's small receive window (Java's 64 KB) then drains it
    without waking the gateway for every window's worth."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CLIENT_SEND_BUFFER_BYTES)
        except OSError as exc:  # a platform without it: the default buffer works, only slower
            log.debug("gateway: SO_SNDBUF not set: %s", exc)


def _with_notice(extras: dict, handler, decoded, info) -> dict:
    """The brokers' ApiVersions extras plus zkcoord's rebalance notice feature,
    which the handler advertises (and arms for a zkcoord consumer's notice
    connection) as on the daemon's own listener."""
    notice_features = getattr(handler, "notice_features", None)
    features = notice_features(decoded, info) if notice_features is not None else []
    if not features:
        return extras
    return {**extras, "supported_features": [*extras.get("supported_features", []), *features]}
