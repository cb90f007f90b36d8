"""What a legacy consumer writes under ``/consumers/<group>/ids/<consumer id>``,
and the ids zkcoord's members register there.

This module owns three things, pure (no I/O, no clock, no randomness: the
time and the random token are passed in):

* :func:`parse_registration`: a registration read back as Kafka 1.1.1's
  ``TopicCount.constructTopicCount`` reads it (the same reading since 0.8.1):
  a JSON object whose ``"pattern"`` is a string and whose ``"subscription"``
  maps strings to stream counts. ``"version"`` and ``"timestamp"`` are not
  read by any legacy consumer, so they are kept but not required. A pattern
  of ``white_list`` or ``black_list`` with a non-empty subscription is a
  wildcard: its one key is the regular expression, its value the streams;
  any other pattern (``static``, or one Kafka does not know) is a static
  topic count. What the legacy consumers could not read either (not JSON,
  no pattern, a stream count that is not a whole number, 0.8.0's
  ``*4*regex`` strings) is a :class:`~zkcoord.errors.StateError` naming
  the znode: a group holding one cannot rebalance for anybody, zkcoord
  included.
* :func:`encode_registration`: the bytes a 1.0.1-1.1.x consumer writes
  (Jackson's ``writeValueAsString`` of an ordered map), for a static
  subscription: ``{"version":1,"subscription":{"orders":1},"pattern":
  "static","timestamp":"1530000000000"}``; the timestamp is a string of
  milliseconds, as Kafka writes it.
* :func:`zkcoord_consumer_id` and :func:`thread_id`: the consumer ids of
  zkcoord's members, ``<group>_zkcoord-<start ms, 13 digits>-<8 hex>``, in
  the legacy form ``<group>_<host>-<ms>-<8 hex>``. Legacy consumers sort
  *thread* ids (``<consumer id>-<stream>``) as strings
  (``ConsumerThreadId.compare`` compares ``toString``), so the form is
  chosen for that order: zkcoord's members sort among themselves by the
  time they joined (the time has a fixed width), so a member that joins
  later takes the last ranges and its arrival moves the fewest partitions
  between zkcoord's members; ``zkcoord`` names them for people and tools
  (``describe``), nothing reads it.

Worked example:

>>> reg = parse_registration("g_host-1530000000000-0a1b2c3d",
...     b'{"version":1,"subscription":{"orders":2},"pattern":"static","timestamp":"1530000000000"}')
>>> reg.static_topics, reg.wildcard
({'orders': 2}, None)
>>> encode_registration({"orders": 1}, 1530000000000)
b'{"version":1,"subscription":{"orders":1},"pattern":"static","timestamp":"1530000000000"}'
>>> thread_id(zkcoord_consumer_id("g", 1795315596682, "0a1b2c3d"), 0)
'g_zkcoord-1795315596682-0a1b2c3d-0'
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from zkcoord.errors import StateError, UsageError

__all__ = ["Pattern", "Wildcard", "LegacyRegistration", "parse_registration", "encode_registration",
           "zkcoord_consumer_id", "is_zkcoord_consumer_id", "thread_id", "split_thread_id", "ZKCOORD_MARKER",
           "INT32_MAX"]

INT32_MAX = 2**31 - 1
ZKCOORD_MARKER = "zkcoord"
_TOKEN = re.compile(r"[0-9a-f]{8}")
_ZKCOORD_TAIL = re.compile(r"_zkcoord-\d{13}-[0-9a-f]{8}$")
_MAX_START_MS = 10**13 - 1  # 13 digits: until the year 2286


class Pattern(enum.Enum):
    """``TopicCount``'s three kinds of subscription."""

    STATIC = "static"
    WHITE_LIST = "white_list"
    BLACK_LIST = "black_list"


@dataclass(frozen=True)
class Wildcard:
    """A whitelist or blacklist: ``regex`` as stored (the filter's own
    clean-up applies when it is evaluated), the same ``streams`` for every
    topic it allows."""

    pattern: Pattern
    regex: str
    streams: int


@dataclass(frozen=True)
class LegacyRegistration:
    """One znode under ``/consumers/<group>/ids``, as the legacy consumers read it.

    Exactly one of ``static_topics`` (topic -> streams; may be empty) and
    ``wildcard`` describes the subscription.
    """

    consumer_id: str
    static_topics: Mapping[str, int] = field(default_factory=dict)
    wildcard: Wildcard | None = None
    pattern_text: str = Pattern.STATIC.value  # what the znode said ("static", or a pattern Kafka ignores)
    version: object = 1
    timestamp: object = None  # a string of milliseconds when a consumer wrote it

    @classmethod
    def static(cls, consumer_id: str, topics: Mapping[str, int], timestamp_ms: int | None = None
               ) -> LegacyRegistration:
        """A static registration (what zkcoord registers; also handy in tests)."""
        return cls(consumer_id, dict(_checked_streams(topics, f"consumer {consumer_id!r}")), None, Pattern.STATIC.value, 1,
                   None if timestamp_ms is None else str(timestamp_ms))

    @classmethod
    def filtered(cls, consumer_id: str, pattern: Pattern, regex: str, streams: int) -> LegacyRegistration:
        """A whitelist or blacklist registration."""
        if pattern is Pattern.STATIC:
            raise UsageError("a filtered registration needs Pattern.WHITE_LIST or Pattern.BLACK_LIST")
        _checked_streams({regex: streams}, f"consumer {consumer_id!r}")
        return cls(consumer_id, {}, Wildcard(pattern, regex, streams), pattern.value)


