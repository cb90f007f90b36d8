"""Kafka wire codec for the coordinator daemon, built on kafka-python's classes.

This module owns the bytes of the Kafka protocol as the daemon sees them:
which APIs and versions the daemon serves (`COORDINATOR_APIS`), how a request
frame becomes a `DecodedRequest`, and how a response message becomes a frame.
It never parses or writes a protocol field by hand: headers and bodies go
through kafka-python 3.0.12's generated message classes (`RequestHeader`,
`JoinGroupRequest`, ...). The socket side lives in `transport.py`.

Rules:

1. We advertise exactly what we decode. An `ApiSpec` may only claim versions
   that the kafka-python schema declares valid (`validVersions`), so
   OffsetCommit starts at v2 and OffsetFetch at v1 although Kafka 3.9 still
   accepted OffsetCommit v0-1 and OffsetFetch v0.
2. A request we cannot serve is an error carrying api key, version and
   correlation id (`UnsupportedRequestError`), except an ApiVersions request
   of a version we do not serve: like a Kafka broker (KIP-511) we answer it
   with an ApiVersions v0 response, error UNSUPPORTED_VERSION (35), listing
   the supported APIs, so the client can retry with a version we know.
3. A frame is malformed when the header or body does not decode, when the
   body is shorter or longer than the schema says, or when a field the schema
   declares non-nullable arrives as null. A Java broker rejects truncated
   bodies and such nulls too; trailing bytes we reject because only a
   client/schema mismatch produces them, and then the decoded values are
   wrong anyway.
4. Responses use response header v1 (tagged fields) for flexible versions and
   v0 otherwise; ApiVersions responses always use header v0.
5. The per-request path is the daemon's hottest code, so everything that
   depends only on (message class, version) is worked out once and cached:
   kafka-python's compiled decoders and encoders (headers included; its
   generic header path costs several times more), the list of fields that
   must not be null, and which fields a version carries. Responses that are
   the same for every request but the correlation id (a Heartbeat answer,
   say) come from `constant_response`: kafka-python encodes such a message
   once, and each frame is that body behind a fresh header.

Exceptions (all raised from this module; `transport.py` reacts to them)::

    WireProtocolError            base class
    ├── FrameSizeError           size prefix negative or above the limit
    │   └── RequestTooLargeError the frame is above its API's limit
    ├── MalformedFrameError      header or body does not decode
    ├── UnsupportedRequestError  api key not served, or version out of range
    └── MessageBuildError        a message cannot be built or encoded
        └── ResponseEncodingError  the response does not fit the request
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin.groups import (
    DeleteGroupsRequest, DeleteGroupsResponse,
    DescribeGroupsRequest, DescribeGroupsResponse,
    ListGroupsRequest, ListGroupsResponse,
)
from kafka.protocol.api_header import RequestHeader, ResponseHeader
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.group import (
    HeartbeatRequest, HeartbeatResponse,
    JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse,
    OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse,
    SyncGroupRequest, SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest, ApiVersionsResponse,
    FindCoordinatorRequest, FindCoordinatorResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
)
from kafka.protocol.schemas.fields.codecs import Int16, Int32
from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBufferPool

from zkcoord.schemas import (
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
)
from zkcoord.errors import ZkcoordError
from zkcoord.server.response_errors import first_error_code

UNSUPPORTED_VERSION = 35
FRAME_SIZE_PREFIX_BYTES = 4
_NULL_CHECKED_TYPES = frozenset({"string", "bytes", "records"})


class WireProtocolError(ZkcoordError):
    """Base class of every error raised by the wire codec (one of zkcoord's
    errors: :mod:`zkcoord.errors`)."""


class FrameSizeError(WireProtocolError):
    """The 4-byte size prefix is negative or larger than allowed."""

    def __init__(self, size: int, max_frame_bytes: int) -> None:
        super().__init__(
            f"frame size {size} is outside 0..{max_frame_bytes} bytes; the peer is "
            "not speaking the Kafka protocol or sent a request larger than "
            "max_frame_bytes")
        self.size = size
        self.max_frame_bytes = max_frame_bytes


class RequestTooLargeError(FrameSizeError):
    """A frame larger than its API may be (:mod:`zkcoord.core.limits`, rule 3)."""

    def __init__(self, size: int, max_bytes: int, api_key: int, setting: str) -> None:
        try:
            name = ApiKey(api_key).name
        except ValueError:
            name = f"api key {api_key}"
        WireProtocolError.__init__(
            self, f"a {size}-byte {name} request is larger than the {max_bytes} bytes {setting} allows "
                  f"for it; not read")
        self.size = size
        self.max_frame_bytes = max_bytes
        self.api_key = api_key


class MalformedFrameError(WireProtocolError):
    """The request header or body does not decode with the kafka-python schema.

    The header fields are None when the header itself could not be read.
    """

    def __init__(self, message: str, *, api_key: int | None = None,
                 api_version: int | None = None,
                 correlation_id: int | None = None) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class UnsupportedRequestError(WireProtocolError):
    """The api key is not served, or its version is outside the served range."""

    def __init__(self, message: str, *, api_key: int, api_version: int,
                 correlation_id: int, client_id: str | None) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id


class MessageBuildError(WireProtocolError):
    """Plain values do not fit the message schema (unknown field, bad value)."""


class ResponseEncodingError(MessageBuildError):
    """A handler's response does not match its request or cannot be encoded."""


