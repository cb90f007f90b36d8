"""Many groups' elections at once (a takeover, a stop), against a real
ZooKeeper: contend_many decides each group by the election's rules, as one
contend would (one owner, no queueing, both daemons agree); a bulk-won
group's contender is watched; release_all deletes every contender in
multis and reports no loss; unowned_groups lists exactly the groups nobody
contends for."""

from __future__ import annotations

import asyncio

import pytest
from test_zk_support import connection, eventually

from zkcoord.errors import ServiceUnavailableError
from zkcoord.zk import paths
from zkcoord.zk.ownership import BATCH, ChangeKind, GroupOwnership

pytestmark = pytest.mark.integration


async def start_ownership(conn, node_id, changes=None):
    ownership = GroupOwnership(conn, node_id, on_change=None if changes is None else changes.append)
    await ownership.start()
    return ownership


def contenders(zk, group: str) -> list[int]:
    """Node ids of the group's contender znodes, lowest sequence first."""
    names = sorted((c for c in zk.get_children(paths.owner_dir(group)) if paths.contender_sequence(c) is not None),
                   key=lambda c: int(paths.contender_sequence(c)))
    return [int(zk.get(paths.contender(group, n))[0]) for n in names]


def test_two_daemons_contending_for_many_groups_at_once_agree_on_one_owner_each(zk_hosts, zk):
    # More than one batch; half the groups have an owner directory already (a takeover's
    # case), half none (each then contended alone, its directory made on the way).
    groups = [f"g{i:04d}" for i in range(BATCH + 100)]
    for group in groups[::2]:
        zk.ensure_path(paths.owner_dir(group))

    async def scenario():
        async with connection(zk_hosts) as c1, connection(zk_hosts) as c2:
            o1, o2 = await start_ownership(c1, 1), await start_ownership(c2, 2)
            a1, a2 = await asyncio.gather(o1.contend_many(groups), o2.contend_many(list(reversed(groups))))
            assert a1 == a2  # both name the same winner of every group
            assert set(a1.values()) <= {1, 2}
            assert o1.owned() == {g for g, w in a1.items() if w == 1}
            assert o2.owned() == {g for g, w in a1.items() if w == 2}
            return a1

    winners = asyncio.run(scenario())
    # The losers withdrew: one contender per group, the winner's; then the sessions closed.
    assert all(zk.get_children(paths.owner_dir(g)) == [] for g in groups)
    assert len(winners) == len(groups)


def test_contend_many_answers_owned_groups_and_leaves_the_others_contenders_alone(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as c1, connection(zk_hosts) as c2:
            o1, o2 = await start_ownership(c1, 1), await start_ownership(c2, 2)
            assert await o1.contend("mine") == 1
            assert await o2.contend("theirs") == 2
            answers = await o1.contend_many(["mine", "theirs", "free"])
            assert answers == {"mine": 1, "theirs": 2, "free": 1}
            assert contenders(zk, "mine") == [1] and contenders(zk, "theirs") == [2]
            assert contenders(zk, "free") == [1]
            assert o1.owned() == {"mine", "free"}
    asyncio.run(scenario())


def test_a_group_won_in_a_batch_is_watched_like_one_won_alone(zk_hosts, zk):
    async def scenario():
        changes = []
        async with connection(zk_hosts) as c1:
            o1 = await start_ownership(c1, 1, changes)
            for group in ("a", "b", "c"):
                zk.ensure_path(paths.owner_dir(group))
            assert await o1.contend_many(["a", "b", "c"]) == {"a": 1, "b": 1, "c": 1}
            zk.delete(o1.fence("b").path)
            await eventually(lambda: changes, "a change")
            assert [(c.kind, c.groups) for c in changes] == [(ChangeKind.LOST, {"b"})]
            assert o1.owned() == {"a", "c"}
    asyncio.run(scenario())


def test_release_all_deletes_every_contender_without_reporting_a_loss(zk_hosts, zk):
    groups = [f"r{i:04d}" for i in range(BATCH * 2 + 10)]
    for group in groups:
        zk.ensure_path(paths.owner_dir(group))

    async def scenario():
        changes = []
        async with connection(zk_hosts) as c1, connection(zk_hosts) as c2:
            o1 = await start_ownership(c1, 1, changes)
            assert set((await o1.contend_many(groups)).values()) == {1}
            zk.delete(o1.fence(groups[7]).path)  # one already gone: the multis go on without it
            await eventually(lambda: groups[7] not in o1.owned(), "the deleted one lost")
            await o1.release_all()
            assert o1.owned() == frozenset()
            assert [(c.kind, c.groups) for c in changes] == [(ChangeKind.LOST, {groups[7]})]
            assert all(zk.get_children(paths.owner_dir(g)) == [] for g in groups)
            with pytest.raises(ServiceUnavailableError, match="stopping"):
                await o1.contend("late")
            with pytest.raises(ServiceUnavailableError, match="stopping"):
                await o1.contend_many(["late"])
            # Free for another daemon at once.
            o2 = await start_ownership(c2, 2)
            assert set((await o2.contend_many(groups)).values()) == {2}
    asyncio.run(scenario())


def test_unowned_groups_are_those_nobody_contends_for(zk_hosts, zk):
    zk.ensure_path(paths.owner_dir("empty-dir"))
    zk.ensure_path(paths.state("no-dir"))
    zk.ensure_path(paths.owner_dir("tool-owned"))
    zk.create(paths.owner_dir("tool-owned") + "/x" + paths.CONTENDER_MARKER, b"-1", sequence=True)
    zk.ensure_path(paths.coordinator("orders/eu"))  # an encoded name: listed decoded

    async def scenario():
        async with connection(zk_hosts) as c1:
            o1 = await start_ownership(c1, 1)
            assert await o1.contend("daemon-owned") == 1
            assert sorted(await o1.unowned_groups()) == ["empty-dir", "no-dir", "orders/eu"]
            await o1.stop()
    asyncio.run(scenario())
