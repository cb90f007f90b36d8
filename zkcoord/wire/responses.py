"""Responses as the wire carries them: encoded, cached, and decoded again.

This module owns turning a response message into its frame (size prefix,
response header, body) for the request it answers (:func:`encode_response`),
encoding ahead of time (:func:`encoded_response`), the cache of answers
that are the same for every request but the correlation id
(:func:`constant_response`, :func:`cached_response`), and decoding a whole
response frame (:func:`decode_response_frame`: the gateway reads the
brokers' answers it rewrites, the Kafka client login reads its own).

Rules:

1. Responses use response header v1 (tagged fields) for flexible versions
   and v0 otherwise; ApiVersions responses always use header v0.
2. kafka-python's compiled encoders of (message class, version) are looked
   up once; its generic header path costs several times more. A cached
   response is encoded by kafka-python once, and each frame is those bytes
   behind a fresh size prefix and correlation id (one ``struct.pack``),
   once the cached message is known to answer the request's API and
   version.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_header import ResponseHeader
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.codecs import Int32
from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBufferPool

from zkcoord.wire.errors import MalformedFrameError, ResponseEncodingError
from zkcoord.wire.framing import FRAME_SIZE_PREFIX_BYTES
from zkcoord.wire.messages import build_message
from zkcoord.wire.requests import DecodedRequest
from zkcoord.wire.response_errors import first_error_code

__all__ = ["EncodedResponse", "encoded_response", "encode_response", "encode_response_frame",
           "decode_response_frame", "constant_response", "cached_response", "response_for"]


@dataclass(frozen=True, slots=True)
class EncodedResponse:
    """A response encoded ahead of time by `encoded_response`; `encode_response`
    hands back its frame. `message` is what was encoded (None when it was not
    kept: a big answer's objects are then freed once encoded); `error_code` is
    its error (:mod:`.response_errors`), found where it was encoded, so
    that an answer encoded in a worker thread is not walked again on the
    event loop."""

    message: ApiMessage | None
    correlation_id: int
    frame: bytes
    error_code: int = 0


def encoded_response(decoded: DecodedRequest, response: ApiMessage, keep_message: bool = True) -> EncodedResponse:
    """`response` encoded now for `decoded` (so that the encoding can happen
    while the daemon waits for something else); without `keep_message`, the
    encoded response does not hold `response`."""
    return EncodedResponse(response if keep_message else None, decoded.correlation_id,
                           encode_response(decoded, response), first_error_code(response))


def encode_response(decoded: DecodedRequest, response: ApiMessage | EncodedResponse) -> bytes:
    """The full response frame (size prefix, response header, body) for `decoded`.

    Sets `response`'s version as a side effect when it has none.
    """
    parts = _CONSTANT_BODIES.get(id(response))
    if parts is not None and parts[0] is decoded.spec.response_class and parts[1] == decoded.api_version \
            and decoded.immediate_response is None:  # a cached answer to this API and version (rule 2)
        return _SIZE_AND_ID.pack(parts[2], decoded.correlation_id) + parts[3]
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
    parts = _CONSTANT_BODIES.get(id(response))
    if parts is not None:
        return _SIZE_AND_ID.pack(parts[2], decoded.correlation_id) + parts[3]
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
# id(message) -> (response class, version, the frame's size, the frame after
# its size prefix and correlation id: the rest of the response header, then
# the body). The messages are kept alive by the first map, so their ids stay
# theirs; both maps are emptied together when the first is full.
_CONSTANTS: dict[tuple, ApiMessage] = {}
_CONSTANT_BODIES: dict[int, tuple[type, int, int, bytes]] = {}
_SIZE_AND_ID = struct.Struct(">ii")  # a frame's size prefix and its correlation id
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
        header_rest, body = _constant_parts(encoders, message)
        _CONSTANT_BODIES[id(message)] = (decoded.spec.response_class, decoded.response_version,
                                         Int32.size + len(header_rest) + len(body), header_rest + body)
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


def response_for(decoded: DecodedRequest, **fields: Any) -> ApiMessage:
    """The response message answering `decoded`, built from plain values."""
    return build_message(decoded.spec.response_class, decoded.response_version, **fields)