@dataclass(frozen=True)
class ApiSpec:
    """One API the daemon serves: its generated classes and served versions."""

    request_class: type[ApiMessage]
    response_class: type[ApiMessage]
    min_version: int
    max_version: int

    def __post_init__(self) -> None:
        key = self.request_class.API_KEY
        if self.response_class.API_KEY != key:
            raise ValueError(
                f"{self.request_class.__name__} (key {key}) and "
                f"{self.response_class.__name__} (key {self.response_class.API_KEY}) "
                "belong to different APIs; pair a request with its own response")
        low = max(self.request_class.valid_versions[0], self.response_class.valid_versions[0])
        high = min(self.request_class.max_version, self.response_class.max_version)
        if not low <= self.min_version <= self.max_version <= high:
            raise ValueError(
                f"{self.name} versions {self.min_version}-{self.max_version} are not "
                f"within {low}-{high}, the versions kafka-python's schema declares; "
                "advertise only versions the generated classes can decode")

    @property
    def api_key(self) -> int:
        return self.request_class.API_KEY

    @property
    def name(self) -> str:
        return ApiKey(self.api_key).name

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


class ApiRegistry:
    """The APIs a server serves, by api key. Immutable once built."""

    def __init__(self, specs: Iterable[ApiSpec]) -> None:
        by_key: dict[int, ApiSpec] = {}
        for spec in specs:
            if spec.api_key in by_key:
                raise ValueError(f"{spec.name} (key {spec.api_key}) is listed twice")
            by_key[spec.api_key] = spec
        if ApiKey.ApiVersions not in by_key:
            raise ValueError("every Kafka server must serve ApiVersions; add its ApiSpec")
        self._by_key = dict(sorted(by_key.items()))

    def get(self, api_key: int) -> ApiSpec | None:
        return self._by_key.get(api_key)

    def __getitem__(self, api_key: int) -> ApiSpec:
        return self._by_key[api_key]

    def __contains__(self, api_key: object) -> bool:
        return api_key in self._by_key

    def __iter__(self) -> Iterator[ApiSpec]:
        return iter(self._by_key.values())

    def __len__(self) -> int:
        return len(self._by_key)

    def extended(self, *specs: ApiSpec) -> ApiRegistry:
        """A new registry with `specs` added (replacing same-key entries)."""
        replaced = {spec.api_key for spec in specs}
        return ApiRegistry([s for s in self if s.api_key not in replaced] + list(specs))

    def without(self, *api_keys: int) -> ApiRegistry:
        """A new registry without ``api_keys``."""
        return ApiRegistry([s for s in self if s.api_key not in api_keys])

    def version_table(self) -> dict[int, tuple[int, int]]:
        """{api_key: (min_version, max_version)}, as advertised."""
        return {s.api_key: (s.min_version, s.max_version) for s in self}


