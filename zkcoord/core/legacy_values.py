"""What a legacy offset znode may hold, and the wire's integer limits.

This module owns the one rule every reader of ``<root>/<group>/offsets/
<topic>/<partition>`` applies (the daemon's OffsetFetch, ``describe``,
``migrate plan`` / ``export`` / ``verify``, ``migrate import``'s input):

* a **value** is the decimal text of a Kafka offset: ASCII digits with an
  optional leading ``-``, surrounding whitespace tolerated (old tools wrote
  a newline), in ``[-2^63, 2^63 - 1]`` (int64, what OffsetFetch carries).
  Kafka stores any int64 an OffsetCommit sends and fetches it back (-1
  then reads as "no offset"; a consumer given any negative position
  resets by its auto.offset.reset), so a daemon storing offsets in
  ZooKeeper does the same. Anything else is :class:`Unparsable`, with the
  reason: no data, empty, not UTF-8, not a decimal, too many digits, out
  of range. The text is bounded before it is converted, so a znode of
  5,000 digits costs nothing and never reaches ``int()``'s digit limit.
* a partition znode's **name** is a partition number: ASCII digits, at most
  2^31 - 1 (int32, what the wire carries); other names are not partitions.

Pure: no I/O. Callers decide what an unparsable value means to them (an
error code for that partition, a note, a refused import line).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["INT32_MAX", "INT64_MAX", "INT64_MIN", "NO_OFFSET", "MAX_VALUE_CHARS", "Unparsable", "read_legacy_value",
           "partition_number", "shown"]

INT32_MAX = 2**31 - 1  # generations, partitions, timeouts on the wire
INT64_MAX = 2**63 - 1  # offsets on the wire
INT64_MIN = -2**63
NO_OFFSET = -1  # Kafka's "no committed offset"
MAX_VALUE_CHARS = 64  # whitespace and all: a valid value is at most 19 digits
_MAX_DIGITS = len(str(INT64_MAX))
_WHITESPACE = " \t\r\n\x0b\x0c"


@dataclass(frozen=True)
class Unparsable:
    """A legacy value that is not an offset; ``reason`` says why."""

    reason: str


def shown(raw: bytes | str | None, limit: int = 40) -> str:
    """A short printable form of a raw value, for messages.

    >>> shown(b"9" * 50)
    "'9999999999999999999999999999999999999...'"
    """
    if raw is None:
        return "no data"
    text = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else raw
    return repr(text) if len(text) <= limit else repr(text[:limit - 3] + "...")


def read_legacy_value(raw: bytes | str | None) -> int | Unparsable:
    """The offset in a legacy znode's data, or why it is not one.

    >>> read_legacy_value(b"42"), read_legacy_value(" 7\\n"), read_legacy_value(b"-1"), read_legacy_value(b"-5")
    (42, 7, -1, -5)
    >>> read_legacy_value(str(2**70)).reason
    'out of range: more than 2^63-1 (int64)'
    >>> read_legacy_value(b"9" * 5000).reason
    'too long: 5000 bytes (an offset is at most 19 digits)'
    >>> read_legacy_value(str(-2**63)), read_legacy_value(str(-2**63 - 1)).reason
    (-9223372036854775808, 'out of range: below -2^63 (int64)')
    >>> read_legacy_value(b"").reason, read_legacy_value(b"\\xff").reason
    ('empty', 'not UTF-8')
    """
    if type(raw) is str and len(raw) < _MAX_DIGITS and raw.isascii() and raw.isdigit():
        return int(raw)  # the usual value, plain digits: below 10^18, nothing else to check (millions per job)
    if raw is None:
        return Unparsable("no data")
    if len(raw) > MAX_VALUE_CHARS:
        return Unparsable(f"too long: {len(raw)} {'bytes' if isinstance(raw, bytes) else 'characters'} "
                          f"(an offset is at most {_MAX_DIGITS} digits)")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return Unparsable("not UTF-8")
    text = raw.strip(_WHITESPACE)
    if not text:
        return Unparsable("empty")
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):
        return Unparsable("not a decimal number")
    if len(digits.lstrip("0")) > _MAX_DIGITS:
        return Unparsable("out of range: " + ("below -2^63" if text.startswith("-") else "more than 2^63-1")
                          + " (int64)")
    value = int(text)
    if value > INT64_MAX:
        return Unparsable("out of range: more than 2^63-1 (int64)")
    if value < INT64_MIN:
        return Unparsable("out of range: below -2^63 (int64)")
    return value


def partition_number(name: str) -> int | None:
    """The partition a znode name stands for, or None if it is not one.

    >>> partition_number("3"), partition_number("2147483648"), partition_number("x"), partition_number("٣")
    (3, None, None, None)
    """
    if not (name.isascii() and name.isdigit()) or len(name.lstrip("0")) > 10:
        return None
    value = int(name)
    return value if value <= INT32_MAX else None
