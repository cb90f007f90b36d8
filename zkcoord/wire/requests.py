"""Request frames decoded into kafka-python's generated messages.

This module owns how a request frame's payload (the bytes after its size
prefix) becomes a :class:`DecodedRequest`: the header, then the body of a
served API at a served version. It never parses a protocol field by hand:
headers and bodies go through kafka-python 3.0.12's compiled decoders.

Rules:

1. A request we cannot serve is an error carrying api key, version and
   correlation id (`UnsupportedRequestError`), except an ApiVersions request
   of a version we do not serve: like a Kafka broker (KIP-511) we answer it
   with an ApiVersions v0 response, error UNSUPPORTED_VERSION (35), listing
   the supported APIs, so the client can retry with a version we know.
2. A frame is malformed when the header or body does not decode, when the
   body is shorter or longer than the schema says, or when a field the schema
   declares non-nullable arrives as null. A Java broker rejects truncated
   bodies and such nulls too; trailing bytes we reject because only a
   client/schema mismatch produces them, and then the decoded values are
   wrong anyway.
3. This is the daemon's hottest path, so everything that depends only on
   (message class, version) is worked out once and cached: the compiled
   decoders (headers included; kafka-python's generic header path costs
   several times more) and the list of fields that must not be null, all
   found with one dictionary lookup on a frame's first four bytes (api
   key, version: the registry's ``plans``). A null check formats nothing
   unless it finds a null.
4. A steady member repeats its Heartbeat (and its ConsumerGroupHeartbeat)
   byte for byte but for the correlation id, a fixed int32 at bytes 4-8 of
   every request header: such a request is decoded once, and a frame equal
   to one decoded before but for those bytes reuses its decoded message
   (``REPEATED_APIS``, frames of at most ``MEMO_MAX_FRAME_BYTES``, at most
   ``MEMO_MAX_ENTRIES`` of them per registry, forgotten all at once when
   full: a client sending distinct or large heartbeats costs the memo at
   most ~16 MB). A decoded message is therefore shared: nothing may change
   one (nothing in the daemon or the gateway does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kafka.protocol.api_header import RequestHeader
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.codecs import Int16

from zkcoord.core.api_keys import API_VERSIONS, CONSUMER_GROUP_HEARTBEAT, HEARTBEAT
from zkcoord.core.errors import ErrorCode
from zkcoord.wire.errors import MalformedFrameError, UnsupportedRequestError, api_name
from zkcoord.wire.messages import api_versions_response
from zkcoord.wire.registry import COORDINATOR_APIS, ApiRegistry, ApiSpec

__all__ = ["DecodedRequest", "decode_request", "decode_request_header"]

_NULL_CHECKED_TYPES = frozenset({"string", "bytes", "records"})
REPEATED_APIS = frozenset({HEARTBEAT, CONSUMER_GROUP_HEARTBEAT})  # rule 4
MEMO_MAX_ENTRIES = 16_384  # a steady heartbeat's frame is 60-200 bytes: at most ~16 MB per registry
MEMO_MAX_FRAME_BYTES = 1024  # larger frames (a Heartbeat may be up to group_request_max_bytes) are not kept


class DecodedRequest:
    """A request as read off the wire (read-only by convention: a plain
    slotted class, built for every request, costs a third of a frozen
    dataclass).

    `request` is the generated message (e.g. `JoinGroupRequest`) decoded at
    `api_version`, shared with other requests of the same bytes (rule 4). It
    is None only when the codec answered the request itself: then
    `immediate_response` holds that answer (the KIP-511 ApiVersions reply)
    and the handler is not consulted. `header_version`: the request
    header's version (1, or 2 when flexible).
    """

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "header_version", "request", "spec",
                 "immediate_response")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                 header_version: int, request: ApiMessage | None, spec: ApiSpec,
                 immediate_response: ApiMessage | None = None) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.header_version = header_version
        self.request = request
        self.spec = spec
        self.immediate_response = immediate_response

    @property
    def api_name(self) -> str:
        return self.spec.name

    @property
    def response_version(self) -> int:
        """The version the response is encoded at (0 for the KIP-511 reply)."""
        return 0 if self.immediate_response is not None else self.api_version

    def __repr__(self) -> str:
        return (f"DecodedRequest({self.spec.name} v{self.api_version}, correlation id {self.correlation_id}, "
                f"client {self.client_id!r})")


def decode_request(frame: bytes, apis: ApiRegistry = COORDINATOR_APIS) -> DecodedRequest:
    """Decode one request; `frame` is the payload after the 4-byte size prefix."""
    if len(frame) >= 4:
        head = frame[:4]
        if type(head) is not bytes:  # a memoryview (the gateway's)
            head = bytes(head)
        plan = apis.plans.get(head)
        if plan is None:
            plan = apis.plans[head] = _plan(frame, apis)
        if plan:  # a served API at a served version: one lookup gave every decoder (rule 3)
            spec, api_key, header_decoder, header_version, body_decoder, null_checks, memo = plan
            if memo is not None and len(frame) > MEMO_MAX_FRAME_BYTES:  # rule 4: not kept
                memo = None
            if memo is not None:  # rule 4
                key = head + frame[8:]
                found = memo.get(key)
                if found is not None:
                    return DecodedRequest(api_key, found[0], int.from_bytes(frame[4:8], "big", signed=True),
                                          found[1], header_version, found[2], spec)
            view = memoryview(frame)
            try:
                header, offset = header_decoder(view, 0)
                if offset > len(frame):  # compiled decoders slice past the end without complaint
                    raise ValueError(f"the header needs {offset} bytes")
            except Exception as exc:  # struct.error, ValueError, UnicodeDecodeError, ...
                raise MalformedFrameError(
                    f"request header v{header_version} does not decode from a "
                    f"{len(frame)}-byte frame: {exc!r}") from exc
            try:
                request, end = body_decoder(view, offset)
            except Exception as exc:  # struct.error, IndexError, UnicodeDecodeError, ...
                raise _malformed_body(spec, header, frame, offset, f"does not decode: {exc!r}") from exc
            if end != len(frame) or null_checks:
                _check_body(spec, header, frame, offset, end, request, null_checks)
            if memo is not None:
                if len(memo) >= MEMO_MAX_ENTRIES:
                    memo.clear()
                memo[key] = (header.request_api_version, header.client_id, request)
            return DecodedRequest(api_key, header.request_api_version, header.correlation_id, header.client_id,
                                  header_version, request, spec)
    return _decode_request(frame, apis)


def _plan(frame: bytes, apis: ApiRegistry) -> tuple | bool:
    """What decodes a frame whose first 4 bytes (api key, version) are those
    of ``frame``: (spec, api key, header decoder, its version, body decoder, null
    checks, the memo of rule 4 or None), or False when the API or version is not served (the general
    path answers or refuses it). Its api key is read here once: the spec's
    property asks kafka-python's class every time."""
    api_key, _ = Int16.decode_from(frame, 0)
    version, _ = Int16.decode_from(frame, 2)
    spec = apis.get(api_key)
    if spec is None or not spec.supports(version):
        return False
    header_version, header_decoder = _HEADER_DECODERS[spec.request_class.flexible_version_q(version)]
    body_decoder, null_checks = _body_decoder(spec, version)
    memo = apis.memo if spec.api_key in REPEATED_APIS else None
    return spec, spec.api_key, header_decoder, header_version, body_decoder, null_checks, memo