# Kafka 3.9 ranges intersected with the versions kafka-python 3.0.12 declares.
# FindCoordinator stops at v4 (v5+ add transaction/share-group semantics) and
# ApiVersions at v3: a v4 ApiVersions request gets the KIP-511 reply and the
# client retries at v3.
COORDINATOR_APIS = ApiRegistry([
    ApiSpec(OffsetCommitRequest, OffsetCommitResponse, 2, 9),
    ApiSpec(OffsetFetchRequest, OffsetFetchResponse, 1, 9),
    ApiSpec(FindCoordinatorRequest, FindCoordinatorResponse, 0, 4),
    ApiSpec(JoinGroupRequest, JoinGroupResponse, 0, 9),
    ApiSpec(HeartbeatRequest, HeartbeatResponse, 0, 4),
    ApiSpec(LeaveGroupRequest, LeaveGroupResponse, 0, 5),
    ApiSpec(SyncGroupRequest, SyncGroupResponse, 0, 5),
    ApiSpec(DescribeGroupsRequest, DescribeGroupsResponse, 0, 5),
    ApiSpec(ListGroupsRequest, ListGroupsResponse, 0, 5),
    ApiSpec(ApiVersionsRequest, ApiVersionsResponse, 0, 3),
    ApiSpec(DeleteGroupsRequest, DeleteGroupsResponse, 0, 2),
    ApiSpec(ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, 0, 1),
    ApiSpec(ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, 0, 1),
])

# A SASL listener's login APIs (docs/security-design.md rule 3): SaslHandshake v1 only (v0's raw
# tokens are gone in Kafka 4 too), SaslAuthenticate as Kafka 3.9 serves it.
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_APIS = (ApiSpec(SaslHandshakeRequest, SaslHandshakeResponse, 1, 1),
             ApiSpec(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2))
SASL_COORDINATOR_APIS = COORDINATOR_APIS.extended(*SASL_APIS)


@dataclass(frozen=True)
class DecodedRequest:
    """A request as read off the wire.

    `request` is the generated message (e.g. `JoinGroupRequest`) decoded at
    `api_version`. It is None only when the codec answered the request itself:
    then `immediate_response` holds that answer (the KIP-511 ApiVersions reply)
    and the handler is not consulted.
    """

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header: RequestHeader
    request: ApiMessage | None
    spec: ApiSpec
    immediate_response: ApiMessage | None = None

    @property
    def api_name(self) -> str:
        return self.spec.name

    @property
    def response_version(self) -> int:
        """The version the response is encoded at (0 for the KIP-511 reply)."""
        return 0 if self.immediate_response is not None else self.api_version


def frame_size(prefix: bytes, max_frame_bytes: int) -> int:
    """The payload size announced by a 4-byte size prefix, checked against the limit."""
    size, _ = Int32.decode_from(prefix, 0)
    if size < 0 or size > max_frame_bytes:
        raise FrameSizeError(size, max_frame_bytes)
    return size


def decode_request(frame: bytes, apis: ApiRegistry = COORDINATOR_APIS) -> DecodedRequest:
    """Decode one request; `frame` is the payload after the 4-byte size prefix."""
    header, offset = decode_request_header(frame, flexible=_has_flexible_header(frame, apis))
    spec = apis.get(header.request_api_key)
    if spec is None:
        raise _unsupported(header, "api key is not served by this server")
    version = header.request_api_version
    if not spec.supports(version):
        if spec.api_key == ApiKey.ApiVersions:
            return _kip511_request(header, spec, apis)
        raise _unsupported(
            header, f"version is outside the served range {spec.min_version}-{spec.max_version}")
    request = _decode_body(spec, header, frame, offset)
    return DecodedRequest(
        api_key=spec.api_key, api_version=version, correlation_id=header.correlation_id,
        client_id=header.client_id, header=header, request=request, spec=spec)


