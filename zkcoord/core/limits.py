"""What one request may ask of a daemon: the pure limit rules.

This module owns the checks that keep one client's request from costing
other groups their service, as numbers and pure functions (no I/O, no
clock). The adapters apply them: the listeners (:mod:`zkcoord.server.transport`,
:mod:`zkcoord.gateway.connection`) before a frame is read whole, :mod:`zkcoord.server.manager` before an offset is
written.

Rules (Kafka's name and default where Kafka has one):

1. **offset.metadata.max.bytes** (4096). An OffsetCommit partition whose
   metadata is longer gets OFFSET_METADATA_TOO_LARGE and nothing is written
   for it; the request's other partitions are committed. As Kafka, the
   length is the string's length in UTF-16 code units (Java's
   ``String.length()``), whatever its UTF-8 size.
2. A topic name longer than Kafka's 249 characters names no topic: that
   partition gets UNKNOWN_TOPIC_OR_PARTITION and nothing is written for it.
   With rule 1 this bounds what one partition can add to a ZooKeeper write
   (:func:`max_partition_write_bytes`), so no single partition can make a
   multi exceed ZooKeeper's packet limit (jute.maxbuffer, 1 MB).
3. **Request size per API** (:func:`request_max_bytes`). Kafka accepts any
   request up to socket.request.max.bytes (100 MB) because a broker's
   Produce needs it. A daemon serves only group APIs, and kafka-python
   decodes a request at about 0.2 µs per byte of an OffsetCommit and 1.7 µs
   per byte of a DescribeGroups of empty ids (3,000,000 ids, 6 MB: over 5 s
   and more than a gigabyte of objects). So group APIs whose requests grow
   with partitions or members (OffsetCommit, OffsetFetch, JoinGroup,
   SyncGroup) may be up to ``group_request_max_bytes`` (8 MiB: over 400,000
   partitions of an OffsetCommit), and every other one (lists of group ids,
   Heartbeat, LeaveGroup, FindCoordinator, ApiVersions) up to
   ``group_admin_request_max_bytes`` (1 MiB: over 30,000 group ids of 30
   characters). A larger frame closes the connection before it is read
   whole, as Kafka closes one over socket.request.max.bytes. Frames of a
   few kilobytes are decoded in the callback that read them; larger ones in
   a worker thread (:data:`INLINE_DECODE_BYTES`), so the event loop keeps
   answering other groups meanwhile.
4. **connections.max.idle.ms** (600000). A connection with nothing read or
   written for that long and no request in flight is closed, as Kafka's
   SocketServer does; so is one whose unfinished frame started that long
   ago (a client trickling a frame a byte at a time is not busy).
5. **partial_requests_max_bytes** (64 MiB, zkcoord's own). The bytes of
   unanswered frames all connections of a listener hold together. The
   connection whose bytes would go over it is closed, never another one.
   Kafka's nearest setting, queued.max.request.bytes, defaults to
   unbounded and stops reading every socket when full, which would let one
   client stall all others.
"""

from __future__ import annotations

from zkcoord.core.api_keys import JOIN_GROUP, OFFSET_COMMIT, OFFSET_FETCH, SYNC_GROUP
from zkcoord.core.errors import ErrorCode

__all__ = [
    "DEFAULT_OFFSET_METADATA_MAX_BYTES", "DEFAULT_CONNECTIONS_MAX_IDLE_MS", "DEFAULT_SOCKET_REQUEST_MAX_BYTES",
    "DEFAULT_GROUP_REQUEST_MAX_BYTES", "DEFAULT_GROUP_ADMIN_REQUEST_MAX_BYTES",
    "DEFAULT_PARTIAL_REQUESTS_MAX_BYTES", "INLINE_DECODE_BYTES", "MAX_TOPIC_NAME_LENGTH", "LARGE_API_KEYS",
    "RequestLimits", "utf16_length", "offset_commit_error", "max_partition_write_bytes", "idle_expired",
]

DEFAULT_OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes
MAX_OFFSET_METADATA_MAX_BYTES = 100_000  # rule 2: one partition's write stays far below jute.maxbuffer
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000  # Kafka's connections.max.idle.ms
DEFAULT_SOCKET_REQUEST_MAX_BYTES = 104_857_600  # Kafka's socket.request.max.bytes
DEFAULT_GROUP_REQUEST_MAX_BYTES = 8 * 1024 * 1024
DEFAULT_GROUP_ADMIN_REQUEST_MAX_BYTES = 1024 * 1024
DEFAULT_PARTIAL_REQUESTS_MAX_BYTES = 64 * 1024 * 1024
# Decoding this many bytes inline costs at most about 30 ms (1.7 µs per byte of the densest request,
# DescribeGroups of empty ids); larger frames are decoded in a worker thread.
INLINE_DECODE_BYTES = 16 * 1024
# Requests of one connection answered in one callback, at most: a client may send thousands in one write
# (a Heartbeat is 60 bytes), each answered at once for 10-50 µs; the rest wait for a callback of their own,
# after the other connections' (the transport's rule 10).
FRAMES_PER_TURN = 16
MAX_TOPIC_NAME_LENGTH = 249  # Kafka's Topic.MAX_NAME_LENGTH

