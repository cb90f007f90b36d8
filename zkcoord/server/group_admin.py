"""What administrators ask of the groups a daemon serves: describe, list,
delete, and the cleanup of groups that hold nothing.

This module owns DescribeGroups, ListGroups and DeleteGroups for served
groups, and the periodic removal of groups that hold nothing. A request
about a group that exists nowhere is answered as Kafka answers a group it
never heard of (Dead; GROUP_ID_NOT_FOUND), without contending for it:
asking about a name creates nothing in ZooKeeper
(:meth:`~zkcoord.server.manager.GroupManager.unknown`).

Cleanup, every ``cleanup_interval_ms`` (Kafka's
``offsets.retention.check.interval.ms``): a group this daemon owns that
holds nothing (its kind says when: for a classic group Empty, no members,
``zookeeper`` offset storage) and has no committed offsets is removed, as
Kafka's offsets cleanup removes such groups: its state znode (fenced, at its
version), then its election znodes
(:meth:`~zkcoord.zk.ownership.GroupOwnership.retire`). A request that made
this daemon contend for a group with nothing stored (a DescribeGroups or
OffsetFetch of an unknown group) so leaves no znodes for long, and
ListGroups never lists such a group.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import describe_missing
from zkcoord.core.groups import kind_of
from zkcoord.errors import ZkcoordError
from zkcoord.server.group_runtime import GroupRuntime, GroupUnavailableError
from zkcoord.tasks import Background
from zkcoord.wire.bulk_work import SLICE, pause_every

if TYPE_CHECKING:
    from zkcoord.server.manager import GroupManager

__all__ = ["GroupAdmin"]

log = logging.getLogger(__name__)
E = ErrorCode


class GroupAdmin:
    """Describe, list, delete and clean up the groups ``manager`` serves."""

    def __init__(self, manager: GroupManager, *, cleanup_interval_ms: int = 600_000):
        self.manager = manager
        self.cleanup_interval_ms = cleanup_interval_ms
        self._cleanup_task: asyncio.Task | None = None
        self._background = Background(log, "group admin")

    async def _each_group(self, group_ids: list[str], if_unknown, served) -> dict:
        """{id: if_unknown(id) for a group that exists nowhere, else await
        served(id)}, the unknown ones looked up together in slices of :data:`SLICE`."""
        answers = {}
        for start in range(0, len(group_ids), SLICE):
            chunk = group_ids[start:start + SLICE]
            unknown = await self.manager.unknown(chunk)
            for group_id in chunk:
                answers[group_id] = if_unknown(group_id) if group_id in unknown else await served(group_id)
        return answers

    # -- DescribeGroups, ListGroups ----------------------------------------------------
    async def describe_groups(self, group_ids: list[str]) -> dict[str, tuple[ErrorCode, object]]:
        """DescribeGroups of distinct ids: {id: (error, description)}; an
        unknown group is Dead without contending for it."""
        return await self._each_group(group_ids, lambda g: (E.NONE, describe_missing(g)), self._describe)

    async def describe(self, group_id):
        return (await self.describe_groups([group_id]))[group_id]

    async def _describe(self, group_id):
        manager = self.manager
        try:
            runtime = await manager.runtime(group_id, allow_empty=True)
        except GroupUnavailableError as exc:
            return exc.code, None
        exists = await manager.exists(runtime)
        return E.NONE, await runtime.read(
            lambda g, now: kind_of(g).describe(g) if exists else describe_missing(group_id))

    async def list_groups(self) -> list[tuple[str, str, str, str]]:
        """(group id, state name, protocol type, group type) of every group served and known to exist."""
        listed = []
        for i, (group_id, runtime) in enumerate(list(self.manager.runtimes.items())):
            await pause_every(i)
            if runtime.active and (runtime.version is not None or runtime.group.size > 0):
                group = runtime.group
                kind = kind_of(group)
                listed.append((group_id, *kind.listing(group), kind.name))
        return listed

    # -- DeleteGroups --------------------------------------------------------------------
    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """DeleteGroups of distinct names: {name: error}; an unknown group is
        GROUP_ID_NOT_FOUND without contending for it."""
        return await self._each_group(group_ids, lambda g: E.GROUP_ID_NOT_FOUND, self.delete_group)

    async def delete_group(self, group_id: str) -> ErrorCode:
        manager = self.manager
        try:
            runtime = await manager.runtime(group_id, allow_empty=True)
            token = runtime.next_token()
            exists = await manager.exists(runtime)
            result = await runtime.call(token, lambda g, now: kind_of(g).handle_delete(g, token, exists))
            if result.error is E.NONE:
                await manager.offsets.delete_group(group_id, fence=manager.ownership.fence(group_id))
                manager.runtimes.pop(group_id, None)
            return result.error
        except GroupUnavailableError as exc:
            return exc.code
        except ZkcoordError as exc:
            log.warning("DeleteGroups %s failed: %s", group_id, exc)
            return E.UNKNOWN_SERVER_ERROR

    # -- cleanup of groups that hold nothing -------------------------------------------
    def start_cleanup(self) -> None:
        """Start the periodic cleanup (module docstring); stopped by :meth:`stop_cleanup`."""
        if self._cleanup_task is None:
            self._cleanup_task = self._background.spawn(self._cleanup_loop(), "remove empty groups")

    def stop_cleanup(self) -> None:
        if self._cleanup_task is not None:
            self._cleanup_task.cancel()
            self._cleanup_task = None

    async def _cleanup_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cleanup_interval_ms / 1000)
            await self.cleanup_empty_groups()

    async def cleanup_empty_groups(self) -> list[str]:
        """Remove every owned group that holds nothing; the ids removed."""
        removed = []
        for group_id, runtime in list(self.manager.runtimes.items()):
            try:
                if await self._remove_if_empty(group_id, runtime):
                    removed.append(group_id)
            except ZkcoordError as exc:  # the next round tries again
                log.warning("group %s: not removed although empty: %s", group_id, exc)
        return removed

    async def _remove_if_empty(self, group_id: str, runtime: GroupRuntime) -> bool:
        manager = self.manager

        def holds_nothing(group) -> bool:
            return kind_of(group).holds_nothing(group)

        if manager.serving(group_id) is not runtime or not holds_nothing(runtime.group):
            return False
        if await manager.offsets.fetch(group_id):
            return False
        if not await runtime.retire(holds_nothing):
            return False
        manager.stepped_down(group_id)
        await manager.ownership.retire(group_id)
        log.info("group %s: Empty with no committed offsets, removed with its znodes", group_id)
        return True