@dataclass(frozen=True, slots=True)
class EncodedResponse:
    """A response encoded ahead of time by `encoded_response`; `encode_response`
    hands back its frame. `message` is what was encoded; `error_code` is its
    error (`zkcoord.server.response_errors`), found where it was encoded, so
    that an answer encoded in a worker thread is not walked again on the
    event loop."""

    message: ApiMessage
    correlation_id: int
    frame: bytes
    error_code: int = 0


def encoded_response(decoded: DecodedRequest, response: ApiMessage) -> EncodedResponse:
    """`response` encoded now for `decoded` (so that the encoding can happen
    while the daemon waits for something else)."""
    return EncodedResponse(response, decoded.correlation_id, encode_response(decoded, response),
                           first_error_code(response))


def encode_response(decoded: DecodedRequest, response: ApiMessage | EncodedResponse) -> bytes:
    """The full response frame (size prefix, response header, body) for `decoded`.

    Sets `response`'s version as a side effect when it has none.
    """
    if type(response) is EncodedResponse:
        if response.correlation_id != decoded.correlation_id:
            raise ResponseEncodingError(
                f"{decoded.api_name} v{decoded.api_version} (correlation id {decoded.correlation_id}) "
                f"was answered with a response encoded for correlation id {response.correlation_id}")
        return response.frame
    expected = decoded.spec.response_class
    version = decoded.response_version
    if not isinstance(response, expected):
        raise ResponseEncodingError(
            f"{decoded.api_name} v{decoded.api_version} (correlation id "
            f"{decoded.correlation_id}) needs a {expected.__name__}, got "
            f"{type(response).__name__}; return the response class of the request's API")
    if response.version is not None and response.version != version:
        raise ResponseEncodingError(
            f"{expected.__name__} was built at v{response.version} but the request "
            f"needs v{version}; build it with decoded.response_version")
    body = _CONSTANT_BODIES.get(id(response))
    if body is not None:
        return _frame_of(body, decoded.correlation_id)
    return encode_response_frame(response, version, decoded.correlation_id)


def encode_response_frame(response: ApiMessage, version: int, correlation_id: int) -> bytes:
    """The full frame (size prefix, response header, body) of ``response`` at
    ``version``; ResponseEncodingError when the values do not fit the schema.
    Sets ``response``'s version as a side effect when it has none."""
    try:
        # The API_VERSION setter assumes a *request* header, so the version is
        # set before any header exists.
        if response.version is None:
            response.API_VERSION = version
        encoders = _response_encoders(type(response), version)
        if encoders is None:  # the class chooses its own header (ApiVersions): kafka-python's path
            response.with_header(correlation_id=correlation_id)
            return bytes(response.encode(header=True, framed=True))
        return _encode_frame(encoders, ResponseHeader(correlation_id=correlation_id), response)
    except Exception as exc:  # generated encoders raise struct.error, TypeError, ...
        raise ResponseEncodingError(
            f"cannot encode {type(response).__name__} v{version} (correlation id "
            f"{correlation_id}): {exc!r}; check the field types") from exc


_RESPONSE_DECODERS: dict[tuple[type, int], Callable[..., Any]] = {}
_RESPONSE_HEADER_DECODERS = {
    flexible: ResponseHeader._struct.compiled_decode_from(
        ResponseHeader._flexible_versions[0] if flexible else ResponseHeader._valid_versions[0],
        compact=False, tagged=flexible, data_class=ResponseHeader)
    for flexible in (False, True)}


