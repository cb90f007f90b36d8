"""A classic group record too large for one znode, packed (record format 2).

This module owns the packed form of a classic group's record
(:mod:`zkcoord.core.group_record`, format 1): what a daemon stores when the
record's one-znode JSON would be over ``--max-state-bytes``, and reading it
back. Pure: the caller names the parts (a fresh token per write) and does
the I/O (:mod:`zkcoord.zk.state_store`).

A packed record is a small JSON header in the state znode, and the members,
compressed, in one or more part znodes beside it::

    state znode:  {"v": 2, "s": "Stable", "g": 7, "pt": "consumer", "pn": "range", "l": "<leader>",
                   "os": "zookeeper", "mc": 1000,
                   "mz": {"c": "xz", "t": "5f2a9c3e1b7d", "n": 1, "b": 81234, "crc": 3735928559}}
    parts:        <token>-0, <token>-1, ...   (the body, cut into pieces of at most part_bytes)

The header holds every key of the format-1 record but ``m`` (so ``os``,
the generation, the leader are read without the parts), ``mc`` the member
count, and ``mz`` the body: its codec (``xz``), the token naming its parts,
how many there are, its length and its CRC-32. The body is an xz stream
(its own CRC-64 over the uncompressed bytes) of::

    b"ZKM1" | uvarint(len(J)) | J | for each blob: uvarint(len(blob)) | blob

where ``J`` is the members list of format 1 as compact JSON with each
member's protocol metadata and assignment (``p[i][1]``, ``a``) replaced by
the index of a blob holding the raw bytes (identical blobs stored once:
members of one group mostly send the same subscription). No base64, and
the compressor sees Kafka's ConsumerProtocol bytes as they are: a group of
1,000 members over 100,000 partitions is 6.7 MB in format 1, 76 KB packed
(range), 400 KB when its partitions were dealt at random
(``bench/RESULTS.md``).

Rules:

1. :func:`unpack` gives back exactly the format-1 record :func:`pack` was
   given (the same dict), so loading after a fail-over replays the records
   the previous owner wrote, whichever format they were stored in.
2. Parts are written once and never changed: a new write makes new parts
   under a new token, and the header names exactly the parts it needs, with
   the body's length and CRC. A reader that finds a part missing, or bytes
   that do not add up, never decodes a mixture: it reads again or reports
   the state corrupt (:class:`~zkcoord.errors.StateError`).
3. Anything wrong (a header whose fields are off, a body that is not xz,
   not this layout, or whose blob indexes point nowhere) is a StateError
   naming what is wrong.
"""

from __future__ import annotations

import base64
import json
import lzma
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zkcoord.errors import StateError

__all__ = ["PACKED_VERSION", "CODEC", "Packed", "pack", "unpack", "is_packed", "header_problem", "part_names",
           "member_count"]

PACKED_VERSION = 2
CODEC = "xz"
MAGIC = b"ZKM1"
XZ_PRESET = 1  # xz's fastest: 4x smaller than zlib's best on these bodies, at zlib -6's speed
_TOKEN = re.compile(r"^[0-9A-Za-z_]{1,40}$")
_HEADER_KEYS = ("mc", "mz")
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Packed:
    """A packed record: the header (the state znode's JSON object) and the
    parts' bytes, in order (named by :func:`part_names` of the header)."""

    header: dict[str, Any]
    parts: tuple[bytes, ...]


def is_packed(record: Mapping[str, Any]) -> bool:
    """Is ``record`` (a decoded state znode) a packed header?"""
    return record.get("v") == PACKED_VERSION and type(record.get("v")) is int  # noqa: E721


def member_count(record: Mapping[str, Any]) -> int:
    """Members of a decoded state record, packed header or not."""
    if is_packed(record):
        return int(record.get("mc", 0))
    members = record.get("m")
    return len(members) if isinstance(members, list) else 0


def part_names(header: Mapping[str, Any]) -> list[str]:
    """The znode names of a (valid) header's parts, in order."""
    body = header["mz"]
    return [f"{body['t']}-{i}" for i in range(body["n"])]


def header_problem(header: object) -> str | None:
    """What is wrong with a packed header, or None.

    >>> header_problem({"v": 2, "s": "Stable", "g": 1, "mc": 1,
    ...                 "mz": {"c": "xz", "t": "ab12", "n": 1, "b": 10, "crc": 7}}) is None
    True
    >>> header_problem({"v": 2, "s": "Stable", "g": 1, "mc": 1, "mz": {"c": "zstd", "t": "ab12", "n": 1,
    ...                 "b": 10, "crc": 7}})
    "its body's codec 'zstd' is not one this zkcoord reads (xz); a newer zkcoord wrote it?"
    """
    if not isinstance(header, dict) or not is_packed(header):
        return "it is not a packed record (format 2)"
    if "m" in header:
        return "it holds members ('m') beside its packed body"
    if not _int(header.get("mc"), 0):
        return f"its member count 'mc' is {header.get('mc')!r}, not a whole number"
    body = header.get("mz")
    if not isinstance(body, dict):
        return f"its body 'mz' is {body!r}, not an object"
    if body.get("c") != CODEC:
        return f"its body's codec {body.get('c')!r} is not one this zkcoord reads ({CODEC}); a newer zkcoord wrote it?"
    if not isinstance(body.get("t"), str) or not _TOKEN.match(body["t"]):
        return f"its parts' token 't' is {body.get('t')!r}, not 1-40 letters, digits or '_'"
    if not _int(body.get("n"), 1, 100_000):
        return f"its part count 'n' is {body.get('n')!r}, not a whole number from 1"
    if not _int(body.get("b"), 1, 2**40):
        return f"its body length 'b' is {body.get('b')!r}, not a whole number from 1"
    if not _int(body.get("crc"), 0, 2**32 - 1):
        return f"its body checksum 'crc' is {body.get('crc')!r}, not a CRC-32"
    return None


