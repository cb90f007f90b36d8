"""Reading a group's state whole, packed or not, and the parts of packed ones.

This module owns the read side of ``/coordinators/<group>/state-parts/``:
the parts of a packed classic record (:mod:`zkcoord.core.packed_record`),
which the state znode's header names. Every reader that needs a group's
members (the daemon's load, ``describe``) reads the state through
:func:`read_state`; readers that need only the header's fields (the offset
storage mode, the member count) decode the state znode alone.

Rules:

1. A header names its parts exactly, and parts are never changed, only
   created under a new token and deleted once no header names them. So a
   part that is missing means the state moved on while we read: the state
   is read again, and only a part still missing under the same state
   version is an error (StateError: the state is damaged).
2. Decoding a large state (a packed body, a format-1 record of many
   members) runs in a worker thread: a 1,000-member group's body takes
   tens of milliseconds to decompress and check, which the event loop
   spends serving other groups meanwhile.
3. Parts are read with one pipelined read each (a part can be up to
   ``--max-state-bytes``; several would not fit one multiRead answer).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kazoo.exceptions import NoNodeError

from zkcoord.core.groups import record_problem
from zkcoord.core.packed_record import header_problem, is_packed, part_names, unpack
from zkcoord.errors import StateError
from zkcoord.zk import aio, paths

__all__ = ["ABSENT", "OFF_LOOP_BYTES", "decode_state", "read_state", "read_parts", "list_parts", "unpack_state",
           "needs_parts"]

ABSENT = -1  # the version of a group without a state znode
OFF_LOOP_BYTES = 64 * 1024  # a state this large is decoded in a worker thread (rule 2)
_REREADS = 5  # missing parts while the state keeps changing: read again this often (rule 1)


def _fix(group: str) -> str:
    return f"; repair it, or delete {paths.coordinator(group)} to start the group afresh"


def decode_state(group: str, path: str, data: bytes) -> dict[str, Any]:
    """The record in a state znode, checked: a format-1 record by
    :func:`~zkcoord.core.group_record.record_problem`, a packed header by
    :func:`~zkcoord.core.packed_record.header_problem` (its members are in
    its parts: :func:`needs_parts`). StateError naming the znode and what is
    wrong with it."""
    fix = f"; repair it, or delete {path} to start the group afresh"
    if not data:
        raise StateError(f"state znode {path} of group {group!r} is empty{fix}")
    try:
        record = json.loads(data.decode())
    except UnicodeDecodeError as exc:
        raise StateError(f"state znode {path} of group {group!r} is not UTF-8 ({exc}){fix}") from None
    except ValueError as exc:
        raise StateError(f"state znode {path} of group {group!r} is not valid JSON ({exc}){fix}") from None
    if not isinstance(record, dict):
        raise StateError(f"state znode {path} of group {group!r} holds a JSON {type(record).__name__} "
                         f"where an object was expected{fix}")
    problem = header_problem(record) if is_packed(record) else record_problem(record)
    if problem is not None:
        raise StateError(f"state znode {path} of group {group!r} is not a valid group record: {problem}{fix}")
    return record


def needs_parts(record: dict[str, Any]) -> bool:
    """Is a decoded state znode a packed header, whose members are in parts?"""
    return is_packed(record)


def unpack_state(group: str, header: dict[str, Any], parts: list[bytes]) -> dict[str, Any]:
    """The format-1 record of a packed header and its parts, checked as any
    record is. StateError saying what is wrong."""
    try:
        record = unpack(header, parts)
    except StateError as exc:
        raise StateError(f"the packed state of group {group!r} ({paths.state_parts_dir(group)}) cannot be read: "
                         f"{exc}{_fix(group)}") from None
    problem = record_problem(record)
    if problem is not None:
        raise StateError(f"the packed state of group {group!r} is not a valid group record: {problem}{_fix(group)}")
    return record


async def read_parts(conn, group: str, header: dict[str, Any]) -> list[bytes] | None:
    """The parts a header names, in order; None when one is missing (rule 1)."""
    loop = asyncio.get_running_loop()
    client = conn.client
    outcomes = await aio.gather(loop, [client.get_async(paths.state_part(group, name))
                                       for name in part_names(header)])
    parts = []
    for outcome in outcomes:
        if isinstance(outcome, NoNodeError):
            return None
        if isinstance(outcome, BaseException):
            raise outcome
        parts.append(outcome[0])
    return parts


async def list_parts(conn, group: str) -> set[str] | None:
    """The names under the group's parts directory; None when it does not exist."""
    try:
        return set(await aio.call(conn.client.get_children_async, paths.state_parts_dir(group)))
    except NoNodeError:
        return None


async def _decode(fn, *args):
    return await asyncio.to_thread(fn, *args)


async def read_state(conn, group: str, first: tuple[bytes, Any] | None = None,
                     ) -> tuple[dict[str, Any] | None, int, dict[str, Any] | None]:
    """``(record, version, header)``: the group's format-1 record whole (its
    parts read and unpacked when it is packed; ``header`` then is the state
    znode's header, else None), or ``(None, ABSENT, None)`` when the group has
    no state. Idempotent: call it under the connection's retry. A consumer
    group's record comes back as stored (its member records are the caller's).
    ``first``: the state znode's ``(data, stat)`` read already (a takeover's
    multiRead), used instead of the first read."""
    path = paths.state(group)
    client = conn.client
    seen = None
    for _ in range(_REREADS):
        if first is not None:
            (data, stat), first = first, None
        else:
            try:
                data, stat = await aio.call(client.get_async, path)
            except NoNodeError:
                return None, ABSENT, None
        if len(data) > OFF_LOOP_BYTES:
            record = await _decode(decode_state, group, path, data)
        else:
            record = decode_state(group, path, data)
        if not is_packed(record):
            return record, stat.version, None
        parts = await read_parts(conn, group, record)
        if parts is not None:
            if record["mc"] >= 100 or record["mz"]["b"] > OFF_LOOP_BYTES:
                return await _decode(unpack_state, group, record, parts), stat.version, record
            return unpack_state(group, record, parts), stat.version, record
        if seen == stat.version:
            break
        seen = stat.version
    raise StateError(f"the packed state of group {group!r} names parts that are not in "
                     f"{paths.state_parts_dir(group)} (state version {seen}){_fix(group)}")