def decode_response_frame(frame: bytes | bytearray | memoryview, response_class: type[ApiMessage],
                          version: int) -> tuple[int, ApiMessage]:
    """(correlation id, message) of a whole response frame (size prefix
    included) of ``response_class`` at ``version``, with kafka-python's
    compiled decoders; MalformedFrameError when it does not decode exactly.
    Not for ApiVersions, whose header and error answers follow other rules."""
    view = memoryview(frame)
    try:
        header_decoder = _RESPONSE_HEADER_DECODERS[response_class.flexible_version_q(version)]
        header, pos = header_decoder(view, FRAME_SIZE_PREFIX_BYTES)
        key = (response_class, version)
        decoder = _RESPONSE_DECODERS.get(key)
        if decoder is None:
            flexible = response_class.flexible_version_q(version)
            decoder = _RESPONSE_DECODERS[key] = response_class._struct.compiled_decode_from(
                version, compact=flexible, tagged=flexible, data_class=response_class[None])
        message, end = decoder(view, pos)
    except Exception as exc:  # struct.error, IndexError, UnicodeDecodeError, ...
        raise MalformedFrameError(f"{response_class.__name__} v{version} ({len(view)} bytes) does not "
                                  f"decode: {exc!r}") from exc
    if end != len(view):
        raise MalformedFrameError(f"{response_class.__name__} v{version} is {len(view)} bytes but decodes "
                                  f"to {end}")
    return header.correlation_id, message


_Encoder = Callable[[Any, Any], None]
_RESPONSE_ENCODERS: dict[tuple[type, int], tuple[_Encoder, _Encoder] | None] = {}


def _response_encoders(response_class: type[ApiMessage], version: int) -> tuple[_Encoder, _Encoder] | None:
    """kafka-python's compiled (header, body) encoders of a response at `version`,
    as ApiMessage.encode picks them; None when the class overrides encode_header."""
    key = (response_class, version)
    if key not in _RESPONSE_ENCODERS:
        encoders = None
        if (response_class.encode_header is ApiMessage.encode_header
                and response_class.encode_header_into is ApiMessage.encode_header_into):
            flexible = response_class.flexible_version_q(version)
            header_version = ResponseHeader._flexible_versions[0] if flexible else ResponseHeader._valid_versions[0]
            encoders = (ResponseHeader._struct.compiled_encode_into(header_version, compact=False, tagged=flexible),
                        response_class._struct.compiled_encode_into(version, compact=flexible, tagged=flexible))
        _RESPONSE_ENCODERS[key] = encoders
    return _RESPONSE_ENCODERS[key]


def _encode_frame(encoders: tuple[_Encoder, _Encoder], header: ResponseHeader, body: ApiMessage) -> bytes:
    """What ApiMessage.encode(header=True, framed=True) writes, without its generic header path."""
    encode_header, encode_body = encoders
    with EncodeBufferPool.acquire() as out:
        out.pos = FRAME_SIZE_PREFIX_BYTES
        encode_header(header, out)
        encode_body(body, out)
        end = out.pos
        out.pos = 0
        Int32.encode_into(out, end - FRAME_SIZE_PREFIX_BYTES)
        out.pos = end
        with memoryview(out.buf) as view:  # one copy, not result()'s two
            return bytes(view[:end])


# cached_response: (response class, version, key) -> the shared message;
# id(message) -> (its encoded response header without the correlation id,
# its encoded body). The messages are kept alive by the first map, so their
# ids stay theirs; both maps are emptied together when the first is full.
_CONSTANTS: dict[tuple, ApiMessage] = {}
_CONSTANT_BODIES: dict[int, tuple[bytes, bytes]] = {}
_MAX_CONSTANTS = 4096


def constant_response(decoded: DecodedRequest, **fields: Any) -> ApiMessage:
    """The response answering `decoded`, built from plain hashable values
    (no nested structs) and shared by every request asking the same: it is
    built and encoded by kafka-python once, and `encode_response` only puts a
    header in front. The message must not be changed."""
    return cached_response(decoded, tuple(fields.items()), lambda: fields)


