"""A heartbeat that waited for a takeover's reservation of its group is
answered as a loading group's heartbeat is (zkcoord.server.manager.GroupManager.runtime)."""

from __future__ import annotations

import asyncio

from test_migrate_daemon_storage import Ownership, Store, ZkOffsets

from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import GroupConfig
from zkcoord.server.manager import GroupManager


def run(coroutine):
    return asyncio.run(coroutine)


class Unowned(Ownership):
    """Ownership of a daemon that owns nothing and contends for nothing yet."""

    def is_owned(self, group):
        return False

    def is_contending(self, group):
        return False


def test_a_heartbeat_that_waited_for_the_reservation_of_its_group_is_answered_without_its_load():
    """A heartbeat for a group nobody owns, come while a takeover lists the
    groups to take, waits for the reservation; its group reserved (loading),
    it is answered as a loading group's heartbeat is (None: NONE), not held
    until the group's batch is loaded (the answers of a batch of 500 groups
    going out in the same instant)."""
    async def scenario():
        manager = GroupManager(1, GroupConfig(), Unowned(), Store({}), ZkOffsets(), nodes=None)
        manager.takeover._changed()  # a daemon left: the round lists its groups
        heartbeat = asyncio.create_task(manager.runtime("g", loading_code=ErrorCode.NONE))
        await asyncio.sleep(0)
        assert not heartbeat.done()  # waits for the reservation
        reserved = manager.reserve_many(["g"])  # the round reserves it; its load is not done (never, here)
        manager.takeover._round_reserved(pending=False)
        answer = await asyncio.wait_for(heartbeat, 30)
        reserved["g"].cancel()
        return answer

    assert run(scenario()) is None