def _check_body(spec, header, frame, offset, end, request, null_checks) -> None:
    """Rule 2 for a decoded body: it ends where the frame ends, and no field
    the schema declares non-nullable is null; else MalformedFrameError."""
    if end != len(frame):
        state = "is truncated" if end > len(frame) else f"has {len(frame) - end} trailing bytes"
        raise _malformed_body(spec, header, frame, offset, state)
    null_path = _first_null(null_checks, request, "") if null_checks else None
    if null_path is not None:
        raise _malformed_body(spec, header, frame, offset, f"non-nullable field {null_path} is null",
                              separator=": ")


def _decode_request(frame: bytes, apis: ApiRegistry) -> DecodedRequest:
    """The general path of :func:`decode_request`: unsupported APIs and
    versions (KIP-511), frames too short to name their API."""
    header, offset = decode_request_header(frame, flexible=_has_flexible_header(frame, apis))
    spec = apis.get(header.request_api_key)
    if spec is None:
        raise _unsupported(header, "api key is not served by this server")
    version = header.request_api_version
    if not spec.supports(version):
        if spec.api_key == API_VERSIONS:
            return _kip511_request(header, spec, apis)
        raise _unsupported(
            header, f"version is outside the served range {spec.min_version}-{spec.max_version}")
    request = _decode_body(spec, header, frame, offset)
    return DecodedRequest(
        api_key=spec.api_key, api_version=version, correlation_id=header.correlation_id,
        client_id=header.client_id, header_version=header.version, request=request, spec=spec)


