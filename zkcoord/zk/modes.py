"""A group's offset-storage mode (``zookeeper`` | ``dual`` | ``kafka``) and how it changes.

The mode is the ``"os"`` field of the group's state record
(``/coordinators/<group>/state``). This module owns changing it without
restarting daemons or consumers, and without ever making two writers race
on that znode:

*Only the group's elected owner writes its state* (every write is a
multi-op: check the owner's contender znode + a versioned set). A migrate
command that wrote the state behind a live owner's back would make the
owner's next write fail its version check, which the state store rightly
treats as "deposed": the owner would drop the group and its clients would
see NOT_COORDINATOR. So a command asks, or becomes, the owner:

=====================  =======================================================
owner of the group     what :func:`set_offset_storage` does
=====================  =======================================================
already in the mode    nothing (``via="unchanged"``)
none                   takes the group's election itself (its contender holds
                       :data:`TOOL_NODE_ID`), deletes any stale request,
                       writes the record with the new mode (an Empty group's
                       record if there is none), fenced and versioned, and
                       releases the election (``via="direct"``)
a daemon               writes ``/zkcoord/migrations/<group>/mode-request``
                       ``{"os": mode, "id": ...}``; the owner's watch hands it
                       to its group runtime, which persists the mode through
                       its own fenced write and applies it in memory (members
                       kept). The command polls the state until it shows the
                       mode, then deletes its request (``via="owner <id>"``)
the owner changes      the command looks again; a daemon that takes the
                       group over reads a pending request when it loads it
no answer in time      the request is withdrawn (deleted at its version)
                       and ServiceUnavailableError names the owner
=====================  =======================================================

While a command holds a group's election, FindCoordinator answers
COORDINATOR_NOT_AVAILABLE (the owner id is no daemon's); clients retry.

The owner side is :class:`ModeRequestWatch`: one exists-watch per owned
group, re-armed after each event; the callback runs on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import ForceRetryError

from zkcoord.core.group_record import from_record, to_record
from zkcoord.core.membership import OFFSET_STORAGES, new_group
from zkcoord.errors import ServiceUnavailableError, UsageError
from zkcoord.zk import aio, election, paths
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.watches import last_zxid, set_watches
from zkcoord.zk.election import TOOL_NODE_ID
from zkcoord.zk.ownership import GroupOwnership
from zkcoord.zk.state_store import GroupStateStore, decode_state

__all__ = ["TOOL_NODE_ID", "ModeChange", "check_mode", "read_mode", "set_offset_storage", "parse_request",
           "ModeRequestWatch"]

log = logging.getLogger(__name__)
_OWNER_RECHECK_S = 1.0


@dataclass(frozen=True)
class ModeChange:
    """``before`` -> ``after``; ``via``: ``unchanged``, ``direct`` or ``owner <node id>``."""

    group: str
    before: str
    after: str
    via: str


def check_mode(mode: object) -> str:
    if mode not in OFFSET_STORAGES:
        raise UsageError(f"offset storage {mode!r} is not one of {', '.join(OFFSET_STORAGES)}")
    return mode  # type: ignore[return-value]


async def read_mode(conn: ZkConnection, group: str) -> tuple[str, bool]:
    """(the group's mode, whether it has a state record); StateError if corrupt."""
    record = await _read_state(conn, group)
    return (str(record.get("os", "zookeeper")), True) if record is not None else ("zookeeper", False)


async def _read_state(conn: ZkConnection, group: str) -> dict | None:
    path = paths.state(group)

    async def inner() -> dict | None:
        try:
            data, _ = await aio.call(conn.client.get_async, path)
        except NoNodeError:
            return None
        return decode_state(group, path, data)

    return await conn.retry(f"read the state of group {group!r}", inner)


async def _current_owner(conn: ZkConnection, group: str) -> int | None:
    """Node id in the lowest contender of the group's election, None if none
    (StateError when it holds no node id: :mod:`zkcoord.zk.election`)."""
    async def inner() -> int | None:
        found = await election.lowest(conn.client, group)
        return None if found is None else found[0]

    return await conn.retry(f"look up the owner of group {group!r}", inner)


async def set_offset_storage(conn: ZkConnection, group: str, mode: str, *, timeout_s: float = 30.0,
                             poll_s: float = 0.05) -> ModeChange:
    """Make ``mode`` the group's offset storage (see the module's table)."""
    check_mode(mode)
    paths.state(group)  # validates the name before any I/O
    record = await _read_state(conn, group)
    before = str(record.get("os", "zookeeper")) if record else "zookeeper"
    if before == mode:
        await _withdraw_stale_request(conn, group, mode)
        return ModeChange(group, before, mode, "unchanged")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        owner = await _current_owner(conn, group)
        if owner is None and await _write_as_owner(conn, group, mode):
            return ModeChange(group, before, mode, "direct")
        if owner is not None and owner != TOOL_NODE_ID:
            if await _ask_owner(conn, group, mode, owner, deadline, poll_s):
                return ModeChange(group, before, mode, f"owner {owner}")
        if loop.time() >= deadline:
            raise ServiceUnavailableError(
                f"group {group!r} was not switched to {mode!r} within {timeout_s:g} s: its owner "
                f"(node {owner}) did not apply the request; check that daemon (its log, and that it runs a "
                "zkcoord version with migration support); the request was withdrawn: see `zkcoord migrate "
                "status` and re-run when it answers (re-running is safe)")
        await asyncio.sleep(poll_s)  # another migrate command holds the election, or the owner just left


async def _write_as_owner(conn: ZkConnection, group: str, mode: str) -> bool:
    """Win the group's election, write the mode fenced, release; False if a daemon won."""
    ownership = GroupOwnership(conn, TOOL_NODE_ID)
    await ownership.start()
    try:
        await ownership.contend(group)
        if not ownership.is_owned(group):
            return False
        await conn.retry(f"delete the mode request of group {group!r}", _delete_request, conn, group, -1)
        store = GroupStateStore(conn, ownership)
        record, version = await store.load(group)
        await store.write(group, _with_mode(group, record, mode), version)
        return True
    finally:
        await ownership.stop()


def _with_mode(group: str, record: dict | None, mode: str) -> dict:
    if record is None:
        return to_record(new_group(group, mode))
    changed = dict(record, os=mode)
    from_record(group, changed)  # StateError for a corrupt record: never write one back
    return changed


async def _ask_owner(conn: ZkConnection, group: str, mode: str, owner: int, deadline: float,
                     poll_s: float) -> bool:
    """Post a request and wait until the state shows ``mode``; False if the
    owner changed or the deadline passed (the request is withdrawn)."""
    loop = asyncio.get_running_loop()
    data = json.dumps({"os": mode, "id": uuid.uuid4().hex, "at_ms": int(time.time() * 1000)}).encode()
    version = await conn.retry(f"post the mode request of group {group!r}", _put_request, conn, group, data)
    next_check = loop.time() + _OWNER_RECHECK_S
    try:
        while loop.time() < deadline:
            record = await _read_state(conn, group)
            if record is not None and record.get("os") == mode:
                return True
            if loop.time() >= next_check:
                if await _current_owner(conn, group) != owner:
                    return False
                next_check = loop.time() + _OWNER_RECHECK_S
            await asyncio.sleep(poll_s)
        return False
    finally:
        await conn.retry(f"withdraw the mode request of group {group!r}", _delete_request, conn, group, version)


async def _put_request(conn: ZkConnection, group: str, data: bytes) -> int:
    """Create or overwrite the request; its new version."""
    path = paths.mode_request(group)
    try:
        stat = await aio.call(conn.client.set_async, path, data)
        return stat.version
    except NoNodeError:
        pass
    try:
        await aio.call(conn.client.create_async, path, data, makepath=True)
        return 0
    except NodeExistsError:
        raise ForceRetryError() from None  # created meanwhile: overwrite it


async def _delete_request(conn: ZkConnection, group: str, version: int) -> None:
    """Delete the request if it is still at ``version`` (-1: any)."""
    try:
        await aio.call(conn.client.delete_async, paths.mode_request(group), version)
    except (NoNodeError, BadVersionError):
        pass  # gone, or a newer request (another command's) that is not ours to withdraw


async def _withdraw_stale_request(conn: ZkConnection, group: str, mode: str) -> None:
    """Delete a request for another mode left by a command that died waiting,
    so an owner loading the group later does not apply it."""
    async def inner() -> None:
        try:
            data, stat = await aio.call(conn.client.get_async, paths.mode_request(group))
        except NoNodeError:
            return
        if _json_mode(data) != mode:
            await _delete_request(conn, group, stat.version)
    await conn.retry(f"withdraw a stale mode request of group {group!r}", inner)


def _json_mode(data: bytes | None) -> object:
    try:
        return json.loads(data or b"").get("os")
    except (ValueError, AttributeError):
        return None


def parse_request(group: str, data: bytes | None) -> str | None:
    """The mode a request znode asks for, None if it asks for nothing valid."""
    mode = _json_mode(data)
    if mode not in OFFSET_STORAGES:
        log.warning("ignoring the mode request of group %s: %r is not a valid request", group, (data or b"")[:80])
        return None
    return mode


OnRequest = Callable[[str, str], Awaitable[None]]  # (group, mode) -> apply it


class ModeRequestWatch:
    """The owner side: calls ``on_request(group, mode)`` on the event loop
    whenever a watched group's mode request exists or changes. No I/O until
    :meth:`watch`; watches of unwatched groups fire at most once more and are ignored."""

    def __init__(self, conn: ZkConnection, on_request: OnRequest) -> None:
        self._conn = conn
        self._on_request = on_request
        self._tokens: dict[str, object] = {}
        self._tasks: set[asyncio.Task] = set()

    def watch(self, group: str) -> None:
        """Start watching (again, after a reload); call on the loop thread."""
        token = object()
        self._tokens[group] = token
        self._arm(asyncio.get_running_loop(), group, token)

    async def watch_many(self, groups: list[str]) -> None:
        """:meth:`watch` of many groups (a takeover), their watches set in one
        SetWatches (:mod:`zkcoord.zk.watches`): a request that exists fires
        its watch at once and is delivered as :meth:`watch` delivers it."""
        loop = asyncio.get_running_loop()
        armed = []
        for group in groups:
            self._tokens[group] = token = object()
            armed.append((group, token))
        watches = [(paths.mode_request(g), lambda event, g=g, t=t: aio.post(loop, self._fired, loop, g, t))
                   for g, t in armed]
        try:
            await set_watches(self._conn, last_zxid(self._conn), exist=watches)
        except Exception as exc:  # connection trouble: one at a time, as watch() does
            log.debug("mode request watches of %d groups not set at once (%r)", len(groups), exc)
            for group, token in armed:
                if self._tokens.get(group) is token:
                    self._arm(loop, group, token)

    def unwatch(self, group: str) -> None:
        self._tokens.pop(group, None)

    def unwatch_all(self) -> None:
        self._tokens.clear()

    def _arm(self, loop: asyncio.AbstractEventLoop, group: str, token: object) -> None:
        result = self._conn.client.exists_async(
            paths.mode_request(group), watch=lambda event: aio.post(loop, self._fired, loop, group, token))
        result.rawlink(lambda r: aio.post(loop, self._armed, loop, group, token,
                                          r.value if r.successful() else r.exception))

    def _fired(self, loop: asyncio.AbstractEventLoop, group: str, token: object) -> None:
        if self._tokens.get(group) is token:
            self._arm(loop, group, token)  # re-arm first; its answer delivers what is there now

    def _armed(self, loop: asyncio.AbstractEventLoop, group: str, token: object, outcome: object) -> None:
        if self._tokens.get(group) is not token:
            return
        if isinstance(outcome, ZnodeStat):
            task = loop.create_task(self._deliver(group, token))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif isinstance(outcome, BaseException):  # connection trouble: no watch is set; try again
            log.debug("mode request watch of group %s not armed (%r); retrying", group, outcome)
            loop.call_later(1.0, self._fired, loop, group, token)

    async def _deliver(self, group: str, token: object) -> None:
        while self._tokens.get(group) is token:
            try:
                data, _ = await aio.call(self._conn.client.get_async, paths.mode_request(group))
            except NoNodeError:
                return
            except Exception as exc:  # connection trouble; the re-armed watch or a reload brings it again
                log.warning("could not read the mode request of group %s: %r", group, exc)
                return
            mode = parse_request(group, data)
            if mode is None or self._tokens.get(group) is not token:
                return
            try:
                await self._on_request(group, mode)
                return
            except Exception as exc:  # e.g. ZooKeeper busy: try again shortly; the command waits
                log.warning("group %s: mode request %r not applied (%s); retrying in 1 s", group, mode, exc)
            await asyncio.sleep(1.0)
