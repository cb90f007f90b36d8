"""The migration toolkit's znodes: ``/zkcoord/migrations/<group>`` (a
group's migration record) and its ``backup`` and ``archive`` children.

This module owns reading and writing them. What the records mean (phases,
the moves between them, their fields) is :mod:`zkcoord.migrate.status`'s.

Rules: every write of a record is versioned (``ConflictError`` when another
command changed it meanwhile); a write whose answer was lost is resolved by
reading it back; a record that is not version-1 JSON is a StateError naming
its znode; a record is never over ZooKeeper's 1 MB limit.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, SessionExpiredError

from zkcoord.errors import ConflictError, StateError, ZkcoordError
from zkcoord.zk import aio, paths
from zkcoord.zk.bulk_reads import GET_DATA, read_znodes
from zkcoord.zk.connection import ZkConnection

__all__ = ["RECORD_VERSION", "MAX_BYTES", "MigrationRecords", "encode", "decode_record"]

RECORD_VERSION = 1
MAX_BYTES = 1_000_000


def encode(what: str, value: dict[str, Any]) -> bytes:
    data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    if len(data) > MAX_BYTES:
        raise StateError(f"{what} would be {len(data)} bytes, over ZooKeeper's limit of {MAX_BYTES}; "
                         "migrate fewer partitions per group or raise jute.maxbuffer")
    return data


def decode_record(path: str, data: bytes) -> dict[str, Any]:
    """A migration znode's record; StateError naming the znode when it is not one."""
    try:
        record = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise StateError(f"migration znode {path} is not JSON ({exc}); inspect it, then repair or delete it") from None
    if not isinstance(record, dict) or record.get("v") != RECORD_VERSION:
        raise StateError(f"migration znode {path} is not a version-{RECORD_VERSION} record; "
                         "inspect it, then repair or delete it")
    return record


class MigrationRecords:
    """The migration records of every group, and their ``backup`` and
    ``archive`` children; no I/O in the constructor."""

    def __init__(self, conn: ZkConnection) -> None:
        self._conn = conn

    async def list_groups(self) -> list[str]:
        async def inner() -> list[str]:
            try:
                return paths.group_ids(await aio.call(self._conn.client.get_children_async, paths.MIGRATIONS))
            except NoNodeError:
                return []
        return await self._conn.retry("list the migration records", inner)

    async def load(self, group: str) -> tuple[dict[str, Any] | None, int]:
        """(record, version); (None, -1) if the group has none."""
        return await self._read(paths.migration(group))

    async def load_child(self, path: str) -> dict[str, Any] | None:
        return (await self._read(path))[0]

    async def _read(self, path: str) -> tuple[dict[str, Any] | None, int]:
        async def inner():
            try:
                data, stat = await aio.call(self._conn.client.get_async, path)
            except NoNodeError:
                return None, -1
            if not data:  # a parent created by makepath for a child
                return None, stat.version
            return decode_record(path, data), stat.version
        return await self._conn.retry(f"read {path}", inner)

    async def write(self, path: str, data: bytes, version: int) -> int:
        """Set ``path`` at ``version`` (-1: create, or fill a data-less parent
        at 0); ConflictError if someone else wrote it meanwhile."""
        tried = [False]

        async def inner() -> int:
            client = self._conn.client
            if tried[0]:
                current, stat = await aio.call(client.get_async, path)
                if current == data:
                    return stat.version  # our write landed; its answer was lost
            tried[0] = True
            try:
                if version < 0:
                    await aio.call(client.create_async, path, data, makepath=True)
                    return 0
                return (await aio.call(client.set_async, path, data, version)).version
            except (NodeExistsError, BadVersionError, NoNodeError):
                raise ConflictError(f"{path} was changed by another command while this one ran; "
                                    "nothing of this step was written: re-run") from None
        return await self._conn.retry(f"write {path}", inner)

    async def put(self, path: str, data: bytes) -> None:
        """Create or overwrite ``path`` (archives)."""
        async def inner() -> None:
            try:
                await aio.call(self._conn.client.set_async, path, data)
            except NoNodeError:
                try:
                    await aio.call(self._conn.client.create_async, path, data, makepath=True)
                except NodeExistsError:
                    await aio.call(self._conn.client.set_async, path, data)
        await self._conn.retry(f"write {path}", inner)

    async def create_once(self, path: str, data: bytes) -> bool:
        """Create ``path`` unless it exists; True if this call created it."""
        async def inner() -> bool:
            try:
                await aio.call(self._conn.client.create_async, path, data, makepath=True)
                return True
            except NodeExistsError:
                current, _ = await aio.call(self._conn.client.get_async, path)
                return current == data  # ours, if a retry follows a lost answer
        return await self._conn.retry(f"create {path}", inner)

    async def load_many(self, groups: list[str], *, multi: bool) -> list:
        """Each group's ``(record, version)`` as :meth:`load` gives it, or the
        ZkcoordError its read raised; with ``multi``, ZooKeeper's multiRead
        (:mod:`zkcoord.zk.bulk_reads`): one request per 1000 groups."""
        if not multi:
            return await asyncio.gather(*(self.load(g) for g in groups), return_exceptions=True)
        loaded: list = [None] * len(groups)
        wanted = []
        for i, group in enumerate(groups):
            try:
                wanted.append((i, paths.migration(group)))
            except ZkcoordError as exc:
                loaded[i] = exc

        async def read() -> list:
            outcomes = await read_znodes(self._conn, [(GET_DATA, path) for _, path in wanted], multi=True,
                                         stats=True)
            for outcome in outcomes:
                if isinstance(outcome, (*aio.RETRYABLE, SessionExpiredError)):
                    raise outcome  # the connection: the whole read again, as load's retry would
            return outcomes

        outcomes = await self._conn.retry(f"read the migration records of {len(wanted)} group(s)", read)
        for (i, path), outcome in zip(wanted, outcomes):
            if isinstance(outcome, NoNodeError):
                loaded[i] = (None, -1)
            elif isinstance(outcome, BaseException):
                loaded[i] = aio.translate(outcome, f"read {path}", self._conn.hosts)
            elif not outcome[0]:  # a parent created by makepath for a child
                loaded[i] = (None, outcome[1].version)
            else:
                try:
                    loaded[i] = (decode_record(path, outcome[0]), outcome[1].version)
                except ZkcoordError as exc:
                    loaded[i] = exc
        return loaded

