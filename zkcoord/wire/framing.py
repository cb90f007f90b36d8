"""Kafka's framing: the 4-byte size prefix, and whole request frames cut
from a byte stream.

Every Kafka request and response travels as a big-endian int32 size, then
that many bytes. This module owns reading that prefix against a limit
(:func:`frame_size`), the fixed start every request header version shares
(api key, api version, correlation id: :func:`request_prefix`), and
:class:`RequestFrames`, which cuts whole frames out of what a socket gives.
Nothing here decodes a header or a body (:mod:`.requests` does).

A frame cut by :class:`RequestFrames` is the whole frame, its size prefix
included: that is what a proxy passes on unchanged. The daemon's listener
(:mod:`zkcoord.server.transport`) cuts its frames in its own loop, with the
same prefix rules, because it hands each payload straight to the decoder.
"""

from __future__ import annotations

from collections.abc import Callable

from kafka.protocol.schemas.fields.codecs import Int16, Int32

from zkcoord.wire.errors import FrameSizeError, MalformedFrameError, RequestTooLargeError

__all__ = ["FRAME_SIZE_PREFIX_BYTES", "REQUEST_PREFIX_BYTES", "API_KEY_END", "frame_size", "api_key_at",
           "request_prefix", "RequestFrames"]

FRAME_SIZE_PREFIX_BYTES = 4
API_KEY_END = FRAME_SIZE_PREFIX_BYTES + 2  # the size prefix and the api key
REQUEST_PREFIX_BYTES = FRAME_SIZE_PREFIX_BYTES + 8  # size, api key, api version, correlation id
_COMPACT_BUFFER_BYTES = 64 * 1024


def frame_size(prefix: bytes, max_frame_bytes: int) -> int:
    """The payload size announced by a 4-byte size prefix, checked against the limit."""
    size, _ = Int32.decode_from(prefix, 0)
    if size < 0 or size > max_frame_bytes:
        raise FrameSizeError(size, max_frame_bytes)
    return size


def api_key_at(buffer: bytes | bytearray, pos: int) -> int:
    """The api key of the request frame starting at ``pos`` (its size prefix
    first); the caller has checked that ``API_KEY_END`` bytes are there."""
    return int.from_bytes(buffer[pos + FRAME_SIZE_PREFIX_BYTES:pos + API_KEY_END], "big", signed=True)


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


class RequestFrames:
    """Cuts whole frames out of the bytes a client sends.

    ``feed`` what the socket gave, then take frames with ``next_frame`` until
    it returns None. A size prefix that is negative or above
    ``max_frame_bytes`` raises FrameSizeError before the frame is buffered,
    so a client cannot make the listener hold more than one frame's worth;
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
        if self._limit_of is not None and available >= API_KEY_END:
            api_key = api_key_at(buffer, pos)
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
        # Moving the unread bytes to the front costs a copy: done when nothing
        # is left, or when the read part is big enough to be worth it.
        if self._pos and (self._pos == len(self._buffer) or self._pos >= _COMPACT_BUFFER_BYTES):
            del self._buffer[:self._pos]
            self._pos = 0
