"""The wire's errors: what a frame, a request or a response can get wrong.

Every module of :mod:`zkcoord.wire` raises these, and the connection code
of the daemon (:mod:`zkcoord.server.transport`) and of the gateway
(:mod:`zkcoord.gateway.connection`) reacts to them: a request that raises
one closes its connection, never the listener. The tree (all are
:class:`~zkcoord.errors.ZkcoordError`)::

    WireProtocolError            base class
    ├── FrameSizeError           size prefix negative or above the limit
    │   └── RequestTooLargeError the frame is above its API's limit
    ├── MalformedFrameError      header or body does not decode
    ├── UnsupportedRequestError  api key not served, or version out of range
    └── MessageBuildError        a message cannot be built or encoded
        └── ResponseEncodingError  the response does not fit the request
"""

from __future__ import annotations

from kafka.protocol.api_key import ApiKey

from zkcoord.errors import ZkcoordError

__all__ = ["WireProtocolError", "FrameSizeError", "RequestTooLargeError", "MalformedFrameError",
           "UnsupportedRequestError", "MessageBuildError", "ResponseEncodingError", "api_name"]


def api_name(api_key: int, unknown: str | None = None) -> str:
    """Kafka's name of an api key (``JoinGroup``); ``unknown`` (default
    ``api key <n>``) for a key Kafka does not define."""
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api key {api_key}" if unknown is None else unknown


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
        WireProtocolError.__init__(
            self, f"a {size}-byte {api_name(api_key)} request is larger than the {max_bytes} bytes {setting} "
                  f"allows for it; not read")
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
