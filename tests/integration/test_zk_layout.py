"""Layout migrations against a real ZooKeeper: status and up through the CLI,
up twice, concurrent ups, refusing a newer or an unversioned layout, the
daemon's first-run bootstrap, and a failing migration writing nothing."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from click.testing import CliRunner
from test_zk_support import connection

from zkcoord.cli.main import cli  # noqa: F401  (first: it imports the command modules, as `zkcoord` does)
from zkcoord.cli.layout_cmd import layout
from zkcoord.errors import ConfigError, StateError
from zkcoord.zk.layout import Migration, apply_pending, check_layout, discover, ensure_layout

pytestmark = pytest.mark.integration

ROOT_ZNODES = ["/zkcoord", "/zkcoord/nodes", "/zkcoord/node-id-seq", "/zkcoord/migrations", "/coordinators"]
MIGRATION_1 = discover()[0]


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(layout, list(args), env={"COLUMNS": "200", **(env or {})})


def record(zk) -> dict:
    return json.loads(zk.get("/zkcoord/layout")[0])


def fake_migration(version: int, up, description: str = "add the widgets") -> Migration:
    return Migration(version, description, f"fake.v{version:03d}", up)


def test_status_on_an_empty_zookeeper(zk_hosts, zk):
    result = invoke("status", "--zookeeper", zk_hosts, "--output", "json")
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout) == {
        "schema": "zkcoord/migrate-layout-status/v1", "zookeeper": zk_hosts, "state": "empty", "version": 0, "known_version": 1,
        "migrations": [{"version": 1, "description": "create zkcoord's root znodes", "state": "pending",
                        "applied_at_ms": None, "applied_by": None}]}
    table = invoke("status", "--zookeeper", zk_hosts)
    assert table.exit_code == 1
    assert table.stdout.splitlines()[0] == (f"ZooKeeper layout of {zk_hosts}: version 0 (empty: no zkcoord znodes "
                                            "yet); this zkcoord knows version 1")
    assert f"1 migration(s) pending: run `zkcoord migrate layout up --zookeeper {zk_hosts}`" in table.stdout
    assert zk.get_children("/") == []  # status writes nothing


def test_up_applies_migration_1_then_changes_nothing(zk_hosts, zk):
    before_ms = int(time.time() * 1000)
    result = invoke("up", env={"ZKCOORD_ZOOKEEPER": zk_hosts})
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["applied 1: create zkcoord's root znodes",
                                          f"ZooKeeper layout of {zk_hosts}: version 0 -> 1, up to date"]
    stored = record(zk)
    entry = stored["applied"][0]
    assert stored == {"version": 1, "applied": [{"version": 1, "description": "create zkcoord's root znodes",
                                                 "applied_at_ms": entry["applied_at_ms"],
                                                 "applied_by": entry["applied_by"]}]}
    assert before_ms <= entry["applied_at_ms"] <= int(time.time() * 1000)
    assert entry["applied_by"].startswith("zkcoord 0.1.0 migrate layout up on ")
    for path in ROOT_ZNODES:
        data, stat = zk.get(path)
        assert (data, stat.version, stat.ephemeralOwner) == (b"", 0, 0), path
    assert sorted(zk.get_children("/zkcoord")) == ["layout", "migrations", "node-id-seq", "nodes"]

    _, layout_stat = zk.get("/zkcoord/layout")
    again = invoke("up", "--zookeeper", zk_hosts)
    assert again.exit_code == 0, again.output
    assert again.stdout == f"ZooKeeper layout of {zk_hosts} is at version 1, up to date; nothing to apply\n"
    assert zk.get("/zkcoord/layout")[1].mzxid == layout_stat.mzxid

    status = invoke("status", "--zookeeper", zk_hosts, "--output", "json")
    assert status.exit_code == 0
    assert json.loads(status.stdout)["state"] == "current"
    assert json.loads(status.stdout)["migrations"][0]["applied_by"] == entry["applied_by"]


@pytest.mark.parametrize("writes", [True, False], ids=["migration-writes", "only-the-record"])
def test_concurrent_ups_apply_a_migration_once(zk_hosts, zk, writes):
    """Both runs read the layout and prepare their multi-op before either
    commits (a barrier inside ``up``). Without writes of its own the
    migration's record, a versioned set, is all that keeps them apart."""
    barrier = threading.Barrier(2, timeout=30)
    calls = []

    def up(client, tx):
        if writes:
            MIGRATION_1.up(client, tx)
        calls.append(threading.get_ident())
        barrier.wait()

    async def scenario():
        async with connection(zk_hosts) as c1, connection(zk_hosts) as c2:
            if not writes:
                await apply_pending(c1, [MIGRATION_1], by="setup")
            migrations = ([Migration(1, MIGRATION_1.description, MIGRATION_1.module, up)] if writes
                          else [MIGRATION_1, fake_migration(2, up)])
            return await asyncio.gather(apply_pending(c1, migrations, by="run-a"),
                                        apply_pending(c2, migrations, by="run-b"))

    a, b = asyncio.run(scenario())
    version = 1 if writes else 2
    winner, loser = (a, b) if a.applied else (b, a)
    assert [e.version for e in winner.applied] == [version] and winner.by_others == ()
    assert loser.applied == () and loser.by_others == winner.applied
    assert len(calls) == 2  # both really prepared it; the loser did not run it again
    stored = record(zk)
    assert stored["version"] == version
    assert [(e["version"], e["applied_by"]) for e in stored["applied"]][-1] == (version, winner.applied[0].applied_by)
    assert len(stored["applied"]) == version