# RequestHeader.decode goes through kafka-python's generic (slow) struct
# decoder; the compiled one of the same schema and header version is the one
# ApiMessage bodies use. Header v1 (non-flexible) and v2 (flexible) both keep
# client_id non-compact, as RequestHeader.decode does.
def _header_decoder(flexible: bool) -> tuple[int, Callable[..., Any]]:
    version = RequestHeader._flexible_versions[0] if flexible else RequestHeader._valid_versions[0]
    return version, RequestHeader._struct.compiled_decode_from(
        version, compact=False, tagged=flexible, data_class=RequestHeader)


_HEADER_DECODERS = {flexible: _header_decoder(flexible) for flexible in (False, True)}


def _has_flexible_header(frame: bytes, apis: ApiRegistry) -> bool:
    """Whether the request header is v2: the API is served at the version in the
    frame's first 4 bytes (api key, api version) and that version is flexible.
    Otherwise v1 is read: what v1 and v2 share is all an error or the KIP-511
    reply needs, and a frame too short for both fields fails as v1."""
    if len(frame) < 4:
        return False
    api_key, _ = Int16.decode_from(frame, 0)
    version, _ = Int16.decode_from(frame, 2)
    spec = apis.get(api_key)
    return spec is not None and spec.supports(version) and spec.request_class.flexible_version_q(version)


def decode_request_header(frame: bytes | memoryview, *, flexible: bool) -> tuple[RequestHeader, int]:
    """The request header (v2 when ``flexible``, else v1) at the start of a
    frame's payload, and where the body starts; MalformedFrameError."""
    version, decoder = _HEADER_DECODERS[flexible]
    try:
        header, end = decoder(memoryview(frame), 0)
        if end > len(frame):  # compiled decoders slice past the end without complaint
            raise ValueError(f"the header needs {end} bytes")
    except Exception as exc:  # struct.error, ValueError, UnicodeDecodeError, ...
        raise MalformedFrameError(
            f"request header v{version} does not decode from a "
            f"{len(frame)}-byte frame: {exc!r}") from exc
    return header, end


# A null check: (field name, null forbidden, struct array?, checks of its children).
_NullCheck = tuple[str, bool, bool, tuple]
_BODY_DECODERS: dict[tuple[type, int], tuple[Callable[..., Any], tuple[_NullCheck, ...]]] = {}


def _body_decoder(spec: ApiSpec, version: int) -> tuple[Callable[..., Any], tuple[_NullCheck, ...]]:
    """The compiled body decoder of (request class, version) and its null checks, cached."""
    key = (spec.request_class, version)
    found = _BODY_DECODERS.get(key)
    if found is None:
        flexible = spec.request_class.flexible_version_q(version)
        # ApiMessage.decode discards where decoding stopped, and the generated
        # decoders slice past the end of a truncated buffer without complaint,
        # so we call the same compiled decoder it uses and check the end offset.
        decoder = spec.request_class._struct.compiled_decode_from(
            version, compact=flexible, tagged=flexible, data_class=spec.request_class[None])
        found = _BODY_DECODERS[key] = (decoder, _null_checks(spec.request_class.fields, version))
    return found


