"""One client connection to a gateway port.

:class:`ClientConnection` is the client side's ``asyncio.Protocol``: it
cuts request frames (:class:`~zkcoord.wire.framing.RequestFrames`), asks
the :class:`~.routing.Router` where each goes and carries the decision
out, and keeps the connection's reading and writing in step. The parts it
is made of hold the rest: the answer order (:mod:`.answer_order`), the pipe
to the broker (:mod:`.upstream`, whose events it receives), the gateway's
ApiVersions answer (:mod:`.versions`) and the login gate
(:class:`~zkcoord.wire.listener_security.LoginGate`).

Rules:

1. **Routing** (:mod:`.routing`, :mod:`zkcoord.core.gateway`): each request
   frame is read only as far as its api key, version and correlation id.
   Group APIs are decoded and answered by the daemon's API handler,
   ApiVersions by the gateway, everything else is written to this
   connection's upstream broker as the client sent it. An API the gateway
   does not serve, or an upstream API the broker does not list, closes the
   connection, as a broker does.
2. **Order** (:mod:`.answer_order`). Answers go back in request order,
   whoever made them: a slot per request that expects an answer, filled by
   the handler or by the broker, written once every earlier slot is. A
   broker answer whose slot is next is streamed to the client as its bytes
   arrive (no buffering, no decoding) unless it may carry broker addresses;
   those are buffered whole, decoded, rewritten (:mod:`.rewrite`) and
   re-encoded.
3. **One request of the handler at a time**, like a broker's muted channel:
   while a group request waits for its answer (a JoinGroup parked for a
   rebalance, an OffsetCommit taken by the handler's ``handle_soon`` until
   ZooKeeper accepted it), the connection reads nothing more. Forwarded requests are
   pipelined up to ``MAX_IN_FLIGHT`` unanswered requests.
4. **Backpressure both ways**: the client's socket is not read while the
   broker's is full, the broker's is not read while the client's is full.
   The gateway buffers at most one request frame per client (the size
   limit) plus what asyncio's write buffers hold.
5. **Upstream** (:mod:`.upstream`): one broker connection per client
   connection. On a broker's own gateway port it is opened at once to that
   broker; on the gateway's own port, on the first request to forward, to
   the first broker that accepts. When it fails or closes, the client
   connection closes: the client sees what it would see without the
   gateway.
6. A Produce with ``acks=0`` gets no answer from the broker, so it gets no
   slot.
7. **Login** (docs/security.md): on a SASL listener nothing but
   ApiVersions, SaslHandshake and SaslAuthenticate is read until the
   connection's login is done (anything else closes it, as a broker does),
   and frames are at most ``SASL_MAX_RECEIVE_BYTES`` until then. The login
   requests go to the connection's login: answered there
   (:class:`~zkcoord.wire.authentication.SaslLogin`), or passed through to
   the broker and its answers shown to the login before they go out
   (:class:`~.login.PassthroughLogin`). The principal the group APIs see is
   the login's user (on SSL, the client certificate's).
8. **Limits** (:mod:`zkcoord.core.limits`): a group request the gateway
   decodes is refused (the connection closes) above its API's limit, as on
   the daemon's own port; one above ``INLINE_DECODE_BYTES`` is decoded in a
   worker thread and answered by the handler's awaited path, as there (an
   OffsetCommit of 460,000 partitions took the event loop for its whole
   decoding before). The connection notes when it last read from or
   wrote to its client and when its unfinished frame started, for the
   gateway's idle sweep; it is busy while any answer is owed.
9. **Turns**: at most ``FRAMES_PER_TURN`` group requests of one read are
   answered in one callback; the connection then stops reading and goes on
   in a callback of its own, after the other connections' (as the daemon's
   own port does: :mod:`zkcoord.server.transport`, rule 10).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Protocol

from zkcoord.core.gateway import Route, route_of
from zkcoord.core.limits import FRAMES_PER_TURN, RequestLimits
from zkcoord.gateway.answer_order import AnswerOrder, Slot
from zkcoord.gateway.routing import (
    DECODE, FORWARD, HANDLE, LOGIN, RefusedRequestError, Router, after_decoding, decode_group_request,
)
from zkcoord.gateway.upstream import BrokerLink, Expected
from zkcoord.gateway.versions import versions_answer
from zkcoord.wire.bulk_work import collector_paused, off_loop
from zkcoord.wire.connections import ConnectionInfo, now_ms
from zkcoord.wire.errors import WireProtocolError
from zkcoord.wire.framing import RequestFrames, request_prefix
from zkcoord.wire.listener_security import ListenerSecurity, login_gate
from zkcoord.wire.requests import DecodedRequest
from zkcoord.wire.responses import encode_response

__all__ = ["ClientConnection", "GatewayContext", "MAX_IN_FLIGHT"]

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 256
CLIENT_SEND_BUFFER_BYTES = 4 << 20
VERSIONS_WAIT_S = 5.0  # an ApiVersions waits this long for the brokers' versions, then lists the group APIs alone


class GatewayContext(Protocol):
    """What a client connection asks of its gateway (:class:`zkcoord.gateway.gateway.Gateway`)."""

    handler: object  # the daemon's API handler: handle_now(decoded, info), handle_soon(decoded, info, reply),
    # await handler(decoded, info)
    max_frame_bytes: int
    request_limits: RequestLimits
    partial_requests_max_bytes: int
    partial_bytes: int  # what all its client connections hold of unfinished requests
    metrics: object  # DaemonMetrics or None
    security: ListenerSecurity
    upstream_ssl: object  # ssl.SSLContext to the brokers, or None

    def next_connection_id(self) -> int: ...
    def register(self, connection: ClientConnection) -> bool: ...
    def unregister(self, connection: ClientConnection) -> None: ...
    def upstream_candidates(self, broker_id: int | None) -> list[tuple[str, int]]: ...
    def advertised(self, broker_id: int | None) -> dict: ...
    def versions_known(self, broker_id: int | None) -> bool: ...
    def api_versions(self, broker_id: int | None) -> tuple[dict, dict]: ...
    async def versions_ready(self, broker_id: int | None, timeout_s: float) -> None: ...
    def rewrite(self, expected: Expected, frame: bytes) -> bytes: ...


class ClientConnection(asyncio.Protocol):
    """A client of the gateway; ``broker_id`` None on the gateway's own port."""

    def __init__(self, gateway: GatewayContext, broker_id: int | None) -> None:
        self._gateway = gateway
        self.broker_id = broker_id
        self._transport: asyncio.Transport | None = None
        self.info = ConnectionInfo(0, "?", 0)
        self._frames = RequestFrames(gateway.max_frame_bytes, self._limit_of)
        self._held = 0  # bytes of ours counted in the gateway's partial_bytes
        self._answers = AnswerOrder(self._write)
        self._link = BrokerLink(self, self._answers, gateway,
                                lambda: gateway.upstream_candidates(broker_id), gateway.upstream_ssl, broker_id)
        security = gateway.security
        self._router = Router(gateway, broker_id, security.apis if security.sasl else None)
        self._local: asyncio.Task | None = None  # the request in flight: the handler's, the login's, ApiVersions'
        self._upstream_full = False
        self._reading = True
        self._handled = 0  # group requests answered in this callback (rule 9)
        self._turn: asyncio.Handle | None = None  # the next turn (rule 9)
        self.last_active_ms = now_ms()  # last read from or write to the client
        self.partial_since_ms: int | None = None  # when the unfinished request frame started
        self.closed = False
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._gate = None  # the SASL login's gate (rule 7), on SASL listeners

    # -- asyncio.Protocol ----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        _deep_send_buffer(transport)
        peer = transport.get_extra_info("peername") or ("?", 0)
        gateway = self._gateway
        security = gateway.security
        self.info = ConnectionInfo(gateway.next_connection_id(), str(peer[0]), int(peer[1]),
                                   security.principal_of(transport))
        if not gateway.register(self):
            self.close()
            return
        self._gate = login_gate(security, self.info)
        self._link.task_name = f"gateway-upstream-{self.info.connection_id}"
        if security.ssl_context is None:  # long answers may go from the broker's socket to ours in the kernel
            self._link.splice_target = lambda: None if self.closed else self._transport
        if self.broker_id is not None:
            self._link.connect()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        now = self.last_active_ms = now_ms()
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
        return self._answers.owed or self._local is not None or self._link.held > 0

    def eof_received(self) -> bool:
        self.close()
        return False

    def pause_writing(self) -> None:
        self._link.pause_reading()

    def resume_writing(self) -> None:
        self._link.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._answers.close()
        self._account()
        if exc is not None:
            log.info("gateway %s lost: %r", self.info, exc)
        if self._local is not None:
            self._local.cancel()
        self._link.close()
        self._gateway.unregister(self)
        if not self.done.done():
            self.done.set_result(None)

    def close(self) -> None:
        self.closed = True
        self._answers.close()
        self._link.close()  # the broker connection goes with it (rule 5)
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.close()

    # -- requests ------------------------------------------------------------------
    def _process(self) -> None:
        """Route every buffered request until one must be awaited (rule 3)
        or this turn's group requests are answered (rule 9)."""
        self._handled = 0
        try:
            while (not self.closed and self._local is None and self._answers.waiting < MAX_IN_FLIGHT
                   and self._link.held < MAX_IN_FLIGHT):
                if self._handled >= FRAMES_PER_TURN:
                    if self._frames.buffered_bytes and self._turn is None:
                        self._turn = asyncio.get_running_loop().call_soon(self._next_turn)
                    break
                frame = self._frames.next_frame()
                if frame is None:
                    break
                self.partial_since_ms = now_ms() if self._frames.buffered_bytes else None
                self._route(frame)
        except WireProtocolError as exc:
            log.warning("closing gateway %s: %s", self.info, exc)
            self.close()
            return
        finally:
            self._link.push()  # the forwarded requests of this read, in one write
            self._account()
        self._update_reading()

    def _next_turn(self) -> None:
        self._turn = None
        self._process()

    def _route(self, frame: bytes) -> None:
        api_key, version, correlation_id = request_prefix(frame)
        if self._gate is not None and self._gate.refuses(api_key):
            raise RefusedRequestError(f"api key {api_key} (correlation id {correlation_id}) before the SASL "
                                      "login was done")
        decision = self._router.decide(frame, api_key, version, correlation_id)
        action = decision.action
        if action == FORWARD:
            self._forward(frame, correlation_id, api_key, version, decision.rewrite, decision.answered)
        elif action == HANDLE:
            self._handle(decision.decoded)
        elif action == DECODE:
            self._handled += 1
            self._local = asyncio.get_running_loop().create_task(self._answer_big(frame, api_key, version))
        elif action == LOGIN:
            self._local = asyncio.get_running_loop().create_task(self._log_in(frame, decision.decoded))
        else:
            self._api_versions(frame, version, correlation_id)

    def _limit_of(self, api_key: int) -> tuple[int, str] | None:
        """A group request's limit, checked as soon as its size and API key
        are read, before the rest is buffered (rule 8); any request's before
        the login is done (rule 7); None: forwarded requests, bounded by
        max_frame_bytes."""
        if self._gate is not None and self._gate.closed:
            return self._gate.frame_limit()
        if route_of(api_key) in (Route.LOCAL, Route.COORDINATOR):
            request_limits = self._gateway.request_limits
            return request_limits.request_max_bytes(api_key), request_limits.setting_of(api_key)
        return None

    def _account(self) -> None:
        """Keep the gateway's partial_bytes up to date with what we hold."""
        held = 0 if self.closed else self._frames.buffered_bytes
        self._gateway.partial_bytes += held - self._held
        self._held = held

    def _forward(self, frame: bytes, correlation_id: int, api_key: int, version: int, rewrite: bool,
                 answered: bool, login: DecodedRequest | None = None) -> None:
        expected = None
        if answered:
            expected = Expected(self._answers.reserve(), correlation_id, api_key, version, rewrite, login)
        self._link.forward(frame, api_key, expected)

    # -- the daemon's handler (rule 3) ---------------------------------------------
    def _handle(self, decoded: DecodedRequest) -> None:
        """A group request, answered by the daemon's handler."""
        self._handled += 1
        try:
            response = self._gateway.handler.handle_now(decoded, self.info)
        except Exception:
            log.exception("closing gateway %s: the handler failed on %s", self.info, decoded.api_name)
            self.close()
            return
        if response is None:
            soon = _Soon(self, decoded)
            handle_soon = getattr(self._gateway.handler, "handle_soon", None)
            try:
                taken = handle_soon is not None and handle_soon(decoded, self.info, soon)
            except Exception:
                log.exception("closing gateway %s: the handler failed on %s", self.info, decoded.api_name)
                self.close()
                return
            if not taken:
                self._local = asyncio.get_running_loop().create_task(self._answer(decoded, self._answers.reserve()))
                return
            if soon.early is None:  # answered later, by soon() (an OffsetCommit waiting for ZooKeeper)
                soon.slot = self._answers.reserve()
                self._local = soon
                return
            response = soon.early
            if isinstance(response, BaseException):
                log.error("closing gateway %s: the handler failed on %s", self.info, decoded.api_name,
                          exc_info=response)
                self.close()
                return
        self._answers.answer_now(encode_response(decoded, response))
        self._answers.flush()

    def _answered_soon(self, soon: _Soon, response: object) -> None:
        """The answer to a request the handler took with ``handle_soon`` (rule 3)."""
        self._local = None
        if self.closed:
            return
        if isinstance(response, BaseException):
            log.error("closing gateway %s: the handler failed on %s", self.info, soon.decoded.api_name,
                      exc_info=response)
            self.close()
            return
        soon.slot.data = encode_response(soon.decoded, response)
        self._answers.flush()
        self._process()

    async def _answer(self, decoded: DecodedRequest, slot: Slot) -> None:
        async def encoded() -> bytes:
            return encode_response(decoded, await self._gateway.handler(decoded, self.info))

        data = await self._local_step(encoded(), "no answer to", decoded)
        if data is None:
            return
        slot.data = data
        self._answers.flush()
        self._process()

    async def _answer_big(self, frame: bytes, api_key: int, version: int) -> None:
        """A group request too big to decode inline (rule 8): decoded in a worker
        thread, then answered by the handler's awaited path (or forwarded), the
        cyclic collector paused until then (:func:`zkcoord.wire.bulk_work.collector_paused`)."""
        with collector_paused():
            await self._decode_and_answer(frame, api_key, version)  # its objects are freed when it returns

    async def _decode_and_answer(self, frame: bytes, api_key: int, version: int) -> None:
        try:
            decoded = await off_loop(decode_group_request, frame)
        except WireProtocolError as exc:
            log.warning("closing gateway %s: %s", self.info, exc)
            self._local = None
            self.close()
            return
        decision = after_decoding(decoded)
        if decision.action == FORWARD:
            self._local = None
            if not self.closed:
                self._forward(frame, decoded.correlation_id, api_key, version, decision.rewrite, True)
                self._link.push()
                self._process()
            return
        await self._answer(decoded, self._answers.reserve())

    async def _local_step(self, step, what: str, decoded: DecodedRequest):
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

    # -- the login (rule 7) --------------------------------------------------------
    async def _log_in(self, frame: bytes, decoded: DecodedRequest) -> None:
        """A SaslHandshake / SaslAuthenticate: answered by the login, or passed to the broker."""
        answered = await self._local_step(self._gate.login.answer(decoded), "the login failed on", decoded)
        if answered is None:
            return
        response, close_after = answered
        if response is None:
            self._forward(frame, decoded.correlation_id, decoded.api_key, decoded.api_version, False, True,
                          login=decoded)
        else:
            self._answers.reserve().data = encode_response(decoded, response)
            self._answers.flush()
            self._logged_in()
            if close_after:
                self.close()
                return
        self._process()

    def _login_answered(self, expected: Expected, frame: bytes) -> None:
        """The broker's answer to a login request, as the login lets it out."""
        try:
            expected.slot.data, close_after = self._gate.login.answered(expected.login, frame)
        except WireProtocolError as exc:
            log.warning("closing gateway %s: the broker's login answer: %s", self.info, exc)
            self.close()
            return
        self._logged_in()
        if close_after:
            self._answers.flush()
            self.close()

    def _logged_in(self) -> None:
        info = self._gate.logged_in(self.info)
        if info is not None:
            self.info = info
            log.info("gateway %s logged in", self.info)

    # -- ApiVersions ---------------------------------------------------------------
    def _api_versions(self, frame: bytes, version: int, correlation_id: int) -> None:
        if not self._gateway.versions_known(self.broker_id):  # just started, or Kafka is down: ask first
            slot = self._answers.reserve()
            self._local = asyncio.get_running_loop().create_task(
                self._api_versions_later(frame, version, correlation_id, slot))
            return
        self._answer_versions(frame, version, correlation_id, self._answers.reserve())

    async def _api_versions_later(self, frame: bytes, version: int, correlation_id: int, slot: Slot) -> None:
        await self._gateway.versions_ready(self.broker_id, VERSIONS_WAIT_S)
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

    def _answer_versions(self, frame: bytes, version: int, correlation_id: int, slot: Slot) -> None:
        """ApiVersions from what the brokers support (the group APIs alone while none is known)."""
        table, extras = self._gateway.api_versions(self.broker_id)
        notice = getattr(self._gateway.handler, "notice_features", None)
        slot.data, error_code = versions_answer(
            frame, version, correlation_id, table, extras,
            None if notice is None else lambda decoded: notice(decoded, self.info))
        if self._gate is not None:
            self._gate.versions_answered(error_code)
        self._answers.flush()

    # -- what the broker link reports (rule 5) -------------------------------------
    def upstream_open(self) -> None:
        self._update_reading()
        self._process()

    def answer_arrived(self, expected: Expected, frame: bytes) -> None:
        """A broker answer read before it goes out: a login's, or one to rewrite (rule 2)."""
        if expected.login is not None:
            self._login_answered(expected, frame)
            return
        try:
            expected.slot.data = self._gateway.rewrite(expected, frame)
        except (WireProtocolError, ValueError) as exc:
            log.warning("closing gateway %s: bad answer from its broker: %s", self.info, exc)
            self.close()

    def answers_moved(self) -> None:
        if not self._reading and not self.closed:
            self._process()

    def upstream_full(self, full: bool) -> None:
        self._upstream_full = full
        self._update_reading()
        if not full:
            self._process()

    def upstream_closed(self, why: str, level: int) -> None:
        if not self.closed:
            log.log(level, "closing gateway %s: %s", self.info, why)
            self.close()

    # -- the client socket -----------------------------------------------------------
    def _write(self, out: list) -> None:
        if len(out) == 1:
            self._transport.write(out[0])
        else:
            self._transport.writelines(out)
        self.last_active_ms = now_ms()

    def _update_reading(self) -> None:
        if self.closed or self._transport is None:
            return
        reading = (self._local is None and self._turn is None and not self._upstream_full
                   and self._answers.waiting < MAX_IN_FLIGHT
                   and self._link.held < MAX_IN_FLIGHT)  # acks=0 Produces wait without a slot
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


class _Soon:
    """A group request the daemon's handler took to answer later
    (``handle_soon``: an OffsetCommit answered once ZooKeeper accepted it),
    without a task: it stands in the connection's ``_local`` meanwhile.
    An answer given before ``handle_soon`` returned is kept in ``early``."""

    __slots__ = ("connection", "decoded", "slot", "early", "cancelled")

    def __init__(self, connection: ClientConnection, decoded: DecodedRequest) -> None:
        self.connection, self.decoded = connection, decoded
        self.slot = None
        self.early = None
        self.cancelled = False

    def __call__(self, response: object) -> None:
        if self.cancelled:
            return
        if self.slot is None:
            self.early = response
            return
        self.connection._answered_soon(self, response)

    def cancel(self) -> None:
        self.cancelled = True