def cached_response(decoded: DecodedRequest, key: Any, fields: Callable[[], Mapping[str, Any]]) -> ApiMessage:
    """`constant_response` for any response: `key` (hashable) stands for the
    field values, which `fields()` gives when the response is not cached yet.
    Equal keys must mean equal responses."""
    cache_key = (decoded.spec.response_class, decoded.response_version, key)
    message = _CONSTANTS.get(cache_key)
    if message is None:
        message = response_for(decoded, **fields())
        encoders = _response_encoders(type(message), decoded.response_version)
        if encoders is None:
            return message  # encoded the ordinary way
        if len(_CONSTANTS) >= _MAX_CONSTANTS:
            _CONSTANTS.clear()
            _CONSTANT_BODIES.clear()
        _CONSTANTS[cache_key] = message
        _CONSTANT_BODIES[id(message)] = _constant_parts(encoders, message)
    return message


def _constant_parts(encoders: tuple[_Encoder, _Encoder], message: ApiMessage) -> tuple[bytes, bytes]:
    """(header after its correlation id, body) as kafka-python encodes them.
    Response headers v0 and v1 both start with the int32 correlation id."""
    frame = _encode_frame(encoders, ResponseHeader(correlation_id=0), message)
    header_end = len(_encode_frame((encoders[0], _no_body), ResponseHeader(correlation_id=0), message))
    start = FRAME_SIZE_PREFIX_BYTES + Int32.size
    return frame[start:header_end], frame[header_end:]


def _no_body(message: Any, out: Any) -> None:
    pass


def _frame_of(parts: tuple[bytes, bytes], correlation_id: int) -> bytes:
    header_rest, body = parts
    return b"".join((Int32.encode(Int32.size + len(header_rest) + len(body)), Int32.encode(correlation_id),
                     header_rest, body))


def api_versions_response(version: int, apis: ApiRegistry = COORDINATOR_APIS, *,
                          error_code: int = 0, throttle_time_ms: int = 0,
                          supported_features: list[dict] | None = None) -> ApiMessage:
    """An ApiVersionsResponse at `version` listing every API in `apis`, and
    from v3 on the `supported_features` given ({name, min_version,
    max_version}; a tagged field older versions do not carry)."""
    entries = [{"api_key": s.api_key, "min_version": s.min_version, "max_version": s.max_version}
               for s in apis]
    extra = {"supported_features": supported_features} if supported_features and version >= 3 else {}
    return build_message(ApiVersionsResponse, version, error_code=error_code,
                         api_keys=entries, throttle_time_ms=throttle_time_ms, **extra)


def build_response(api_key: int, version: int, /, *, apis: ApiRegistry = COORDINATOR_APIS,
                   **fields: Any) -> ApiMessage:
    """The response message of `api_key` at `version`, built from plain values."""
    spec = apis.get(api_key)
    if spec is None or not spec.supports(version):
        raise MessageBuildError(f"api key {api_key} v{version} is not served by this registry")
    return build_message(spec.response_class, version, **fields)


def response_for(decoded: DecodedRequest, **fields: Any) -> ApiMessage:
    """The response message answering `decoded`, built from plain values."""
    return build_message(decoded.spec.response_class, decoded.response_version, **fields)


def build_message(message_class: type[ApiMessage], version: int, **fields: Any) -> ApiMessage:
    """Build a generated message at `version` from plain Python values.

    Nested structs may be given as mappings (converted to the generated nested
    classes) or as instances of those classes. Fields the schema knows but
    `version` does not carry are dropped, so one set of values can serve every
    version; names the schema does not know raise `MessageBuildError`.
    Unset fields take the schema default.
    """
    if not 0 <= version <= message_class.max_version:
        raise MessageBuildError(
            f"{message_class.__name__} has no v{version} (max v{message_class.max_version})")
    kwargs = _struct_kwargs(message_class.fields, fields, version, message_class.__name__)
    return message_class(version=version, **kwargs)


