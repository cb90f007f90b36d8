"""Packed group states against a real ZooKeeper (zkcoord.zk.state_store rule
3): a classic record too large for one znode is written as a header and
parts, in several fenced multis when ZooKeeper's limit on one request needs
it, loads back as the same record, never leaves a mixed state behind (a cut
write's parts are named by nobody, and go with the next write), reads
through inspection as the daemon loads it, and states written by earlier
versions (one JSON znode) load as before."""

from __future__ import annotations

import asyncio
import base64
import json
import os

import pytest
from test_zk_support import connection

from zkcoord.core.packed_record import pack, part_names
from zkcoord.errors import NotOwnerError, StateError, StateTooLargeError
from zkcoord.zk import paths
from zkcoord.zk.group_reads import read_group
from zkcoord.zk.group_records import MULTI_MAX_BYTES
from zkcoord.zk.ownership import GroupOwnership
from zkcoord.zk.packed_state import read_state
from zkcoord.zk.state_store import GroupStateStore

pytestmark = pytest.mark.integration


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def big_record(members: int, noise: int, generation: int = 7) -> dict:
    """A Stable classic record; ``noise`` incompressible bytes per member make its packed size."""
    ids = [f"consumer-{i}-{os.urandom(4).hex()}" for i in range(members)]
    return {"v": 1, "s": "Stable", "g": generation, "os": "zookeeper", "pt": "consumer", "pn": "range", "l": ids[0],
            "m": [{"id": m, "c": "consumer", "h": "/10.0.0.5", "st": 45000, "rt": 300000,
                   "p": [["range", b64(b"\x00\x03orders" + os.urandom(noise // 2))]],
                   "a": b64(os.urandom(noise - noise // 2))} for m in ids]}


async def owner_of(conn, groups, **store_options):
    ownership = GroupOwnership(conn, 1)
    await ownership.start()
    for group in groups:
        assert await ownership.contend(group) == 1
    return ownership, GroupStateStore(conn, ownership, **store_options)


def stored_parts(zk, group: str) -> dict[str, bytes] | None:
    if zk.exists(paths.state_parts_dir(group)) is None:
        return None
    return {name: zk.get(paths.state_part(group, name))[0] for name in zk.get_children(paths.state_parts_dir(group))}


def header(zk, group: str) -> dict:
    return json.loads(zk.get(paths.state(group))[0])


def test_a_state_over_a_mebibyte_is_packed_written_in_several_multis_and_loads_back(zk_hosts, zk):
    """At the default settings: 2.4 MB of one-znode JSON, 1.8 MB packed (incompressible on purpose), which no
    single ZooKeeper request may carry."""
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, ["g"])
            record = big_record(600, 3000)
            assert len(json.dumps(record)) > 2_000_000
            assert await store.write("g", record, None) == 0
            parts = stored_parts(zk, "g")
            head = header(zk, "g")
            assert head["v"] == 2 and head["mc"] == 600 and "m" not in head
            assert sorted(parts) == sorted(part_names(head)) and len(parts) >= 2
            assert all(len(p) <= min(1_000_000, MULTI_MAX_BYTES) for p in parts.values())
            assert sum(map(len, parts.values())) > MULTI_MAX_BYTES  # more than one multi could carry
            assert await store.load("g") == (record, 0)
            fresh = GroupStateStore(conn, None)  # another daemon's load: no cache, no ownership
            assert await fresh.load("g") == (record, 0)
    asyncio.run(scenario())


def test_rewrites_replace_the_parts_and_a_small_state_goes_back_to_one_znode(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, ["g"], max_state_bytes=4096)
            first, second = big_record(40, 300), big_record(50, 300, generation=8)
            assert await store.write("g", first, None) == 0
            old = set(stored_parts(zk, "g"))
            assert await store.write("g", second, 0) == 1
            new = stored_parts(zk, "g")
            assert set(new) == set(part_names(header(zk, "g"))) and not set(new) & old
            assert all(len(p) <= 4096 for p in new.values())
            assert await store.load("g") == (second, 1)
            small = {"v": 1, "s": "Empty", "g": 9, "os": "zookeeper"}
            assert await store.write("g", small, 1) == 2
            assert zk.get(paths.state("g"))[0] == b'{"v":1,"s":"Empty","g":9,"os":"zookeeper"}'
            assert stored_parts(zk, "g") is None  # the directory went with its last part
            assert await store.load("g") == (small, 2)
    asyncio.run(scenario())


def test_a_cut_write_leaves_the_old_state_whole_and_its_parts_go_with_the_next_write(zk_hosts, zk):
    """What a write cut after its first multis leaves (its owner died): new parts that no header names."""
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, ["g"], max_state_bytes=4096)
            record = big_record(40, 300)
            assert await store.write("g", record, None) == 0
            orphan = pack(big_record(40, 300, generation=99), "cut0write", 4096)
            for name, data in zip(part_names(orphan.header), orphan.parts):
                zk.create(paths.state_part("g", name), data)
            fresh = GroupStateStore(conn, None)
            assert await fresh.load("g") == (record, 0)  # the header names its own parts only
            assert await store.write("g", big_record(30, 300), 0) == 1
            assert set(stored_parts(zk, "g")) == set(part_names(header(zk, "g")))
            # a plain write cleans them too, when the store knows parts may be there
            for name, data in zip(part_names(orphan.header), orphan.parts):
                zk.create(paths.state_part("g", name), data)
            assert await GroupStateStore(conn, store._ownership, max_state_bytes=4096).write(
                "g", {"v": 1, "s": "Empty", "g": 1, "os": "zookeeper"}, 1) == 2
            assert stored_parts(zk, "g") is None
    asyncio.run(scenario())


def test_a_deposed_owner_writes_no_part(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            ownership, store = await owner_of(conn, ["g"], max_state_bytes=4096)
            assert await store.write("g", big_record(10, 100), None) == 0
            before = stored_parts(zk, "g")
            contender = zk.get_children(paths.owner_dir("g"))[0]
            zk.delete(f"{paths.owner_dir('g')}/{contender}")  # deposed, as by a session expiry
            with pytest.raises(NotOwnerError):
                await store.write("g", big_record(40, 300), 0)
            # (at most the empty directory, created unfenced before the fenced multis: it holds nothing)
            assert before is None and not stored_parts(zk, "g") and header(zk, "g")["g"] == 7
    asyncio.run(scenario())


def test_missing_or_damaged_parts_are_a_state_error_for_that_group(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, ["g", "h"], max_state_bytes=4096)
            await store.write("g", big_record(40, 300), None)
            await store.write("h", big_record(40, 300), None)
            name = part_names(header(zk, "g"))[1]
            zk.delete(paths.state_part("g", name))
            with pytest.raises(StateError, match=r"names parts that are not in /coordinators/g/state-parts .*"
                                                  r"repair it, or delete /coordinators/g"):
                await GroupStateStore(conn, None).load("g")
            name = part_names(header(zk, "h"))[0]
            zk.set(paths.state_part("h", name), b"damaged")
            with pytest.raises(StateError, match="packed state of group 'h' .* cannot be read: .*not the body its "
                                                  "header names"):
                await GroupStateStore(conn, None).load("h")
    asyncio.run(scenario())


def test_too_large_packed_is_refused_before_anything_is_written(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            ownership, store = await owner_of(conn, ["g"], max_state_bytes=4096, max_group_state_bytes=20_000)
            with pytest.raises(StateTooLargeError, match="--max-group-state-bytes"):
                await store.write("g", big_record(40, 1000), None)
            assert zk.exists(paths.state("g")) is None and stored_parts(zk, "g") is None
            assert ownership.owned() == {"g"}
    asyncio.run(scenario())


def test_delete_takes_the_parts_and_the_directory(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, ["g"], max_state_bytes=4096)
            await store.write("g", big_record(40, 300), None)
            await store.delete("g", 0)
            assert zk.get_children(paths.coordinator("g")) == ["owner"]
    asyncio.run(scenario())


def test_inspection_reads_a_packed_state_whole(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, ["g"], max_state_bytes=4096)
            record = big_record(40, 300)
            await store.write("g", record, None)
            facts = await read_group(conn, paths.OffsetPaths("/consumers"), "g")
            assert (facts.record, facts.record_error) == (record, None)
            assert await read_state(conn, "g") == (record, 0, header(zk, "g"))
    asyncio.run(scenario())


def test_a_state_an_earlier_version_wrote_loads_and_stays_one_znode(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            _, store = await owner_of(conn, ["g"])
            old = (b'{"v":1,"s":"Stable","g":7,"os":"zookeeper","pt":"consumer","pn":"range","l":"m-1",'
                   b'"m":[{"id":"m-1","c":"c","h":"/h","st":10000,"rt":300000,"p":[["range","AAE="]],"a":"AAI="}]}')
            zk.create(paths.state("g"), old)
            record, version = await store.load("g")
            assert (record["g"], record["m"][0]["a"], version) == (7, "AAI=", 0)
            assert await store.write("g", record, 0) == 1
            assert zk.get(paths.state("g"))[0] == old and stored_parts(zk, "g") is None
    asyncio.run(scenario())


def test_the_migrations_mode_switch_rewrites_a_packed_group_whole(zk_hosts, zk):
    """``zkcoord migrate`` switches a group nobody owns by writing its state itself: read whole, written
    packed again with the new mode (zkcoord.zk.modes)."""
    from zkcoord.zk.modes import read_mode, set_offset_storage

    async def scenario():
        async with connection(zk_hosts) as conn:
            ownership, store = await owner_of(conn, ["g"])
            record = big_record(600, 3000)  # over 1 MB as one znode: packed at the default settings
            await store.write("g", record, None)
            await ownership.stop()  # nobody owns it now
            assert await read_mode(conn, "g") == ("zookeeper", True)  # from the header alone
            change = await set_offset_storage(conn, "g", "dual")
            assert (change.before, change.after, change.via) == ("zookeeper", "dual", "direct")
            assert header(zk, "g")["os"] == "dual"
            assert (await GroupStateStore(conn, None).load("g"))[0] == dict(record, os="dual")
            assert set(stored_parts(zk, "g")) == set(part_names(header(zk, "g")))
    asyncio.run(scenario())
