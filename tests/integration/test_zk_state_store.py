"""The fenced group state store against a real ZooKeeper: versioned round
trips, conflicts, size limit, corrupt znodes, delete and listing."""

from __future__ import annotations

import asyncio
import json

import pytest
from test_zk_support import connection, eventually

from zkcoord.errors import NotOwnerError, StateError
from zkcoord.zk import paths
from zkcoord.zk.ownership import ChangeKind, GroupOwnership
from zkcoord.zk.state_store import ABSENT, GroupStateStore, encode_state

pytestmark = pytest.mark.integration

RECORD = {"v": 1, "s": "Stable", "g": 7, "pt": "consumer", "pn": "range", "m": [{"id": "m-1", "st": 10000, "rt": 30000}]}


async def owner_of(conn, groups, changes=None, **store_options):
    ownership = GroupOwnership(conn, 1, on_change=None if changes is None else changes.append)
    await ownership.start()
    for group in groups:
        assert await ownership.contend(group) == 1
    return ownership, GroupStateStore(conn, ownership, **store_options)


def test_write_and_load_round_trip_with_versions(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, ["g"])
            assert await store.load("g") == (None, ABSENT)
            assert await store.write("g", RECORD, None) == 0
            assert await store.load("g") == (RECORD, 0)
            data, stat = zk.get(paths.state("g"))
            assert data == json.dumps(RECORD, separators=(",", ":")).encode() and b" " not in data
            changed = {**RECORD, "g": 8}
            assert await store.write("g", changed, 0) == 1
            assert await store.write("g", {**changed, "g": 9}, 1) == 2
            assert await store.load("g") == ({**changed, "g": 9}, 2)
            unicode = {**RECORD, "m": [{"id": "m-1", "st": 10000, "rt": 30000, "h": "hôte-ü"}]}
            assert await store.write("g", unicode, 2) == 3
            assert await store.load("g") == (unicode, 3)
    asyncio.run(scenario())


def test_version_conflict_is_not_owner_and_drops_the_group(zk_hosts, zk):
    async def scenario():
        changes = []
        async with connection(zk_hosts) as conn:
            ownership, store = await owner_of(conn, ["g"], changes)
            assert await store.write("g", RECORD, None) == 0
            zk.set(paths.state("g"), b'{"v":1,"by":"someone else"}')  # now version 1
            with pytest.raises(NotOwnerError, match="expected version 0"):
                await store.write("g", {**RECORD, "g": 8}, 0)
            assert zk.get(paths.state("g"))[0] == b'{"v":1,"by":"someone else"}'
            assert ownership.owned() == frozenset()
            assert [(c.kind, c.groups) for c in changes] == [(ChangeKind.LOST, {"g"})]
            # our contender is withdrawn in the background, so another daemon can take over
            await eventually(lambda: zk.get_children(paths.owner_dir("g")) == [], "the withdrawal")
    asyncio.run(scenario())


def test_create_when_state_already_exists_is_a_conflict(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, ["g"])
            zk.create(paths.state("g"), b"{}")
            with pytest.raises(NotOwnerError, match="it exists"):
                await store.write("g", RECORD, None)
            assert zk.get(paths.state("g"))[0] == b"{}"
    asyncio.run(scenario())


def test_oversized_state_is_refused_before_anything_is_written(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            ownership, store = await owner_of(conn, ["g"], max_state_bytes=2000)
            big = {"v": 1, "blob": "x" * 2000}
            with pytest.raises(StateError, match=r"group 'g' is 20\d\d bytes, over the limit of 2000 bytes"):
                await store.write("g", big, None)
            assert zk.exists(paths.state("g")) is None
            assert ownership.owned() == {"g"}  # a refused write is not a lost group
    asyncio.run(scenario())


def test_default_limit_is_just_under_a_mebibyte_and_fits_zookeeper(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, ["g"])
            empty = {"v": 1, "s": "Empty", "g": 0, "os": "zookeeper"}  # a valid record, padded below
            filler = 1_000_000 - len(encode_state("g", {**empty, "b": ""}))
            assert await store.write("g", {**empty, "b": "y" * filler}, None) == 0  # exactly the limit
            assert len(zk.get(paths.state("g"))[0]) == 1_000_000
            with pytest.raises(StateError, match="1000001 bytes, over the limit of 1000000"):
                await store.write("g", {**empty, "b": "y" * (filler + 1)}, 0)
            assert (await store.load("g"))[1] == 0
    asyncio.run(scenario())


@pytest.mark.parametrize("data, problem", [
    (b"{not json", "is not valid JSON"),
    (b"[1, 2]", "holds a JSON list where an object was expected"),
    (b"", "is empty"),
    (b"\xff\xfe", "is not UTF-8"),
])
def test_corrupt_state_is_a_state_error_for_that_group_only(zk_hosts, zk, data, problem):
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, ["bad", "good"])
            zk.create(paths.state("bad"), data)
            assert await store.write("good", RECORD, None) == 0
            with pytest.raises(StateError, match=f"state znode /coordinators/bad/state of group 'bad' {problem}"):
                await store.load("bad")
            assert await store.load("good") == (RECORD, 0)
    asyncio.run(scenario())


def test_delete_and_list_groups(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            ownership, store = await owner_of(conn, ["a", "b", "c"])
            assert await store.list_groups() == []
            for group in ("a", "b"):
                await store.write(group, RECORD, None)
            assert await store.list_groups() == ["a", "b"]  # "c" has an owner but no state
            with pytest.raises(NotOwnerError):
                await store.delete("b", expected_version=5)
            assert await store.list_groups() == ["a", "b"]
            await store.delete("a", expected_version=0)
            await store.delete("c")  # nothing to delete: fine
            assert await store.list_groups() == ["b"]
            assert zk.exists(paths.state("a")) is None
    asyncio.run(scenario())


def test_writing_a_group_we_do_not_own_raises_before_io(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, [])
            with pytest.raises(NotOwnerError, match="does not own group 'g'"):
                await store.write("g", RECORD, None)
            assert zk.exists(paths.coordinator("g")) is None
    asyncio.run(scenario())
