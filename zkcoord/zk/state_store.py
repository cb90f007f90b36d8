"""The fenced, versioned JSON state of every group.

This module owns the znodes ``/coordinators/<group>/state``: one compact JSON
object per group (the record of :mod:`zkcoord.core.group_record`), whose
znode version is the optimistic-concurrency token the runtime passes back.

Rules:

1. Every write is ONE multi-op: ``check`` our contender znode (the
   :class:`~zkcoord.zk.ownership.Fence`) + ``set_data`` at the version we
   read (``create`` when the group has no state yet). It lands only if we
   still own the group and nobody wrote since we read.
2. A failed fence or version is :class:`~zkcoord.errors.NotOwnerError`, and
   the ownership module drops the group (reported LOST): the runtime stops
   serving it; a later contend + load starts it afresh.
3. Compact JSON (no spaces). A record over ``max_state_bytes`` (default
   1,000,000: under ZooKeeper's 1 MiB ``jute.maxbuffer`` with room for the
   multi's other bytes) is a StateError before anything is written.
4. A write whose answer was lost with the connection is resolved after the
   reconnect by reading the state back: our bytes at the next version mean
   it landed (kazoo's "NodeExistsError may mean we did it" habit).
5. A corrupt state znode is a StateError for that group alone.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import (
    BadVersionError, ConnectionClosedError, NodeExistsError, NoNodeError, SessionExpiredError,
)
from kazoo.protocol.states import ZnodeStat

from zkcoord.core.groups import record_problem
from zkcoord.errors import NotOwnerError, StateError, StateTooLargeError, UsageError, ZkcoordError
from zkcoord.zk import aio, paths
from zkcoord.zk.group_records import (
    MEMBERS_DIR_KEY, MEMBERS_PREFIX, Change, add_ops, chunks, encode_record, members_landed, read_member_records,
)
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.multi_read import GET_DATA, read_many
from zkcoord.zk.ownership import Fence, GroupOwnership

__all__ = ["ABSENT", "DEFAULT_MAX_STATE_BYTES", "GroupStateStore", "encode_state", "decode_state"]

ABSENT = -1  # the version of a group without a state znode
DEFAULT_MAX_STATE_BYTES = 1_000_000


def encode_state(group: str, record: dict[str, Any], max_bytes: int = DEFAULT_MAX_STATE_BYTES) -> bytes:
    """Compact UTF-8 JSON of ``record``; StateError if it is over ``max_bytes``."""
    if not isinstance(record, dict):
        raise StateError(f"the state of group {group!r} must be a JSON object, got {type(record).__name__}")
    try:
        data = json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise StateError(f"the state of group {group!r} cannot be written as JSON: {exc}") from None
    if len(data) > max_bytes:
        raise StateTooLargeError(f"the state of group {group!r} is {len(data)} bytes, over the limit of {max_bytes} "
                         "bytes; the group has too many members or too much metadata (nothing was written)")
    return data


def decode_state(group: str, path: str, data: bytes) -> dict[str, Any]:
    """The record in a state znode, checked by
    :func:`~zkcoord.core.group_record.record_problem`; StateError naming the
    znode and saying what is wrong with it."""
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
    problem = record_problem(record)
    if problem is not None:
        raise StateError(f"state znode {path} of group {group!r} is not a valid group record: {problem}{fix}")
    return record


def _names_consumer(data: bytes) -> bool:
    """Does a state znode hold a consumer group's record (checked whole, with its members, by the caller)?"""
    try:
        record = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        return False
    return isinstance(record, dict) and record.get("t") == "consumer"


@dataclass
class _Attempt:
    tried: bool = False  # a multi was sent and its answer may have been lost


