"""The fenced, versioned state of every group.

This module owns the znodes ``/coordinators/<group>/state`` and, for a
state too large for one znode, ``/coordinators/<group>/state-parts/``: a
group's record (:mod:`zkcoord.core.group_record`), whose state znode version
is the optimistic-concurrency token the runtime passes back.

Rules:

1. Every write is fenced: each multi ``check``s our contender znode (the
   :class:`~zkcoord.zk.ownership.Fence`) and the state znode's version we
   read, and the last multi of a write sets the state znode at that version
   (``create`` when the group has no state yet). It lands only if we still
   own the group and nobody wrote since we read.
2. A failed fence or version is :class:`~zkcoord.errors.NotOwnerError`, and
   the ownership module drops the group (reported LOST): the runtime stops
   serving it; a later contend + load starts it afresh.
3. A record whose compact JSON fits ``max_state_bytes`` (default 1,000,000:
   under ZooKeeper's 1 MiB ``jute.maxbuffer`` with room for the multi's
   other bytes) is stored as that JSON, as every earlier version stored it.
   A larger classic record is packed (:mod:`zkcoord.core.packed_record`): a
   small header in the state znode, the members compressed in parts of at
   most ``min(max_state_bytes, MULTI_MAX_BYTES)`` under ``state-parts/``,
   each part written once under a fresh token. The parts go first, in as
   many fenced multis as they need (each under ZooKeeper's limit on one
   request); the multi that sets the state znode to the new header comes
   last and deletes the parts no header names any more. A write cut in the
   middle (the owner died) leaves the old header naming its old, intact
   parts, plus new parts nobody names: never a mixed state. Those are
   deleted by the next write or delete of the group. Over
   ``max_group_state_bytes`` packed, a record is a StateTooLargeError
   before anything is written.
4. A write whose answer was lost with the connection is resolved after the
   reconnect by reading back: our bytes at the next version (the state
   znode; a header names its fresh token) mean it landed (kazoo's
   "NodeExistsError may mean we did it" habit).
5. A corrupt state znode, or a packed state whose parts are missing or do
   not add up, is a StateError for that group alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import (
    BadVersionError, ConnectionClosedError, NodeExistsError, NoNodeError, SessionExpiredError,
)
from kazoo.protocol.states import ZnodeStat

from zkcoord.core.consumer.record import FOLD_OVER_BYTES, compact_member_record
from zkcoord.core.groups import record_problem
from zkcoord.core.packed_record import member_count, pack, part_names
from zkcoord.errors import NotOwnerError, StateError, StateTooLargeError, UsageError, ZkcoordError
from zkcoord.zk import aio, paths
from zkcoord.zk.group_records import (
    MEMBERS_DIR_KEY, MEMBERS_PREFIX, MULTI_MAX_BYTES, TARGET_KEY, Change, add_ops, chunks, encode_record,
    members_landed, with_consumer_records,
)
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.multi_read import GET_DATA, read_many
from zkcoord.zk.ownership import Fence, GroupOwnership
from zkcoord.zk.packed_state import ABSENT, decode_state, list_parts, read_state

__all__ = ["ABSENT", "DEFAULT_MAX_STATE_BYTES", "DEFAULT_MAX_GROUP_STATE_BYTES", "GroupStateStore", "StoredState",
           "encode_state", "encode_group_state", "decode_state", "member_count"]

log = logging.getLogger(__name__)

DEFAULT_MAX_STATE_BYTES = 1_000_000
DEFAULT_MAX_GROUP_STATE_BYTES = 8_000_000
OFF_LOOP_MEMBERS = 100  # a record of this many members is encoded in a worker thread


def encode_state(group: str, record: dict[str, Any], max_bytes: int = DEFAULT_MAX_STATE_BYTES) -> bytes:
    """Compact UTF-8 JSON of ``record``; StateError if it is over ``max_bytes``."""
    data = _json(group, record)
    if len(data) > max_bytes:
        raise StateTooLargeError(f"the state of group {group!r} is {len(data)} bytes, over the limit of {max_bytes} "
                         "bytes; the group has too many members or too much metadata (nothing was written)")
    return data


def _json(group: str, record: dict[str, Any]) -> bytes:
    if not isinstance(record, dict):
        raise StateError(f"the state of group {group!r} must be a JSON object, got {type(record).__name__}")
    try:
        return json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise StateError(f"the state of group {group!r} cannot be written as JSON: {exc}") from None


@dataclass(frozen=True)
class StoredState:
    """What one record takes in ZooKeeper: the state znode's bytes, and the
    parts (name, bytes) of a packed record (none for a plain one)."""

    data: bytes
    parts: tuple[tuple[str, bytes], ...] = ()

    @property
    def total_bytes(self) -> int:
        return len(self.data) + sum(len(p) for _, p in self.parts)


def encode_group_state(group: str, record: dict[str, Any], max_state_bytes: int = DEFAULT_MAX_STATE_BYTES,
                       max_group_state_bytes: int = DEFAULT_MAX_GROUP_STATE_BYTES,
                       token: str | None = None) -> StoredState:
    """How ``record`` is stored (module rule 3). StateTooLargeError (naming
    both sizes) when it fits neither way; nothing is written then."""
    data = _json(group, record)
    if len(data) <= max_state_bytes:
        return StoredState(data)
    if not isinstance(record.get("m"), list) or "t" in record:
        encode_state(group, record, max_state_bytes)  # raises: only a classic record's members are packed
    part_bytes = min(max_state_bytes, MULTI_MAX_BYTES)
    try:
        packed = pack(record, token or secrets.token_hex(6), part_bytes)
    except (TypeError, ValueError) as exc:
        raise StateError(f"the state of group {group!r} cannot be packed: {exc}") from None
    header = _json(group, packed.header)
    names = part_names(packed.header)
    stored = StoredState(header, tuple(zip(names, packed.parts)))
    if len(header) > max_state_bytes or stored.total_bytes > max_group_state_bytes:
        raise StateTooLargeError(
            f"the state of group {group!r} is {len(data)} bytes as one JSON znode and {stored.total_bytes} bytes "
            f"packed ({len(names)} part(s)), over the limit of {max_group_state_bytes} bytes "
            "(--max-group-state-bytes); the group has too many members or too much metadata (nothing was written)")
    return stored


@dataclass
class _Attempt:
    tried: bool = False  # a multi was sent and its answer may have been lost


@dataclass
class _Write:
    """One write of a group's records, as multis (module rule 3)."""

    fence: Fence
    expected: int
    state: StoredState | None  # None: the state goes
    early: list[list[Change]]  # the multis before the last: member records, then new parts
    last: list[Change]  # the changes of the last multi, before the state znode's
    drop_members_dir: bool = False


