"""Groups in transit from a daemon that left (zkcoord.server.takeover):
a FindCoordinator for one waits for the takeover round that finds it free
and names its new owner, and a round does not wait for an earlier round's
loads before it reserves what was released meanwhile."""

from __future__ import annotations

import asyncio

import pytest
from test_migrate_daemon_storage import Store, ZkOffsets

from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import GroupConfig
from zkcoord.server import takeover
from zkcoord.server.group_runtime import GroupUnavailableError
from zkcoord.server.manager import GroupManager
from zkcoord.zk.nodes import NodeInfo
from zkcoord.zk.ownership import Orphans

HERE, LEFT = 2, 1  # this daemon, and the stopping one: unregistered, its groups released one by one


def info(node_id: int) -> NodeInfo:
    return NodeInfo(node_id, "127.0.0.1", 9000 + node_id, "test", 0, 0)


class Nodes:
    """The registrations under /zkcoord/nodes; ``leave`` fires the watches."""

    def __init__(self, registered: set[int]) -> None:
        self.registered = set(registered)
        self.watches = []
        self.listed = asyncio.Event()

    async def nodes(self, on_change=None):
        if on_change is not None:
            self.watches.append(on_change)
        self.listed.set()
        return {n: info(n) for n in sorted(self.registered)}

    async def node(self, node_id):
        return info(node_id) if node_id in self.registered else None

    def leave(self, node_id: int) -> None:
        self.registered.discard(node_id)
        watches, self.watches = self.watches, []
        for watch in watches:
            watch()


class Elections:
    """Who holds each group's election; contentions never end (the loads
    they would start are not what these tests look at)."""

    def __init__(self, held: dict[str, int]) -> None:
        self.held = dict(held)
        self.contended: list[str] = []
        self.lookups = 0  # groups whose owner was read

    def is_owned(self, group):
        return self.held.get(group) == HERE

    def is_contending(self, group):
        return False

    def is_suspended(self, group):
        return False

    async def current_owner(self, group):
        return self.held.get(group)

    async def current_owners(self, groups):
        self.lookups += len(groups)
        return {g: self.held.get(g) for g in groups}

    async def orphans(self):
        held = [g for g, n in self.held.items() if n]
        return Orphans([g for g, n in self.held.items() if n is None], [f"/{g}" for g in held], held)

    async def leaving(self, orphans, live):
        return [g for g in orphans.held_groups if self.held.get(g) not in live]

    async def contend_many(self, groups):
        self.contended.extend(groups)
        await asyncio.get_running_loop().create_future()  # never answered


def manager_after_leaving(held: dict[str, int]) -> tuple[GroupManager, Nodes, Elections]:
    elections, nodes = Elections(held), Nodes({LEFT, HERE})
    return GroupManager(HERE, GroupConfig(), elections, Store({}), ZkOffsets(), nodes), nodes, elections


async def after_the_first_round(held: dict[str, int]) -> tuple[GroupManager, Elections]:
    """A manager whose takeover has run its first round after LEFT left
    (the groups of ``held`` still held by their owners)."""
    manager, nodes, elections = manager_after_leaving(held)
    manager.start_takeover()
    await nodes.listed.wait()
    nodes.leave(LEFT)
    await until(lambda: not manager.takeover.pending)
    return manager, elections


async def look_up_after_the_first_round(group_id: str, park_s: float):
    """find_owners' answer for ``group_id`` after the first round ("g" held
    by LEFT), its lookups parked at most ``park_s``."""
    manager, _ = await after_the_first_round({"g": LEFT})
    manager.takeover.released = lambda held, free: takeover.Takeover.released(manager.takeover, held, free, park_s)
    answer = (await asyncio.wait_for(manager.find_owners([group_id]), 30))[group_id]
    manager.takeover.stop()
    return answer


async def until(condition, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)


@pytest.fixture(autouse=True)
def quick_rescans(monkeypatch):
    monkeypatch.setattr(takeover, "RESCAN_S", 0.02)
    monkeypatch.setattr(takeover, "WAKE_SPREAD_S", 0.0)  # the spread is tested on its own below


