"""Where each request a gateway client sends goes: the routing decision.

Owns :class:`Router`, one per client connection: from a request frame's
api key and version (:func:`zkcoord.wire.framing.request_prefix`) and the
route of its API (:func:`zkcoord.core.gateway.route_of`) it decides, without
doing any of it, whether the request is forwarded to the broker (and
whether its answer is rewritten, and whether it gets one), handled by the
daemon's API handler (decoded), answered as ApiVersions by the gateway, or
handed to the connection's login; or refused (:class:`RefusedRequestError`:
the connection closes, as a broker closes it).

The gateway reads a request only as far as it must (Kroxylicious's
``DelegatingDecodePredicate``): group requests are decoded, and of a
Produce only ``acks`` (:func:`produce_expects_response`, since a Produce
with ``acks=0`` gets no answer and so must not wait for one).
"""

from __future__ import annotations

import io
from typing import NamedTuple, Protocol

from kafka.protocol.producer import ProduceRequest
from kafka.protocol.schemas.fields.codecs import Int16, UnsignedVarInt32

from zkcoord.core.api_keys import FIND_COORDINATOR, PRODUCE
from zkcoord.core.gateway import Route, VersionTable, needs_rewrite, route_of
from zkcoord.core.limits import INLINE_DECODE_BYTES
from zkcoord.wire.errors import MalformedFrameError, WireProtocolError
from zkcoord.wire.framing import FRAME_SIZE_PREFIX_BYTES
from zkcoord.wire.registry import COORDINATOR_APIS, ApiRegistry
from zkcoord.wire.requests import DecodedRequest, decode_request, decode_request_header

__all__ = ["Router", "Decision", "RefusedRequestError", "produce_expects_response", "decode_group_request",
           "after_decoding", "FORWARD", "HANDLE", "VERSIONS", "LOGIN", "DECODE"]

FORWARD, HANDLE, VERSIONS, LOGIN, DECODE = "forward", "handle", "versions", "login", "decode"


class RefusedRequestError(WireProtocolError):
    """A request the gateway does not pass on; the connection closes."""


class Decision(NamedTuple):
    """What to do with one request: ``action`` (FORWARD, HANDLE, VERSIONS,
    LOGIN, DECODE); a forwarded one's answer is ``rewrite``-n, and ``answered`` at
    all; HANDLE and LOGIN carry the request ``decoded``. DECODE: a group
    request too big to decode on the event loop (``INLINE_DECODE_BYTES``):
    decode it in a worker thread (:func:`decode_group_request`), then
    :func:`after_decoding` says what to do."""

    action: str
    rewrite: bool = False
    answered: bool = True
    decoded: DecodedRequest | None = None


_FORWARDS = tuple(tuple(Decision(FORWARD, rewrite, answered) for answered in (False, True))
                  for rewrite in (False, True))  # [rewrite][answered]: one of four, made once
_VERSIONS = Decision(VERSIONS)
_DECODE = Decision(DECODE)


class BrokerVersions(Protocol):
    """What the router asks of its gateway about the brokers' API versions."""

    def advertised(self, broker_id: int | None) -> VersionTable:
        """The ApiVersions table clients of that port are given."""

    def versions_known(self, broker_id: int | None) -> bool:
        """Whether the brokers' versions are known yet."""


class Router:
    """The routing decisions of one client connection; ``login_apis``: what
    its login decodes (None on a listener without SASL)."""

    __slots__ = ("_brokers", "_broker_id", "_login_apis")

    def __init__(self, brokers: BrokerVersions, broker_id: int | None, login_apis: ApiRegistry | None) -> None:
        self._brokers = brokers
        self._broker_id = broker_id
        self._login_apis = login_apis

    def decide(self, frame: bytes, api_key: int, version: int, correlation_id: int) -> Decision:
        """The decision for a whole request frame (its prefix read already);
        RefusedRequestError, or the wire's errors for a frame that must be
        decoded and does not."""
        route = route_of(api_key)
        if route is Route.FORWARD or route is Route.REWRITE:
            self._check_upstream_api(api_key, version)
            answered = api_key != PRODUCE or produce_expects_response(frame, version)
            return _FORWARDS[route is Route.REWRITE and needs_rewrite(api_key, version)][answered]
        if route is Route.LOCAL or route is Route.COORDINATOR:
            if len(frame) - FRAME_SIZE_PREFIX_BYTES > INLINE_DECODE_BYTES:
                return _DECODE
            return after_decoding(_decoded(frame, COORDINATOR_APIS))
        if route is Route.VERSIONS:
            return _VERSIONS
        if route is Route.LOGIN and self._login_apis is not None:
            return Decision(LOGIN, decoded=_decoded(frame, self._login_apis))
        raise RefusedRequestError(f"api key {api_key} v{version} (correlation id {correlation_id}) is a "
                                  "group API zkcoord does not serve; the gateway does not advertise it")

    def _check_upstream_api(self, api_key: int, version: int) -> None:
        table = self._brokers.advertised(self._broker_id)
        versions = table.get(api_key)
        if versions is None and self._brokers.versions_known(self._broker_id):
            raise RefusedRequestError(f"api key {api_key} v{version} is not served by the brokers behind "
                                      "this gateway")
        if versions is not None and needs_rewrite(api_key, version) and version > versions[1]:
            raise RefusedRequestError(f"api key {api_key} v{version} is above the advertised v{versions[1]}")


def _decoded(frame: bytes, apis: ApiRegistry) -> DecodedRequest:
    return decode_request(memoryview(frame)[FRAME_SIZE_PREFIX_BYTES:], apis)


def decode_group_request(frame: bytes) -> DecodedRequest:
    """A group request's frame (size prefix included) decoded; the wire's errors when it does not decode."""
    return _decoded(frame, COORDINATOR_APIS)


def after_decoding(decoded: DecodedRequest) -> Decision:
    """What to do with a decoded group request: HANDLE it, or (a FindCoordinator
    of transaction ids, or any future key type) FORWARD it to the brokers'
    coordinators."""
    if decoded.api_key == FIND_COORDINATOR and (getattr(decoded.request, "key_type", 0) or 0) != 0:
        return _FORWARDS[True][True]
    return Decision(HANDLE, decoded=decoded)


def produce_expects_response(frame: bytes, api_version: int) -> bool:
    """Whether a Produce request gets an answer: ``acks`` is not 0. The field
    follows the header and, from v3, the transactional id."""
    payload = memoryview(frame)[FRAME_SIZE_PREFIX_BYTES:]
    flexible = ProduceRequest.flexible_version_q(api_version) if api_version <= ProduceRequest.max_version \
        else True
    _, pos = decode_request_header(payload, flexible=flexible)
    try:
        if api_version >= 3:  # skip the transactional id: a (compact) nullable string
            if flexible:
                head = io.BytesIO(payload[pos:pos + 5])
                length = UnsignedVarInt32.decode(head) - 1
                pos += head.tell()
            else:
                length, pos = Int16.decode_from(payload, pos)
            pos += max(length, 0)
        acks, _ = Int16.decode_from(payload, pos)
    except Exception as exc:  # struct.error, IndexError, ValueError
        raise MalformedFrameError(f"Produce v{api_version} request: acks do not decode: {exc!r}") from exc
    return acks != 0
