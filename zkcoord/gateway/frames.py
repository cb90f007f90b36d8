"""Kafka frames as the gateway handles them: whole request frames cut from a
client's byte stream, and the few header fields it reads to route them.

The gateway forwards most frames without decoding them. What it reads of a
request is the fixed start every request header version shares (api key,
api version, correlation id) and, for Produce, the ``acks`` field, since a
Produce with ``acks=0`` gets no answer and so must not wait for one. Both
are read with kafka-python's field codecs; nothing here writes a frame.

A frame here is the whole frame, its 4-byte size prefix included: that is
what goes to the broker unchanged.
"""

from __future__ import annotations

import io
from collections.abc import Callable

from kafka.protocol.producer import ProduceRequest
from kafka.protocol.schemas.fields.codecs import Int16, Int32, UnsignedVarInt32

from zkcoord.server.codec import (
    FRAME_SIZE_PREFIX_BYTES, FrameSizeError, MalformedFrameError, RequestTooLargeError, decode_request_header,
    frame_size,
)

__all__ = ["RequestFrames", "request_prefix", "produce_expects_response", "REQUEST_PREFIX_BYTES"]

REQUEST_PREFIX_BYTES = FRAME_SIZE_PREFIX_BYTES + 8  # size, api key, api version, correlation id
_COMPACT_BUFFER_BYTES = 64 * 1024
_API_KEY_END = FRAME_SIZE_PREFIX_BYTES + 2  # the size prefix and the api key


class RequestFrames:
    """Cuts whole frames out of the bytes a client sends.

    ``feed`` what the socket gave, then take frames with ``next_frame`` until
    it returns None. A size prefix that is negative or above
    ``max_frame_bytes`` raises FrameSizeError before the frame is buffered,
    so a client cannot make the gateway hold more than one frame's worth;
    with ``limit_of``, a frame over its API's limit raises RequestTooLargeError
    as soon as its size and API key are read.
    """

    __slots__ = ("_buffer", "_pos", "_max_frame_bytes", "_limit_of")

    def __init__(self, max_frame_bytes: int,
                 limit_of: Callable[[int], tuple[int, str] | None] | None = None) -> None:
        self._buffer = bytearray()
        self._pos = 0
        self._max_frame_bytes = max_frame_bytes
        self._limit_of = limit_of  # api key -> (its largest frame, the setting), None: max_frame_bytes

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def next_frame(self) -> bytes | None:
        buffer, pos = self._buffer, self._pos
        available = len(buffer) - pos
        if available < FRAME_SIZE_PREFIX_BYTES:
            self._compact()
            return None
        size = frame_size(buffer[pos:pos + FRAME_SIZE_PREFIX_BYTES], self._max_frame_bytes)
        if self._limit_of is not None and available >= _API_KEY_END:
            api_key = int.from_bytes(buffer[pos + FRAME_SIZE_PREFIX_BYTES:pos + _API_KEY_END], "big", signed=True)
            limit = self._limit_of(api_key)
            if limit is not None and size > limit[0]:  # refused before the rest of it is buffered
                raise RequestTooLargeError(size, limit[0], api_key, limit[1])
        end = pos + FRAME_SIZE_PREFIX_BYTES + size
        if end > len(buffer):
            self._compact()
            return None
        frame = bytes(buffer[pos:end])
        self._pos = end
        return frame

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer) - self._pos

    def _compact(self) -> None:
        if self._pos and (self._pos == len(self._buffer) or self._pos >= _COMPACT_BUFFER_BYTES):
            del self._buffer[:self._pos]
            self._pos = 0


def request_prefix(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a whole request frame; a frame
    too short for them is MalformedFrameError."""
    if len(frame) < REQUEST_PREFIX_BYTES:
        raise MalformedFrameError(f"a {len(frame) - FRAME_SIZE_PREFIX_BYTES}-byte request is shorter than "
                                  "the 8 bytes every request header starts with")
    api_key, pos = Int16.decode_from(frame, FRAME_SIZE_PREFIX_BYTES)
    api_version, pos = Int16.decode_from(frame, pos)
    correlation_id, _ = Int32.decode_from(frame, pos)
    return api_key, api_version, correlation_id


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


__all__ += ["FrameSizeError", "MalformedFrameError"]