def _checked_streams(topics: Mapping[str, int], whose: str) -> Mapping[str, int]:
    for topic, streams in topics.items():
        if not isinstance(topic, str) or isinstance(streams, bool) or not isinstance(streams, int) \
                or not 1 <= streams <= INT32_MAX:
            raise UsageError(f"{whose}: {topic!r} needs a stream count from 1 to {INT32_MAX}, got {streams!r}")
    return topics


def parse_registration(consumer_id: str, data: bytes | None, path: str | None = None) -> LegacyRegistration:
    """The registration in ``data`` (module docstring); StateError naming
    ``path`` (default: the consumer id) when no legacy consumer could read it."""
    where = path or f"the registration of consumer {consumer_id!r}"

    def bad(why: str) -> StateError:
        return StateError(f"{where} cannot be read as a legacy consumer registration ({why}); the legacy "
                          "consumers of this group cannot rebalance while it is there: stop or fix that consumer")

    if data is None:
        raise bad("no data")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad(f"not JSON: {exc}; Kafka 0.8.0's '*N*regex' form is not supported") from None
    if not isinstance(value, dict):
        raise bad("not a JSON object")
    pattern, subscription = value.get("pattern"), value.get("subscription")
    if not isinstance(pattern, str):
        raise bad('no "pattern" string')
    if not isinstance(subscription, dict):
        raise bad('no "subscription" object')
    for key, streams in subscription.items():
        if isinstance(streams, bool) or not isinstance(streams, int) or not -2**31 <= streams <= INT32_MAX:
            raise bad(f"subscription {key!r}: {streams!r} is not a whole number of streams")
        if streams < 1:
            raise bad(f"subscription {key!r}: {streams} streams (at least 1)")
    version, timestamp = value.get("version"), value.get("timestamp")
    if pattern in (Pattern.WHITE_LIST.value, Pattern.BLACK_LIST.value) and subscription:
        if len(subscription) != 1:
            raise bad(f"a {pattern} subscription has {len(subscription)} entries; legacy consumers write one")
        ((regex, streams),) = subscription.items()
        return LegacyRegistration(consumer_id, {}, Wildcard(Pattern(pattern), regex, streams), pattern,
                                  version, timestamp)
    return LegacyRegistration(consumer_id, dict(subscription), None, pattern, version, timestamp)


def _jackson_string(text: str) -> str:
    """A JSON string as Jackson writes it: ``"`` and ``\\`` escaped, the five
    short escapes, other control characters as ``\\u00XX`` (upper-case hex),
    everything else as it is."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif code < 0x20:
            out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}.get(ch, f"\\u{code:04X}"))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def encode_registration(topics: Mapping[str, int], timestamp_ms: int) -> bytes:
    """A static registration as a Kafka 1.1.x consumer writes it (topics in
    name order; legacy readers do not care about the order)."""
    _checked_streams(topics, "a registration")
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int) or timestamp_ms < 0:
        raise UsageError(f"timestamp_ms must be a whole number >= 0, got {timestamp_ms!r}")
    subscription = ",".join(f"{_jackson_string(t)}:{topics[t]}" for t in sorted(topics))
    return (f'{{"version":1,"subscription":{{{subscription}}},"pattern":"static",'
            f'"timestamp":"{timestamp_ms}"}}').encode("utf-8")


def zkcoord_consumer_id(group: str, start_ms: int, token: str) -> str:
    """``<group>_zkcoord-<start ms, 13 digits>-<token>`` (module docstring);
    ``token`` is 8 lower-case hex digits the caller draws at random."""
    if not isinstance(group, str) or not group or "/" in group:
        raise UsageError(f"group {group!r} cannot hold legacy consumers: a legacy group id is a non-empty "
                         "znode name")
    if isinstance(start_ms, bool) or not isinstance(start_ms, int) or not 0 <= start_ms <= _MAX_START_MS:
        raise UsageError(f"start_ms must be a whole number of milliseconds from 0 to {_MAX_START_MS}, "
                         f"got {start_ms!r}")
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise UsageError(f"token must be 8 lower-case hex digits, got {token!r}")
    return f"{group}_{ZKCOORD_MARKER}-{start_ms:013d}-{token}"


def is_zkcoord_consumer_id(consumer_id: str) -> bool:
    """Whether an id has the form zkcoord gives its members (for display:
    which daemon's session holds it is what proves it ours)."""
    return bool(_ZKCOORD_TAIL.search(consumer_id))


def thread_id(consumer_id: str, stream: int) -> str:
    """``ConsumerThreadId.toString``: ``<consumer id>-<stream>``; what an owner
    znode holds."""
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        raise UsageError(f"stream must be a whole number >= 0, got {stream!r}")
    return f"{consumer_id}-{stream}"


def split_thread_id(text: str) -> tuple[str, int] | None:
    """(consumer id, stream) of a thread id, None if ``text`` is not one.
    The stream is the digits after the last ``-``, so the split is unique."""
    consumer, dash, stream = text.rpartition("-")
    if not dash or not consumer or not stream.isascii() or not stream.isdigit():
        return None
    return consumer, int(stream)
