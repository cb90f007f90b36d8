"""A group's records beyond its state znode: a consumer group's member
records, read with the state and written with it, fenced.

This module owns ``/coordinators/<group>/members/<member>`` and
``/coordinators/<group>/target`` (KIP-848's consumer group keeps one record
per member and one for its target assignment,
:mod:`zkcoord.core.consumer.record`) and the writes of an outcome that
touch several znodes:

1. One outcome is one ZooKeeper multi whenever it fits: ``check`` of this
   daemon's contender (the fence), the member creates / sets / deletes,
   then the state znode's versioned set (or create, or delete), last. The
   state znode is always written, so its version moves with every write
   and a write whose answer was lost is found again by its bytes there.
2. An outcome larger than one multi may carry (a target assignment for
   thousands of members) is written in several, each fenced and each
   checking that the state znode is still at the version read: members
   first, then the target record, the state last. A cut in between leaves
   a target record newer than the state's target epoch, which a new owner
   detects and repairs (:mod:`zkcoord.core.consumer.record`); a retried
   chunk whose answer was lost is recognised by reading its records back.
3. A corrupt member record makes the group's load a StateError, for that
   group alone.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NoNodeError

from zkcoord.errors import StateError
from zkcoord.zk import aio, paths
from zkcoord.zk.multi_read import GET_DATA, read_many

__all__ = ["MEMBERS_PREFIX", "MEMBERS_DIR_KEY", "TARGET_KEY", "MULTI_MAX_BYTES", "Change", "encode_record",
           "read_member_records", "read_target_record", "with_consumer_records", "members_landed", "chunks", "add_ops"]

MEMBERS_PREFIX = "members/"  # a change's key for a member record: "members/<member id>"
MEMBERS_DIR_KEY = "members"  # a change's key for the members directory: {} ensures it, None deletes it
TARGET_KEY = "target"  # a change's key for a consumer group's target record
MULTI_MAX_BYTES = 900_000  # one multi's data, under jute.maxbuffer (1 MiB) with room for paths and headers


@dataclass(frozen=True)
class Change:
    """One znode of an outcome: ``data`` None deletes it; ``existed``: set, else create."""

    path: str
    data: bytes | None
    existed: bool


def encode_record(group: str, record: dict[str, Any]) -> bytes:
    try:
        return json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise StateError(f"a record of group {group!r} cannot be written as JSON: {exc}") from None


async def read_member_records(conn, group: str) -> list[dict[str, Any]]:
    """Every member record of a consumer group (none without the directory).
    StateError naming the znode for one that is not JSON."""
    client = conn.client
    try:
        names = await aio.call(client.get_children_async, paths.members_dir(group))
    except NoNodeError:
        return []
    member_ids = paths.member_ids(names)
    outcomes = await read_many(conn, [(GET_DATA, paths.member(group, m)) for m in member_ids])
    records = []
    for member_id, outcome in zip(member_ids, outcomes):
        if isinstance(outcome, NoNodeError):
            continue  # removed while we listed
        if isinstance(outcome, BaseException):
            raise outcome
        records.append(_decoded(group, "member record", paths.member(group, member_id), outcome))
    return records


async def read_target_record(conn, group: str) -> dict[str, Any] | None:
    """A consumer group's target record (None: none stored). StateError
    naming the znode for one that is not JSON."""
    try:
        data, _ = await aio.call(conn.client.get_async, paths.target(group))
    except NoNodeError:
        return None
    return _decoded(group, "target record", paths.target(group), data)


async def with_consumer_records(conn, group: str, record: dict[str, Any]) -> dict[str, Any]:
    """A consumer group's state record with what is stored beside it, read
    at once: its member records under ``"members"``, its target record under
    ``TARGET_KEY`` (when there is one). StateError as the reads raise it."""
    members, target = await asyncio.gather(read_member_records(conn, group), read_target_record(conn, group))
    loaded = dict(record, members=members)
    if target is not None:
        loaded[TARGET_KEY] = target
    return loaded


def _decoded(group: str, what: str, path: str, data: bytes) -> Any:
    try:
        return json.loads(bytes(data).decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise StateError(f"{what} {path} of group {group!r} is not JSON ({exc}); repair it, or delete "
                         f"{paths.coordinator(group)} to start the group afresh") from None


async def members_landed(conn, changes: list[Change]) -> bool:
    """After a lost answer: do the member znodes of ``changes`` hold what we wrote?"""
    outcomes = await read_many(conn, [(GET_DATA, c.path) for c in changes])
    for change, outcome in zip(changes, outcomes):
        if change.data is None:
            if not isinstance(outcome, NoNodeError):
                return False
        elif isinstance(outcome, BaseException) or bytes(outcome) != change.data:
            return False
    return True


def chunks(changes: list[Change]) -> list[list[Change]]:
    """The member changes in multis of at most MULTI_MAX_BYTES of data (at least one change each)."""
    out: list[list[Change]] = [[]]
    size = 0
    for change in changes:
        weight = len(change.data or b"") + len(change.path) + 32
        if out[-1] and size + weight > MULTI_MAX_BYTES:
            out.append([])
            size = 0
        out[-1].append(change)
        size += weight
    return out


def add_ops(txn, changes: list[Change]) -> None:
    for change in changes:
        if change.data is None:
            txn.delete(change.path)
        elif change.existed:
            txn.set_data(change.path, change.data)
        else:
            txn.create(change.path, change.data)