def _int(value: object, low: int, high: int = _INT32_MAX) -> bool:
    return type(value) is int and low <= value <= high  # noqa: E721


# -- packing ------------------------------------------------------------------------------------

def _uvarint(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def pack(record: Mapping[str, Any], token: str, part_bytes: int) -> Packed:
    """The packed form of a valid format-1 record (one with members), its
    body cut into parts of at most ``part_bytes``, named after ``token``."""
    if not _TOKEN.match(token):
        raise ValueError(f"token {token!r} is not 1-40 letters, digits or '_'")
    if part_bytes < 1:
        raise ValueError(f"part_bytes must be at least 1, got {part_bytes}")
    blobs: list[bytes] = []
    index: dict[bytes, int] = {}

    def blob(text: str) -> int:
        data = base64.b64decode(text.encode("ascii"), validate=True)
        found = index.get(data)
        if found is None:
            found = index[data] = len(blobs)
            blobs.append(data)
        return found

    members = []
    for member in record.get("m", ()):
        packed = dict(member)
        if "p" in member:
            packed["p"] = [[name, blob(meta)] for name, meta in member["p"]]
        if "a" in member:
            packed["a"] = blob(member["a"])
        members.append(packed)
    listing = json.dumps(members, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    raw = bytearray(MAGIC)
    _uvarint(len(listing), raw)
    raw += listing
    for data in blobs:
        _uvarint(len(data), raw)
        raw += data
    body = lzma.compress(bytes(raw), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=XZ_PRESET)
    parts = tuple(body[i:i + part_bytes] for i in range(0, len(body), part_bytes))
    header = {k: v for k, v in record.items() if k not in ("m", "v")}
    header = {"v": PACKED_VERSION, **header, "mc": len(members),
              "mz": {"c": CODEC, "t": token, "n": len(parts), "b": len(body), "crc": zlib.crc32(body)}}
    return Packed(header, parts)


# -- unpacking ------------------------------------------------------------------------------------

def _read_uvarint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("a length runs past the end of the body")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def unpack(header: Mapping[str, Any], parts: Sequence[bytes]) -> dict[str, Any]:
    """The format-1 record a packed header and its parts (in order) hold.
    StateError saying what does not add up (rule 3)."""
    problem = header_problem(header)
    if problem is not None:
        raise StateError(f"the packed state header is not valid: {problem}")
    body_info = header["mz"]
    if len(parts) != body_info["n"]:
        raise StateError(f"the packed state names {body_info['n']} part(s), {len(parts)} were given")
    body = b"".join(parts)
    if len(body) != body_info["b"] or zlib.crc32(body) != body_info["crc"]:
        raise StateError(f"the packed state's parts ({len(body)} bytes, CRC-32 {zlib.crc32(body)}) are not the "
                         f"body its header names ({body_info['b']} bytes, CRC-32 {body_info['crc']}): parts of "
                         "another write, or damaged")
    try:
        raw = lzma.decompress(body, format=lzma.FORMAT_XZ)
    except lzma.LZMAError as exc:
        raise StateError(f"the packed state's body is not a valid xz stream ({exc})") from None
    try:
        members = _members(raw)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise StateError(f"the packed state's body is not a valid member list ({exc})") from None
    if len(members) != header["mc"]:
        raise StateError(f"the packed state's header counts {header['mc']} members, its body holds {len(members)}")
    record: dict[str, Any] = {"v": 1}
    record.update((k, v) for k, v in header.items() if k not in ("v", *_HEADER_KEYS))
    record["m"] = members
    return record


def _members(raw: bytes) -> list[dict[str, Any]]:
    if not raw.startswith(MAGIC):
        raise ValueError(f"it does not start with {MAGIC!r}")
    length, at = _read_uvarint(raw, len(MAGIC))
    if at + length > len(raw):
        raise ValueError("its member list runs past the end")
    listing = json.loads(raw[at:at + length].decode())
    at += length
    blobs: list[str] = []
    while at < len(raw):
        size, at = _read_uvarint(raw, at)
        if at + size > len(raw):
            raise ValueError("a blob runs past the end")
        blobs.append(base64.b64encode(raw[at:at + size]).decode("ascii"))
        at += size

    def text(i: object) -> str:
        if type(i) is not int or not 0 <= i < len(blobs):  # noqa: E721
            raise ValueError(f"blob index {i!r} is not one of the body's {len(blobs)} blobs")
        return blobs[i]

    if not isinstance(listing, list):
        raise ValueError("the member list is not a list")
    members = []
    for packed in listing:
        if not isinstance(packed, dict):
            raise ValueError(f"a member is {type(packed).__name__}, not an object")
        member = dict(packed)
        if "p" in packed:
            member["p"] = [[name, text(i)] for name, i in packed["p"]]
        if "a" in packed:
            member["a"] = text(packed["a"])
        members.append(member)
    return members