def test_a_newer_layout_is_refused_by_status_up_and_daemons(zk_hosts, zk):
    newer = {"version": 2, "applied": [
        {"version": 1, "description": "create zkcoord's root znodes", "applied_at_ms": 1, "applied_by": "x"},
        {"version": 2, "description": "from the future", "applied_at_ms": 2, "applied_by": "zkcoord 9.0.0 up"}]}
    zk.create("/zkcoord/layout", json.dumps(newer).encode(), makepath=True)
    message = (f"ZooKeeper layout version 2 is newer than this zkcoord knows (1); upgrade zkcoord (layout of "
               f"{zk_hosts}, last changed by zkcoord 9.0.0 up)")

    status = invoke("status", "--zookeeper", zk_hosts, "--output", "json")
    assert status.exit_code == 2
    assert [m["state"] for m in json.loads(status.stdout)["migrations"]] == [
        "applied", "applied, unknown to this zkcoord"]
    assert status.stderr.replace("\n", "") == f"error: {message}"
    up = invoke("up", "--zookeeper", zk_hosts)
    assert (up.exit_code, up.stdout, up.stderr.replace("\n", "")) == (2, "", f"error: {message}")
    assert record(zk) == newer

    async def scenario():
        async with connection(zk_hosts) as conn:
            for call in (check_layout, ensure_layout):
                with pytest.raises(ConfigError) as caught:
                    await call(conn)
                assert str(caught.value) == message
    asyncio.run(scenario())
    assert record(zk) == newer and zk.exists("/zkcoord/nodes") is None


def test_a_daemon_bootstraps_an_empty_zookeeper_and_nothing_else(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            applied = await ensure_layout(conn)
            assert [a.version for a in applied] == [1]
            assert " daemon (first run) on " in applied[0].applied_by
            assert await ensure_layout(conn) == ()  # started again: CURRENT, nothing to do
            await check_layout(conn)
    asyncio.run(scenario())
    assert record(zk)["version"] == 1
    assert all(zk.exists(path) for path in ROOT_ZNODES)


def test_a_layout_from_before_layout_versions_needs_up_and_keeps_its_data(zk_hosts, zk):
    zk.create("/coordinators/g1/state", b'{"v":1}', makepath=True)
    zk.create("/zkcoord/node-id-seq", b"", makepath=True)
    zk.set("/zkcoord/node-id-seq", b"")
    zk.set("/zkcoord/node-id-seq", b"")  # two node ids were allocated: version 2

    async def refused():
        async with connection(zk_hosts) as conn:
            with pytest.raises(ConfigError) as caught:
                await ensure_layout(conn)
            return str(caught.value)
    assert asyncio.run(refused()) == (
        f"the ZooKeeper layout at {zk_hosts} is not initialised: it has /zkcoord, /coordinators but no "
        f"/zkcoord/layout; run `zkcoord migrate layout up --zookeeper {zk_hosts}`, then start the daemon again")
    assert zk.exists("/zkcoord/layout") is None and zk.exists("/zkcoord/nodes") is None  # refused: wrote nothing

    result = invoke("up", "--zookeeper", zk_hosts)
    assert result.exit_code == 0, result.output
    assert record(zk)["version"] == 1
    assert zk.get("/coordinators/g1/state")[0] == b'{"v":1}'
    assert zk.get("/zkcoord/node-id-seq")[1].version == 2  # allocated ids are not handed out again
    assert all(zk.exists(path) for path in ROOT_ZNODES)

    async def accepted():
        async with connection(zk_hosts) as conn:
            assert await ensure_layout(conn) == ()
    asyncio.run(accepted())


def test_an_older_layout_is_refused_until_up_applies_the_rest(zk_hosts, zk):
    def add_widgets(client, tx):
        if client.exists("/zkcoord/widgets") is None:
            tx.create("/zkcoord/widgets", b"[]")
    known = [MIGRATION_1, fake_migration(2, add_widgets)]

    async def scenario():
        async with connection(zk_hosts) as conn:
            await apply_pending(conn, [MIGRATION_1])
            with pytest.raises(ConfigError, match=r"is version 1, older than this zkcoord needs \(2; pending: "
                                                  r"2 \(add the widgets\)\); run `zkcoord migrate layout up"):
                await ensure_layout(conn, known)
            result = await apply_pending(conn, known)
            assert (result.before.version, result.after.version) == (1, 2)
            assert [a.version for a in result.applied] == [2]
            await check_layout(conn, known)
    asyncio.run(scenario())
    assert zk.get("/zkcoord/widgets")[0] == b"[]"
    assert [e["description"] for e in record(zk)["applied"]] == ["create zkcoord's root znodes", "add the widgets"]


@pytest.mark.parametrize("step, message", [
    ("bad-op", "layout migration 2 (fake.v002) failed: its create of /no-parent/child got NoNodeError; "
               "nothing of it was written"),
    ("raises", "layout migration 2 (fake.v002) failed: ValueError('no widgets today'); nothing of it was written"),
])
def test_a_failing_migration_writes_nothing(zk_hosts, zk, step, message):
    def broken(client, tx):
        tx.create("/zkcoord/widgets", b"[]")
        if step == "raises":
            raise ValueError("no widgets today")
        tx.create("/no-parent/child", b"")

    async def scenario():
        async with connection(zk_hosts) as conn:
            await apply_pending(conn, [MIGRATION_1])
            with pytest.raises(StateError) as caught:
                await apply_pending(conn, [MIGRATION_1, fake_migration(2, broken)])
            assert str(caught.value) == message
    asyncio.run(scenario())
    assert zk.exists("/zkcoord/widgets") is None
    assert record(zk)["version"] == 1