def test_a_lookup_for_a_group_its_stopping_owner_still_holds_is_answered_when_a_round_reserves_it():
    """The group's owner has unregistered (stopping) and not released it
    yet: the FindCoordinator waits, rather than answer COORDINATOR_NOT_AVAILABLE
    (its member would ask again every 100 ms to 1 s, thousands of members
    at once), and once a round finds the group free and reserves it here,
    names this daemon."""
    async def scenario():
        manager, elections = await after_the_first_round({"g": LEFT})
        lookup = asyncio.create_task(manager.find_owners(["g"]))
        await asyncio.sleep(0.1)  # rounds come and go: "g" is still held
        assert not lookup.done()
        elections.held["g"] = None  # released
        answer = (await asyncio.wait_for(lookup, 5))["g"]
        assert "g" in manager._taking  # reserved by a round, its load (contention) under way
        manager.takeover.stop()
        return answer, elections.lookups

    answer, lookups = asyncio.run(scenario())
    assert not isinstance(answer, GroupUnavailableError), answer
    assert answer.node_id == HERE
    assert lookups == 0  # the rounds knew "g" was held by the daemon that left, then reserved it: nothing read


def test_a_lookup_waits_at_most_park_s_then_answers_coordinator_not_available():
    """The group is never released within the wait (here 0.1 s, not
    PARK_S): the lookup answers what it found, COORDINATOR_NOT_AVAILABLE,
    and its client asks again after its backoff."""
    answer = asyncio.run(look_up_after_the_first_round("g", park_s=0.1))
    assert isinstance(answer, GroupUnavailableError) and answer.code is ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_a_lookup_for_a_new_group_placed_here_waits_for_the_next_round_only():
    """While rounds are due, a lookup for a group nobody owns placed here
    waits for the next round's reservation; a new group (no election
    directory: no round lists it) is then named at once, not after PARK_S."""
    # parked for a minute at most: answered well before, unless it waits for a round to list "new"
    answer = asyncio.run(look_up_after_the_first_round("new", park_s=60))
    assert answer.node_id == HERE


def test_a_round_reserves_what_was_released_while_an_earlier_round_still_loads():
    """The first round reserved "a" and loads it (here: forever); "b",
    released after that round's listing, is reserved by the next round,
    not after the first round's load."""
    async def scenario():
        manager, nodes, elections = manager_after_leaving({"a": LEFT, "b": LEFT})
        manager.start_takeover()
        await nodes.listed.wait()
        elections.held["a"] = None
        nodes.leave(LEFT)
        await until(lambda: "a" in manager._taking)
        elections.held["b"] = None
        await until(lambda: "b" in manager._taking)
        reserved = set(manager._taking)
        manager.takeover.stop()
        return reserved

    assert asyncio.run(scenario()) == {"a", "b"}


def test_lookups_a_round_releases_together_are_answered_each_after_its_own_spread(monkeypatch):
    """Lookups parked on groups a round frees are answered each after a
    random part of WAKE_SPREAD_S, not in one instant: members answered
    together would heartbeat together ever after."""
    spreads = []

    async def spread():
        spreads.append(asyncio.current_task())

    monkeypatch.setattr(takeover, "_spread", spread)

    async def scenario():
        manager, elections = await after_the_first_round({"a": LEFT, "b": LEFT})
        lookups = [asyncio.create_task(manager.find_owners([g])) for g in ("a", "b")]
        await asyncio.sleep(0)
        before = len(spreads)
        elections.held["a"] = elections.held["b"] = None  # released: the next round frees both
        await asyncio.wait_for(asyncio.gather(*lookups), 30)
        manager.takeover.stop()
        return before, set(spreads[before:]), set(lookups)

    before, spread_by, lookups = asyncio.run(scenario())
    assert lookups <= spread_by  # each lookup waited its own spread once woken