# (kind, field) per field name, per (schema, version); kind: None when the
# version lacks the field, else _PLAIN, _STRUCT or _STRUCT_ARRAY.
_PLAIN, _STRUCT, _STRUCT_ARRAY = 0, 1, 2
_FIELD_TABLES: dict[tuple[int, int], tuple[Mapping[str, Any], dict[str, tuple[int | None, Any]]]] = {}


def _field_table(schema: Mapping[str, Any], version: int) -> dict[str, tuple[int | None, Any]]:
    key = (id(schema), version)
    found = _FIELD_TABLES.get(key)
    if found is None or found[0] is not schema:
        table = {}
        for name, field in schema.items():
            kind = None
            if field.for_version_q(version):
                kind = _STRUCT if field.is_struct() else _STRUCT_ARRAY if field.is_struct_array() else _PLAIN
            table[name] = (kind, field)
        found = _FIELD_TABLES[key] = (schema, table)  # the schema is kept so its id is not reused
    return found[1]


def _struct_kwargs(schema: Mapping[str, Any], values: Mapping[str, Any], version: int,
                   where: str) -> dict[str, Any]:
    table = _field_table(schema, version)
    kwargs = {}
    for name, value in values.items():
        entry = table.get(name)
        if entry is None:
            raise MessageBuildError(
                f"{where} has no field {name!r}; known fields: {', '.join(schema)}")
        kind, field = entry
        if kind is None:
            continue
        if value is None or kind == _PLAIN:
            kwargs[name] = value
        elif kind == _STRUCT:
            kwargs[name] = _nested(field, value, version, f"{where}.{name}")
        else:
            kwargs[name] = [_nested(field, item, version, f"{where}.{name}[{i}]")
                            for i, item in enumerate(value)]
    return kwargs


def _nested(field: Any, value: Any, version: int, where: str) -> Any:
    if not isinstance(value, Mapping):
        return value
    return field.data_class(version=version, **_struct_kwargs(field.fields, value, version, where))


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
    if end != len(frame):
        state = "is truncated" if end > len(frame) else f"has {len(frame) - end} trailing bytes"
        raise _malformed_body(spec, header, frame, offset, state)
    null_path = _first_null(null_checks, request, "") if null_checks else None
    if null_path is not None:
        raise _malformed_body(spec, header, frame, offset, f"non-nullable field {null_path} is null",
                              separator=": ")
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
    for name, forbidden, is_array, children in checks:
        value = getattr(obj, name)
        if value is None:
            if forbidden:
                return path + name
            continue
        if not children:
            continue
        if is_array:
            for i, child in enumerate(value):
                found = _first_null(children, child, f"{path}{name}[{i}].")
                if found is not None:
                    return found
        else:
            found = _first_null(children, value, f"{path}{name}.")
            if found is not None:
                return found
    return None


def _unsupported(header: RequestHeader, reason: str) -> UnsupportedRequestError:
    key, version = header.request_api_key, header.request_api_version
    try:
        name = ApiKey(key).name
    except ValueError:
        name = "unknown API"
    return UnsupportedRequestError(
        f"{name} (key {key}) v{version} from client {header.client_id!r} "
        f"(correlation id {header.correlation_id}): {reason}",
        api_key=key, api_version=version, correlation_id=header.correlation_id,
        client_id=header.client_id)


def _kip511_request(header: RequestHeader, spec: ApiSpec, apis: ApiRegistry) -> DecodedRequest:
    # The body of an unknown ApiVersions version is not read: its layout is
    # unknown to us, and the v0 reply tells the client which version to retry.
    reply = api_versions_response(0, apis, error_code=UNSUPPORTED_VERSION)
    return DecodedRequest(
        api_key=spec.api_key, api_version=header.request_api_version,
        correlation_id=header.correlation_id, client_id=header.client_id,
        header=header, request=None, spec=spec, immediate_response=reply)