class GroupStateStore:
    """Loads and writes group states, fenced by ``ownership``."""

    def __init__(self, conn: ZkConnection, ownership: GroupOwnership | None, *,
                 max_state_bytes: int = DEFAULT_MAX_STATE_BYTES,
                 max_group_state_bytes: int = DEFAULT_MAX_GROUP_STATE_BYTES) -> None:
        self._conn = conn
        self._ownership = ownership
        self.max_state_bytes = max_state_bytes
        self.max_group_state_bytes = max_group_state_bytes
        # group -> the parts its stored state names, as this store last read or wrote it (empty: a plain
        # state); absent: unknown. A write lists the parts directory unless it is known to hold nothing.
        self._parts: dict[str, frozenset[str]] = {}

    async def load(self, group: str) -> tuple[dict[str, Any] | None, int]:
        """``(record, version)``, or ``(None, ABSENT)`` if the group has no state.

        A packed state comes back as the format-1 record it packs. StateError
        if the state is corrupt; ServiceUnavailableError if ZooKeeper does not
        answer in time.
        """
        paths.state(group)  # validates before any I/O
        return await self._conn.retry(f"load the state of group {group!r}", self._inner_load, group)

    async def load_many(self, groups: list[str]) -> dict[str, tuple[dict[str, Any] | None, int] | Exception]:
        """:meth:`load` of many groups (a takeover), their state znodes read
        in multiReads: {group: ``(record, version)``, or the StateError or
        other ZkcoordError its load raises}. Raises
        ServiceUnavailableError when ZooKeeper does not answer in time."""
        for group in groups:
            paths.state(group)  # validates before any I/O
        reads = await self._conn.retry(f"load the states of {len(groups)} groups", self._inner_read_many, groups)
        loaded: dict[str, tuple[dict[str, Any] | None, int] | Exception] = {}
        for group, read in zip(groups, reads):
            try:
                loaded[group] = await self._conn.retry(f"load the state of group {group!r}", self._inner_load, group,
                                                       None if isinstance(read, NoNodeError) else read)
            except ZkcoordError as exc:  # StateError: that group is corrupt; the others load
                loaded[group] = exc
        return loaded

    async def _inner_read_many(self, groups: list[str]) -> list:
        reads = await read_many(self._conn, [(GET_DATA, paths.state(g)) for g in groups], stats=True)
        for read in reads:
            if isinstance(read, BaseException) and not isinstance(read, NoNodeError):
                raise read  # retried (a lost connection) or translated
        return reads

    async def _inner_load(self, group: str, read: tuple[bytes, ZnodeStat] | None | bool = False,
                          ) -> tuple[dict[str, Any] | None, int]:
        """``read``: the state znode's (data, stat) read already, None when
        it was absent, False (default) to read it here."""
        if read is None:
            self._parts[group] = frozenset()
            return None, ABSENT
        started = time.perf_counter()
        record, version, header = await read_state(self._conn, group, None if read is False else read)
        self._parts[group] = frozenset(part_names(header)) if header is not None else frozenset()
        if header is not None:
            log.info("group %s: packed state read (%d members, %d bytes in %d part(s)) in %.0f ms", group,
                     header["mc"], header["mz"]["b"], header["mz"]["n"], (time.perf_counter() - started) * 1e3)
        if record is not None and record.get("t") == "consumer":  # its members and target are znodes of their own
            record = await with_consumer_records(self._conn, group, record)
            problem = record_problem(record)
            if problem is not None:
                raise StateError(f"group {group!r}: {problem}; repair it, or delete {paths.coordinator(group)} "
                                 "to start the group afresh")
        return record, version

    async def _encode(self, group: str, record: dict[str, Any]) -> StoredState:
        args = (group, record, self.max_state_bytes, self.max_group_state_bytes)
        if member_count(record) >= OFF_LOOP_MEMBERS:
            return await asyncio.to_thread(encode_group_state, *args)
        return encode_group_state(*args)

    async def write_changes(self, group: str, changes: list[tuple[str, dict | None, bool]],
                            expected_version: int | None) -> int | None:
        """Write an outcome's records (module :mod:`~zkcoord.zk.group_records`):
        ``(key, record or None to delete, existed)`` with key ``""`` the state
        znode (last), ``"members/<id>"`` a member record, ``"target"`` a
        consumer group's target record, ``"members"`` the members directory
        ({} ensures it, None deletes it). Returns the state's
        new version (None when it was deleted). Raises as :meth:`write`."""
        fence = self._fence(group)
        expected = ABSENT if expected_version is None else expected_version
        args = (group, changes, self.max_state_bytes, self.max_group_state_bytes)
        state = next((record for key, record, _ in changes if key == ""), None)
        if len(changes) >= OFF_LOOP_MEMBERS or (state is not None and member_count(state) >= OFF_LOOP_MEMBERS):
            stored, members, drop_dir, ensure_dir = await asyncio.to_thread(_encode_outcome, *args)  # one hop
        else:
            stored, members, drop_dir, ensure_dir = _encode_outcome(*args)
        if ensure_dir:
            await self._conn.retry(f"create the members directory of group {group!r}", self._ensure_dir,
                                   paths.members_dir(group))
        return await self._write(group, _Write(fence, expected, stored, [], members, drop_dir))

    async def write(self, group: str, record: dict[str, Any], expected_version: int | None) -> int:
        """Write ``record`` if we own ``group`` and its state is still at
        ``expected_version`` (None or ABSENT: the group has no state yet).

        Returns the new version. Raises NotOwnerError (nothing written, or, if
        the session ended mid-write, unknowable: the next owner's load
        decides), StateError (too large; nothing written),
        ServiceUnavailableError (no answer in time: reload before writing).
        """
        fence = self._fence(group)
        expected = ABSENT if expected_version is None else expected_version
        if expected < ABSENT:
            raise UsageError(f"expected_version must be >= {ABSENT} or None, got {expected_version}")
        stored = await self._encode(group, record)
        return await self._write(group, _Write(fence, expected, stored, [], []))

    def _fence(self, group: str) -> Fence:
        if self._ownership is None:
            raise UsageError(f"this state store reads only: it cannot write group {group!r}")
        return self._ownership.fence(group)

    async def _write(self, group: str, write: _Write) -> int | None:
        """Send a write's multis: member records and new parts first, then the
        state znode with the deletes of parts no longer named (module rule 3)."""
        parts = write.state.parts if write.state is not None else ()
        if parts:
            await self._conn.retry(f"create the state parts directory of group {group!r}", self._ensure_dir,
                                   paths.state_parts_dir(group))
        new = [Change(paths.state_part(group, name), data, False) for name, data in parts]
        pieces = chunks(write.last + new)
        write.early, write.last = pieces[:-1], pieces[-1]
        for piece in write.early:
            await self._conn.retry(f"write records of group {group!r}", self._inner_chunk, write.fence, piece,
                                   write.expected, _Attempt())
        keep = frozenset(name for name, _ in parts)
        if write.state is None:
            await self._conn.retry(f"delete the state of group {group!r}", self._inner_delete, write, keep)
            self._parts.pop(group, None)
            return None
        version = await self._conn.retry(f"write the state of group {group!r}", self._inner_write, write, keep,
                                         _Attempt())
        self._parts[group] = keep
        return version

    async def _ensure_dir(self, path: str) -> None:
        # Unfenced on purpose: an empty directory a deposed owner might create holds nothing.
        try:
            await aio.call(self._conn.client.create_async, path, b"")
        except NodeExistsError:
            pass

    async def _inner_chunk(self, fence: Fence, changes: list[Change], expected: int, attempt: _Attempt) -> None:
        if attempt.tried and await members_landed(self._conn, changes):
            return
        attempt.tried = True
        txn = self._conn.client.transaction()
        fence.add_check(txn)
        if expected != ABSENT:  # a group's first write has no state znode to check yet: the fence alone guards
            txn.check(paths.state(fence.group), expected)
        add_ops(txn, changes)
        await self._commit(fence, txn, expected, "write records of")

    async def _stale_parts(self, group: str, keep: frozenset[str]) -> tuple[list[Change], bool]:
        """The deletes of parts no header will name once ``keep`` is written, and
        whether the parts directory goes too (nothing left in it)."""
        if not keep and self._parts.get(group) == frozenset():
            return [], False  # a plain state, as we last knew it: nothing to list
        found = await list_parts(self._conn, group)
        if found is None:
            return [], False
        stale = [Change(paths.state_part(group, name), None, True) for name in sorted(found - keep)]
        return stale, not keep

    async def _inner_write(self, write: _Write, keep: frozenset[str], attempt: _Attempt) -> int:
        fence, expected = write.fence, write.expected
        path = paths.state(fence.group)
        data = write.state.data
        if attempt.tried:
            landed = await self._landed(path, data, expected)
            if landed is not None:
                return landed
        attempt.tried = True
        stale, drop_parts_dir = await self._stale_parts(fence.group, keep)
        txn = self._conn.client.transaction()
        fence.add_check(txn)
        add_ops(txn, write.last + stale)
        if drop_parts_dir:
            txn.delete(paths.state_parts_dir(fence.group))
        if write.drop_members_dir:
            txn.delete(paths.members_dir(fence.group))
        if expected == ABSENT:
            txn.create(path, data)
        else:
            txn.set_data(path, data, expected)
        results = await self._commit(fence, txn, expected, "write the state of")
        return 0 if expected == ABSENT else results[-1].version

    async def _commit(self, fence: Fence, txn, expected: int, what: str) -> list:
        """Commit a fenced multi; NotOwnerError (and drop the group) when the
        fence or the state's version says another writer moved on."""
        group = fence.group
        try:
            results = await aio.future_of(asyncio.get_running_loop(), txn.commit_async())
        except SessionExpiredError as exc:
            if isinstance(exc, ConnectionClosedError):
                raise
            self._deposed(fence, f"the ZooKeeper session that owned group {group!r} expired")
        failure = aio.transaction_failure(results)
        if failure is None:
            return results
        index, exc = failure
        if index == 0:
            self._deposed(fence, f"node {self._ownership.node_id} was deposed as owner of group {group!r} "
                                 f"(its contender {fence.path} is gone)")
        if isinstance(exc, (BadVersionError, NoNodeError, NodeExistsError)):
            found = {NodeExistsError: "exists", NoNodeError: "was deleted"}.get(type(exc), "is at another version")
            self._deposed(fence, f"the state of group {group!r} changed under node {self._ownership.node_id}: "
                                 f"expected version {expected}, but it {found}")
        raise aio.translate(exc, f"{what} group {group!r}", self._conn.hosts)

    async def _landed(self, path: str, data: bytes, expected: int) -> int | None:
        """After a lost answer: the version our write produced, or None to send again."""
        try:
            current, stat = await aio.call(self._conn.client.get_async, path)
        except NoNodeError:
            return None  # nothing there: a create did not land; a set_data will fail its version
        mine = 0 if expected == ABSENT else expected + 1
        if stat.version == mine and current == data:
            return mine
        return None

    def _deposed(self, fence: Fence, reason: str) -> None:
        self._parts.pop(fence.group, None)
        self._ownership.drop(fence.group, reason, fence)
        raise NotOwnerError(reason + "; look the coordinator up again", fence.group)

    async def delete(self, group: str, expected_version: int | None = None) -> None:
        """Delete the group's state, with its parts (fenced; at
        ``expected_version`` if given).

        Deleting a state that is already gone is not an error.
        """
        fence = self._fence(group)
        version = -1 if expected_version is None else expected_version
        await self._conn.retry(f"delete the state of group {group!r}", self._inner_delete,
                               _Write(fence, version, None, [], []), frozenset())
        self._parts.pop(group, None)

    async def _inner_delete(self, write: _Write, keep: frozenset[str] = frozenset()) -> None:
        fence, version = write.fence, write.expected
        self._parts.pop(fence.group, None)  # list what is there: a retried delete may have removed some
        stale, drop_parts_dir = await self._stale_parts(fence.group, keep)
        txn = self._conn.client.transaction()
        fence.add_check(txn)
        add_ops(txn, list(write.last) + stale)
        if drop_parts_dir:
            txn.delete(paths.state_parts_dir(fence.group))
        if write.drop_members_dir:
            txn.delete(paths.members_dir(fence.group))
        txn.delete(paths.state(fence.group), version)
        try:
            results = await aio.future_of(asyncio.get_running_loop(), txn.commit_async())
        except SessionExpiredError as exc:
            if isinstance(exc, ConnectionClosedError):
                raise
            self._deposed(fence, f"the ZooKeeper session that owned group {fence.group!r} expired")
        failure = aio.transaction_failure(results)
        if failure is None or (failure[0] == len(results) - 1 and isinstance(failure[1], NoNodeError)):
            return
        if failure[0] == 0:
            self._deposed(fence, f"node {self._ownership.node_id} was deposed as owner of group {fence.group!r}")
        if isinstance(failure[1], BadVersionError):
            self._deposed(fence, f"the state of group {fence.group!r} changed under node "
                                 f"{self._ownership.node_id}: it is no longer at version {version}")
        raise aio.translate(failure[1], f"delete the state of group {fence.group!r}", self._conn.hosts)

    async def list_groups(self) -> list[str]:
        """Every group that has a state znode, sorted."""
        return await self._conn.retry("list the groups with state", self._inner_list)

    async def _inner_list(self) -> list[str]:
        client = self._conn.client
        try:
            children = await aio.call(client.get_children_async, paths.COORDINATORS)
        except NoNodeError:
            return []
        children = paths.group_ids(children)  # znode names decoded; names that are no group's left out
        loop = asyncio.get_running_loop()
        outcomes = await aio.gather(loop, [client.exists_async(paths.state(g)) for g in children])
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return sorted(g for g, stat in zip(children, outcomes) if isinstance(stat, ZnodeStat))