def _decode_body(spec: ApiSpec, header: RequestHeader, frame: bytes, offset: int) -> ApiMessage:
    version = header.request_api_version
    decoder, null_checks = _body_decoder(spec, version)
    try:
        request, end = decoder(memoryview(frame), offset)
    except Exception as exc:  # struct.error, IndexError, UnicodeDecodeError, ...
        raise _malformed_body(spec, header, frame, offset, f"does not decode: {exc!r}") from exc
    _check_body(spec, header, frame, offset, end, request, null_checks)
    return request


def _malformed_body(spec: ApiSpec, header: RequestHeader, frame: bytes, offset: int, what: str,
                    separator: str = " ") -> MalformedFrameError:
    version = header.request_api_version
    where = (f"{spec.name} v{version} body (correlation id {header.correlation_id}, "
             f"{len(frame) - offset} bytes)")
    return MalformedFrameError(where + separator + what, api_key=spec.api_key, api_version=version,
                               correlation_id=header.correlation_id)


def _null_checks(schema: Mapping[str, Any], version: int) -> tuple[_NullCheck, ...]:
    """What `_first_null` must look at in a message of `schema` at `version`.

    A Java broker rejects null in a non-nullable string, bytes, records,
    array or struct field; fields the version lacks and tagged fields are
    not checked. Structs are descended only if something inside is checked.
    """
    checks = []
    for field in schema.values():
        if not field.for_version_q(version) or field.tagged_field_q(version):
            continue
        nullable_kind = field.is_array() or field.is_struct() or field.type_str in _NULL_CHECKED_TYPES
        forbidden = nullable_kind and not field.nullable_for_version_q(version)
        nested = field.is_struct() or field.is_struct_array()
        children = _null_checks(field.fields, version) if nested else ()
        if forbidden or children:
            checks.append((field.name, forbidden, field.is_struct_array(), children))
    return tuple(checks)


def _first_null(checks: tuple[_NullCheck, ...], obj: Any, path: str) -> str | None:
    """The path of the first forbidden null in `obj` (`members[1].member_id`), or None."""
    found = _null_in(checks, obj)
    return None if found is None else path + ".".join(reversed(found))


def _null_in(checks: tuple[_NullCheck, ...], obj: Any) -> list[str] | None:
    """The first forbidden null's path, innermost part first; nothing is
    formatted unless one is found (every request of a hot API is checked)."""
    for name, forbidden, is_array, children in checks:
        value = getattr(obj, name)
        if value is None:
            if forbidden:
                return [name]
            continue
        if not children:
            continue
        if is_array:
            for i, child in enumerate(value):
                found = _null_in(children, child)
                if found is not None:
                    found.append(f"{name}[{i}]")
                    return found
        else:
            found = _null_in(children, value)
            if found is not None:
                found.append(name)
                return found
    return None


def _unsupported(header: RequestHeader, reason: str) -> UnsupportedRequestError:
    key, version = header.request_api_key, header.request_api_version
    return UnsupportedRequestError(
        f"{api_name(key, 'unknown API')} (key {key}) v{version} from client {header.client_id!r} "
        f"(correlation id {header.correlation_id}): {reason}",
        api_key=key, api_version=version, correlation_id=header.correlation_id,
        client_id=header.client_id)


def _kip511_request(header: RequestHeader, spec: ApiSpec, apis: ApiRegistry) -> DecodedRequest:
    # The body of an unknown ApiVersions version is not read: its layout is
    # unknown to us, and the v0 reply tells the client which version to retry.
    reply = api_versions_response(0, apis, error_code=int(ErrorCode.UNSUPPORTED_VERSION))
    return DecodedRequest(
        api_key=spec.api_key, api_version=header.request_api_version,
        correlation_id=header.correlation_id, client_id=header.client_id,
        header_version=header.version, request=None, spec=spec, immediate_response=reply)
