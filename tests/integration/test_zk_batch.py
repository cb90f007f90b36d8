"""zkcoord.zk.batch against a real ZooKeeper: many groups' multis at once, and one
command's contenders in many elections (contend, fence, resign, release)."""

from __future__ import annotations

import asyncio

import pytest

from zkcoord.zk import batch, election, paths
from zkcoord.zk.batch import Contenders
from zkcoord.zk.connection import ZkConnection

pytestmark = pytest.mark.integration


def _run(zk_hosts: str, body):
    async def main():
        conn = ZkConnection(zk_hosts)
        await asyncio.to_thread(conn.start)
        try:
            return await body(conn)
        finally:
            await asyncio.to_thread(conn.stop)
    return asyncio.run(main())


def test_multis_apply_each_as_a_whole_and_say_which_op_refused(services, zk_hosts, zk, unique_name):
    base = f"/{unique_name('batch')}"
    zk.create(f"{base}/kept", b"v0", makepath=True)

    async def body(conn):
        return await batch.multis(conn, [
            [batch.put(f"{base}/a", b"a", -1), batch.put(f"{base}/kept", b"v1", 0)],
            [batch.create(f"{base}/b", b"b"), batch.put(f"{base}/kept", b"stale", 0)],  # version 0 is gone
            [batch.check(f"{base}/kept", 1), batch.delete(f"{base}/a", 0)],
        ])

    first, second, third = _run(zk_hosts, body)
    assert first.ok and first.results[0] == f"{base}/a"
    assert not second.ok and second.failed_op == 1 and "BadVersion" in second.why
    assert zk.exists(f"{base}/b") is None  # nothing of a refused multi was applied
    assert third.ok
    assert zk.get(f"{base}/kept")[0] == b"v1" and zk.exists(f"{base}/a") is None


def test_contenders_fence_resign_and_release_by_prefix(services, zk_hosts, zk, unique_name):
    fresh, raced, unknown, owned = (unique_name(n) for n in ("fresh", "raced", "unknown", "owned"))
    zk.create(paths.owner_dir(owned), makepath=True)
    zk.create(f"{paths.owner_dir(owned)}/{'d' * 32}{paths.CONTENDER_MARKER}", b"7", ephemeral=True, sequence=True)

    async def body(conn):
        contenders = Contenders(conn, 99)
        # raced: its parents were seen missing, but somebody created them since: the multi fails,
        # and the contender is created with its path instead
        zk.create(paths.owner_dir(raced), makepath=True)
        got = await contenders.contend({
            fresh: (paths.coordinator(fresh), paths.owner_dir(fresh)),
            raced: (paths.coordinator(raced), paths.owner_dir(raced)),
            unknown: None,
            owned: (),
        })
        assert all(isinstance(v, str) and v.startswith(paths.owner_dir(g)) for g, v in got.items()), got
        assert zk.get(got[fresh])[0] == b"99"
        lowest = {g: election.ordered(zk.get_children(paths.owner_dir(g)))[0] for g in got}
        assert lowest[owned] != got[owned].rsplit("/", 1)[1]  # the daemon's contender is lower
        # fenced by our contender, released in the same multi
        done = await batch.multis(conn, [[contenders.fence(fresh), batch.create(f"{paths.coordinator(fresh)}/x"),
                                          contenders.resign(fresh)]])
        assert done[0].ok
        contenders.resigned(fresh)
        # a fence on a contender that is gone refuses the whole multi
        zk.delete(got[raced])
        done = await batch.multis(conn, [[contenders.fence(raced), batch.create(f"{paths.coordinator(raced)}/x")]])
        assert not done[0].ok and done[0].failed_op == 0
        assert zk.exists(f"{paths.coordinator(raced)}/x") is None
        # a contender whose create's answer was "lost": release finds it by prefix
        contenders._held[unknown] = None
        await contenders.release()
        # checked before this session ends, which would take its ephemeral contenders anyway
        assert zk.exists(f"{paths.coordinator(fresh)}/x") is not None
        for group in (fresh, raced, unknown, owned):
            children = zk.get_children(paths.owner_dir(group))
            assert got[group].rsplit("/", 1)[1] not in children, (group, children)
        assert len(zk.get_children(paths.owner_dir(owned))) == 1  # the daemon's stays

    _run(zk_hosts, body)