def _encode_outcome(group: str, changes: list[tuple[str, dict | None, bool]], max_state_bytes: int,
                    max_group_state_bytes: int):
    """:meth:`GroupStateStore.write_changes`' records encoded, all of them:
    (the state znode's stored form or None to delete it, the other znodes'
    changes, drop the members directory, ensure it). Pure: run in a worker
    thread, once, for many records. Raises StateTooLargeError, UsageError."""
    state: tuple[dict | None, bool] | None = None
    members: list[Change] = []
    drop_dir = ensure_dir = False
    for key, record, existed in changes:
        if key == "":
            state = (record, existed)
        elif key == MEMBERS_DIR_KEY:
            drop_dir, ensure_dir = record is None, record is not None
        elif key.startswith(MEMBERS_PREFIX):
            data = None if record is None else encode_record(group, record)
            if data is not None and len(data) > FOLD_OVER_BYTES:
                plain = len(data)  # a member holding thousands of partitions: runs folded
                data = encode_record(group, compact_member_record(record))
                if len(data) > max_state_bytes:
                    raise StateTooLargeError(
                        f"a member record of group {group!r} is {plain} bytes ({len(data)} with its partition "
                        f"runs folded), over the limit of {max_state_bytes} bytes (nothing was written)")
            members.append(Change(paths.member(group, key[len(MEMBERS_PREFIX):]), data, existed))
        elif key == TARGET_KEY:
            data = None if record is None else encode_record(group, record)
            if data is not None and len(data) > max_state_bytes:
                raise StateTooLargeError(
                    f"the target assignment record of group {group!r} is {len(data)} bytes compressed, over the "
                    f"limit of {max_state_bytes} bytes (nothing was written)")
            members.append(Change(paths.target(group), data, existed))
        else:
            raise UsageError(f"an outcome of group {group!r} names an unknown record {key!r}")
    if state is None:
        raise UsageError(f"an outcome of group {group!r} must write its state znode")
    record, _ = state
    stored = None if record is None else encode_group_state(group, record, max_state_bytes, max_group_state_bytes)
    return stored, members, drop_dir, ensure_dir