# Requests that grow with partitions or members.
LARGE_API_KEYS = frozenset({OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, SYNC_GROUP})

# What one offset op costs in a multi beyond its path and data (op header, ACL, stat); see zk/offsets.py.
_OP_OVERHEAD_BYTES = 64


class RequestLimits:
    """The largest frame a daemon reads, per API (rule 3)."""

    __slots__ = ("socket_request_max_bytes", "group_request_max_bytes", "group_admin_request_max_bytes")

    def __init__(self, socket_request_max_bytes: int = DEFAULT_SOCKET_REQUEST_MAX_BYTES,
                 group_request_max_bytes: int = DEFAULT_GROUP_REQUEST_MAX_BYTES,
                 group_admin_request_max_bytes: int = DEFAULT_GROUP_ADMIN_REQUEST_MAX_BYTES) -> None:
        self.socket_request_max_bytes = socket_request_max_bytes
        self.group_request_max_bytes = min(group_request_max_bytes, socket_request_max_bytes)
        self.group_admin_request_max_bytes = min(group_admin_request_max_bytes, socket_request_max_bytes)

    def request_max_bytes(self, api_key: int) -> int:
        """The largest frame of ``api_key`` read (size prefix excluded).

        >>> RequestLimits().request_max_bytes(8), RequestLimits().request_max_bytes(15)
        (8388608, 1048576)
        """
        if api_key in LARGE_API_KEYS:
            return self.group_request_max_bytes
        return self.group_admin_request_max_bytes

    def setting_of(self, api_key: int) -> str:
        """The setting that bounds ``api_key``'s requests, for error messages."""
        return "group_request_max_bytes" if api_key in LARGE_API_KEYS else "group_admin_request_max_bytes"


def utf16_length(text: str) -> int:
    """Java's ``String.length()`` of ``text``: code points outside the BMP count twice.

    >>> utf16_length("abc"), utf16_length("\\U0001F600")
    (3, 2)
    """
    n = len(text)
    if text.isascii():
        return n
    return n + sum(1 for c in text if ord(c) > 0xFFFF)


def offset_commit_error(topic: str, metadata: str | None, metadata_max_bytes: int) -> ErrorCode:
    """The error of one OffsetCommit partition under rules 1 and 2, else NONE.

    >>> offset_commit_error("t", "x" * 4097, 4096).name
    'OFFSET_METADATA_TOO_LARGE'
    >>> offset_commit_error("t", "x" * 4096, 4096).name
    'NONE'
    """
    if metadata and len(metadata) * 2 > metadata_max_bytes and utf16_length(metadata) > metadata_max_bytes:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


def max_partition_write_bytes(metadata_max_bytes: int, path_bytes: int) -> int:
    """The most bytes one committed partition adds to a ZooKeeper multi when
    its metadata passed :func:`offset_commit_error`: the offset op and the
    metadata op (JSON, each UTF-16 unit escaped to at most 6 bytes), each
    with a path of at most ``path_bytes``.

    >>> max_partition_write_bytes(4096, 1000)
    26704
    """
    offset_op = path_bytes + 20 + _OP_OVERHEAD_BYTES
    metadata_op = path_bytes + 6 * metadata_max_bytes + 40 + _OP_OVERHEAD_BYTES
    return offset_op + metadata_op


def idle_expired(now_ms: int, last_active_ms: int, partial_since_ms: int | None, busy: bool,
                 idle_ms: int) -> str | None:
    """Why a connection must close under rule 4, or None.

    ``partial_since_ms``: when its unfinished frame started (None: none);
    ``busy``: a request of it is in flight.

    >>> idle_expired(10_000, 0, None, False, 5_000)
    'idle for 10000 ms'
    >>> idle_expired(10_000, 9_000, 1_000, False, 5_000)
    'sent part of a frame 9000 ms ago and not the rest'
    >>> idle_expired(10_000, 0, None, True, 5_000) is None
    True
    """
    if busy:
        return None
    if partial_since_ms is not None and now_ms - partial_since_ms >= idle_ms:
        return f"sent part of a frame {now_ms - partial_since_ms} ms ago and not the rest"
    if now_ms - last_active_ms >= idle_ms:
        return f"idle for {now_ms - last_active_ms} ms"
    return None