class GroupStateStore:
    """Loads and writes group states, fenced by ``ownership``."""

    def __init__(self, conn: ZkConnection, ownership: GroupOwnership, *,
                 max_state_bytes: int = DEFAULT_MAX_STATE_BYTES) -> None:
        self._conn = conn
        self._ownership = ownership
        self.max_state_bytes = max_state_bytes

    async def load(self, group: str) -> tuple[dict[str, Any] | None, int]:
        """``(record, version)``, or ``(None, ABSENT)`` if the group has no state.

        StateError if the znode is corrupt; ServiceUnavailableError if
        ZooKeeper does not answer in time.
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
        path = paths.state(group)
        if read is None:
            return None, ABSENT
        if read is not False:
            data, stat = read
        else:
            try:
                data, stat = await aio.call(self._conn.client.get_async, path)
            except NoNodeError:
                return None, ABSENT
        record = decode_state(group, path, data) if not _names_consumer(data) else json.loads(data.decode())
        if record.get("t") == "consumer":  # its members are znodes of their own
            record["members"] = await read_member_records(self._conn, group)
            problem = record_problem(record)
            if problem is not None:
                raise StateError(f"group {group!r}: {problem}; repair it, or delete {paths.coordinator(group)} "
                                 "to start the group afresh")
            return record, stat.version
        return record, stat.version

    async def write_changes(self, group: str, changes: list[tuple[str, dict | None, bool]],
                            expected_version: int | None) -> int | None:
        """Write an outcome's records (module :mod:`~zkcoord.zk.group_records`):
        ``(key, record or None to delete, existed)`` with key ``""`` the state
        znode (last), ``"members/<id>"`` a member record, ``"members"`` the
        members directory ({} ensures it, None deletes it). Returns the state's
        new version (None when it was deleted). Raises as :meth:`write`."""
        fence = self._ownership.fence(group)
        expected = ABSENT if expected_version is None else expected_version
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
                if data is not None and len(data) > self.max_state_bytes:
                    raise StateTooLargeError(f"a member record of group {group!r} is {len(data)} bytes, over the "
                                             f"limit of {self.max_state_bytes} bytes (nothing was written)")
                members.append(Change(paths.member(group, key[len(MEMBERS_PREFIX):]), data, existed))
        if state is None:
            raise UsageError(f"an outcome of group {group!r} must write its state znode")
        record, _ = state
        data = None if record is None else encode_state(group, record, self.max_state_bytes)
        if ensure_dir:
            await self._conn.retry(f"create the members directory of group {group!r}", self._ensure_members, group)
        pieces = chunks(members)
        for piece in pieces[:-1]:
            await self._conn.retry(f"write member records of group {group!r}", self._inner_chunk, fence, piece,
                                   expected, _Attempt())
        if data is None:
            await self._conn.retry(f"delete the state of group {group!r}", self._inner_delete, fence, expected,
                                   pieces[-1], drop_dir)
            return None
        return await self._conn.retry(f"write the state of group {group!r}", self._inner_write, fence, data,
                                      expected, _Attempt(), pieces[-1], drop_dir)

    async def _ensure_members(self, group: str) -> None:
        # Unfenced on purpose: an empty directory a deposed owner might create holds nothing.
        try:
            await aio.call(self._conn.client.create_async, paths.members_dir(group), b"")
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
        await self._commit(fence, txn, expected, "write member records of")

    async def write(self, group: str, record: dict[str, Any], expected_version: int | None) -> int:
        """Write ``record`` if we own ``group`` and its state is still at
        ``expected_version`` (None or ABSENT: the group has no state yet).

        Returns the new version. Raises NotOwnerError (nothing written, or, if
        the session ended mid-write, unknowable: the next owner's load
        decides), StateError (too large; nothing written),
        ServiceUnavailableError (no answer in time: reload before writing).
        """
        fence = self._ownership.fence(group)
        data = encode_state(group, record, self.max_state_bytes)
        expected = ABSENT if expected_version is None else expected_version
        if expected < ABSENT:
            raise UsageError(f"expected_version must be >= {ABSENT} or None, got {expected_version}")
        return await self._conn.retry(f"write the state of group {group!r}", self._inner_write,
                                      fence, data, expected, _Attempt())

    async def _inner_write(self, fence: Fence, data: bytes, expected: int, attempt: _Attempt,
                           members: list[Change] = (), drop_dir: bool = False) -> int:
        path = paths.state(fence.group)
        if attempt.tried:
            landed = await self._landed(path, data, expected)
            if landed is not None:
                return landed
        attempt.tried = True
        txn = self._conn.client.transaction()
        fence.add_check(txn)
        add_ops(txn, list(members))
        if drop_dir:
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
        self._ownership.drop(fence.group, reason, fence)
        raise NotOwnerError(reason + "; look the coordinator up again", fence.group)

    async def delete(self, group: str, expected_version: int | None = None) -> None:
        """Delete the group's state (fenced; at ``expected_version`` if given).

        Deleting a state that is already gone is not an error.
        """
        fence = self._ownership.fence(group)
        version = -1 if expected_version is None else expected_version
        await self._conn.retry(f"delete the state of group {group!r}", self._inner_delete, fence, version)

    async def _inner_delete(self, fence: Fence, version: int, members: list[Change] = (),
                            drop_dir: bool = False) -> None:
        txn = self._conn.client.transaction()
        fence.add_check(txn)
        add_ops(txn, list(members))
        if drop_dir:
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
