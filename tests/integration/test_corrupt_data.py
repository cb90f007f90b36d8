"""Corrupt data in ZooKeeper never becomes an outage (issue 16, items 5-7).

Each test plants corrupt znodes with the ``zk`` fixture (a kazoo client in
the test's chroot) and drives the real services: an in-process daemon on
real ZooKeeper through the Kafka protocol (kafka-python's classes), and the
CLI commands. What must hold: a corrupt legacy offset is that partition's
error, a corrupt state record is that group's error, a generation at the
int32 top wraps, and no command prints a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from click.testing import CliRunner
from kafka.protocol.consumer.group import JoinGroupRequest, OffsetFetchRequest, SyncGroupRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.support.wire import WireClient
from zkcoord.cli.main import cli
from zkcoord.config import DaemonConfig
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration
E_NONE, E_UNKNOWN_SERVER_ERROR, E_MEMBER_ID_REQUIRED = 0, -1, 79
INT32_MAX = 2**31 - 1

CORRUPT_VALUES = {  # partition -> what its legacy offset znode holds
    0: str(2**70).encode(), 1: b"9" * 5000, 2: b"\xff\xfe", 3: b"", 4: str(-2**64).encode(), 5: b"12abc",
}


def put(zk, path: str, value: bytes) -> None:
    zk.create(path, value, makepath=True)


def state(**fields) -> bytes:
    return json.dumps({"v": 1, "s": "Empty", "g": 3, "os": "zookeeper", **fields}).encode()


async def start_daemon(zk_hosts: str) -> tuple[Daemon, WireClient]:
    daemon = Daemon(DaemonConfig(zookeeper=zk_hosts, listen="127.0.0.1:0", node_id=1,
                                 group_initial_rebalance_delay_ms=0, zk_session_timeout_ms=6000))
    running = await daemon.start()
    client = await WireClient.connect(*running.advertised, "c")
    return daemon, client


def join(group: str, member_id: str = "") -> JoinGroupRequest:
    return JoinGroupRequest(version=5, group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                            member_id=member_id, group_instance_id=None, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")])


async def join_group(client: WireClient, group: str):
    """MEMBER_ID_REQUIRED, then the real join; the JoinGroup answer."""
    found = await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
    assert found.error_code == E_NONE, found
    first = await client.call(join(group))
    if first.error_code != E_MEMBER_ID_REQUIRED:
        return first
    return await client.call(join(group, first.member_id))


def fetched(answer) -> dict:
    return {(t.name, p.partition_index): (p.committed_offset, p.error_code) for t in answer.topics
            for p in t.partitions}


# -- item 5: a corrupt legacy offset is that partition's error ------------------------------------
def test_offset_fetch_answers_a_corrupt_legacy_value_for_its_partition_only(zk_hosts, zk, unique_name, caplog):
    group = unique_name("g")
    for partition, value in CORRUPT_VALUES.items():
        put(zk, f"/consumers/{group}/offsets/t/{partition}", value)
    put(zk, f"/consumers/{group}/offsets/t/6", b"7\n")
    put(zk, f"/consumers/{group}/offsets/t/7", b"-1")
    put(zk, f"/consumers/{group}/offsets/t/{2**31}", b"5")  # not a partition number (int32): not listed
    caplog.set_level(logging.ERROR, logger="zkcoord.zk.offsets")

    async def scenario():
        daemon, client = await start_daemon(zk_hosts)
        try:
            assert (await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))).error_code == 0
            every = await client.call(OffsetFetchRequest(version=5, group_id=group, topics=None))
            assert every.error_code == E_NONE
            expected = {("t", p): (-1, E_UNKNOWN_SERVER_ERROR) for p in CORRUPT_VALUES}
            expected.update({("t", 6): (7, E_NONE), ("t", 7): (-1, E_NONE)})
            assert fetched(every) == expected
            some = await client.call(OffsetFetchRequest(version=5, group_id=group, topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 6, 9])]))
            assert fetched(some) == {("t", 0): (-1, E_UNKNOWN_SERVER_ERROR), ("t", 6): (7, E_NONE),
                                     ("t", 9): (-1, E_NONE)}
        finally:
            await client.close()
            await daemon.stop()

    asyncio.run(scenario())
    logged = [r.getMessage() for r in caplog.records if "not an offset" in r.getMessage()]
    assert sorted(m.split()[2] for m in logged) == sorted(f"/consumers/{group}/offsets/t/{p}"
                                                          for p in CORRUPT_VALUES)  # once each, two fetches


# -- item 6: a corrupt state record is that group's error ------------------------------------------
CORRUPT_STATES = {
    "wrong-type": state(m=5),
    "bad-json": b"{not json",
    "no-generation": json.dumps({"v": 1, "s": "Empty"}).encode(),
    "huge-generation": state(g=2**40),
    "unknown-version": state(v=9),
    "bad-member": state(s="Stable", m=[{"id": "x", "st": "soon", "rt": 1, "p": []}]),
}


def test_daemon_answers_a_corrupt_group_with_an_error_and_serves_the_others(zk_hosts, zk, unique_name):
    good = unique_name("good")
    bad = {kind: unique_name(kind) for kind in CORRUPT_STATES}

    async def scenario():
        daemon, client = await start_daemon(zk_hosts)  # first: it initialises the layout
        for kind, group in bad.items():
            put(zk, f"/coordinators/{group}/state", CORRUPT_STATES[kind])
        try:
            for group in bad.values():
                found = await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
                answer = await client.call(join(group))
                assert answer.error_code == E_UNKNOWN_SERVER_ERROR, (group, found, answer)
            joined = await join_group(client, good)  # same connection: still served
            assert (joined.error_code, joined.generation_id) == (E_NONE, 1)
            # An operator repairs one: the daemon reads it again (after BROKEN_RECHECK_MS) and serves it,
            # with no restart.
            repaired = bad["wrong-type"]
            zk.set(f"/coordinators/{repaired}/state", state())
            deadline = asyncio.get_running_loop().time() + 30
            while (answer := await client.call(join(repaired))).error_code == E_UNKNOWN_SERVER_ERROR:
                assert asyncio.get_running_loop().time() < deadline, "the repaired group is still refused"
                await asyncio.sleep(0.5)
            assert answer.error_code == E_MEMBER_ID_REQUIRED
        finally:
            await client.close()
            await daemon.stop()

    asyncio.run(scenario())


# -- item 7: generations wrap at the int32 top -----------------------------------------------------
@pytest.mark.parametrize("stored", [{"g": INT32_MAX}, {"g": INT32_MAX - 5, "gr": INT32_MAX}])
def test_a_group_at_the_int32_generation_top_is_joined_with_a_wrapped_generation(zk_hosts, zk, unique_name,
                                                                                 stored):
    group = unique_name("g")

    async def scenario():
        daemon, client = await start_daemon(zk_hosts)  # first: it initialises the layout
        put(zk, f"/coordinators/{group}/state", state(**stored))
        try:
            joined = await join_group(client, group)
            assert (joined.error_code, joined.generation_id) == (E_NONE, 1)
            synced = await client.call(SyncGroupRequest(
                version=3, group_id=group, generation_id=1, member_id=joined.member_id, group_instance_id=None,
                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=joined.member_id,
                                                                         assignment=b"a")]))
            assert synced.error_code == E_NONE
            record = json.loads(zk.get(f"/coordinators/{group}/state")[0])
            assert (record["s"], record["g"], record.get("gr")) == ("Stable", 1, 100)
            again = await client.call(join(group, joined.member_id))  # a rebalance in the new block
            assert (again.error_code, again.generation_id) == (E_NONE, 2)
        finally:
            await client.close()
            await daemon.stop()

    asyncio.run(scenario())
    record = json.loads(zk.get(f"/coordinators/{group}/state")[0])
    assert all(0 <= record[k] <= INT32_MAX for k in ("g", "gr") if k in record)


# -- every command: no traceback, the other groups still shown -------------------------------------
def run(*args: str, input: str | None = None):
    result = CliRunner().invoke(cli, list(args), input=input, env={"COLUMNS": "400"})
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert "Traceback" not in output, (args, output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exc_info)
    return result, output


@pytest.fixture
def seeded(zk, unique_name):
    """Every kind of corrupt znode, and a healthy legacy group and zkcoord group beside them."""
    names = {"legacy": unique_name("legacy"), "zkcoord": unique_name("zkc"), "values": unique_name("values")}
    put(zk, f"/consumers/{names['legacy']}/offsets/t/0", b"42")
    put(zk, f"/coordinators/{names['zkcoord']}/state", state())
    for partition, value in CORRUPT_VALUES.items():
        put(zk, f"/consumers/{names['values']}/offsets/t/{partition}", value)
    put(zk, f"/consumers/{names['values']}/offsets/t/{'9' * 300}", b"1")
    for kind, data in CORRUPT_STATES.items():
        names[kind] = unique_name(kind)
        put(zk, f"/coordinators/{names[kind]}/state", data)
        put(zk, f"/consumers/{names[kind]}/offsets/t/0", b"5")  # legacy offsets too, for the migrate commands
    return names


def test_no_command_prints_a_traceback_on_corrupt_znodes(zk_hosts, services, seeded, tmp_path):
    zk_opt, bs = ["--zookeeper", zk_hosts], ["--bootstrap-servers", services.bootstrap_servers]
    bad, good = seeded["wrong-type"], seeded["legacy"]
    healthy = (seeded["legacy"], seeded["zkcoord"], seeded["values"])
    listing = [
        ["groups", *zk_opt], ["groups", *zk_opt, *bs, "--output", "json"],
        ["describe", "--all-groups", *zk_opt], ["describe", "--all-groups", *zk_opt, "--output", "json"],
        ["describe", "--all-groups", "--members", *zk_opt], ["describe", "--all-groups", "--state", *zk_opt],
        ["migrate", "plan", "--all", *zk_opt, *bs], ["migrate", "plan", "--all", *zk_opt, *bs, "--output", "json"],
        ["migrate", "export", "--all", *zk_opt],
    ]
    for args in listing:
        result, output = run(*args)
        assert result.exit_code == 0, (args, output)
        for group in healthy if args[0] != "migrate" else healthy[:1]:  # migrate: the legacy groups
            assert group in output, (args, group, output)
    single = [
        ["describe", bad, *zk_opt], ["describe", seeded["values"], *zk_opt, *bs],
        ["migrate", "plan", "--group", bad, *zk_opt, *bs],
        ["migrate", "apply", "--group", bad, *zk_opt, *bs],
        ["migrate", "finalize", "--all", *zk_opt, *bs], ["migrate", "rollback", "--all", *zk_opt, *bs],
        ["migrate", "layout", "status", *zk_opt],
        ["migrate", "status", "--all", *zk_opt], ["migrate", "verify", "--all", *zk_opt, *bs],  # migrated groups only
        ["consume", seeded["legacy"], "--group", bad, "--coordinators", "127.0.0.1:1", *bs, "--max-records", "1"],
    ]
    for args in single:
        run(*args)
    file = tmp_path / "offsets.csv"
    file.write_text(f"{good},t,0,{'9' * 5000}\n")
    run("migrate", "import", "--file", str(file), *zk_opt)


# -- exit codes and what is shown ------------------------------------------------------------------
def test_corrupt_groups_are_reported_with_their_znode_and_the_rest_shown(zk_hosts, services, seeded):
    zk_opt, bs = ["--zookeeper", zk_hosts], ["--bootstrap-servers", services.bootstrap_servers]
    bad = seeded["wrong-type"]
    path = f"/coordinators/{bad}/state"

    result, output = run("groups", *zk_opt, "--output", "json")
    listed = {g["group"]: g for g in json.loads(result.stdout)["groups"]}
    assert listed[bad]["state"] == "Corrupt" and path in listed[bad]["error"] and "members 'm'" in listed[bad]["error"]
    assert listed[seeded["zkcoord"]]["state"] == "Empty" and listed[seeded["legacy"]]["error"] is None

    result, output = run("describe", "--all-groups", *zk_opt, "--output", "json")
    document = json.loads(result.stdout)
    assert result.exit_code == 0
    assert {e["group"] for e in document["errors"]} == {seeded[k] for k in CORRUPT_STATES}
    assert {seeded["legacy"], seeded["zkcoord"], seeded["values"]} <= {g["group"] for g in document["groups"]}
    values = next(g for g in document["groups"] if g["group"] == seeded["values"])
    assert any(f"/consumers/{seeded['values']}/offsets/t/1 holds" in n and "too long" in n for n in values["notes"])

    assert run("describe", bad, *zk_opt)[0].exit_code == 1  # all that was asked for is corrupt
    assert run("describe", bad, seeded["zkcoord"], *zk_opt)[0].exit_code == 0

    result, output = run("migrate", "plan", "--all", *zk_opt, *bs, "--output", "json")
    plans = {g["group"]: g for g in json.loads(result.stdout)["groups"]}
    assert result.exit_code == 0 and path in plans[bad]["state_error"]
    assert any(path in n for n in plans[bad]["notes"]) and plans[seeded["legacy"]]["state_error"] is None
    assert [p["partition"] for p in plans[seeded["values"]]["partitions"]] == sorted(CORRUPT_VALUES)
    assert run("migrate", "plan", "--group", bad, *zk_opt, *bs)[0].exit_code == 1
    assert run("migrate", "plan", "--group", bad, "--group", seeded["legacy"], *zk_opt, *bs)[0].exit_code == 0

    result, output = run("migrate", "export", "--all", *zk_opt)
    assert result.exit_code == 0 and f"{seeded['legacy']},t,0,42" in result.stdout
    assert f"skipped /consumers/{seeded['values']}/offsets/t/1: it holds '9999" in output
    assert "unparsable (too long: 5000 characters" in output


def test_import_refuses_a_value_that_is_not_an_offset_and_writes_nothing(zk_hosts, zk, unique_name, tmp_path):
    group = unique_name("g")
    file = tmp_path / "offsets.csv"
    file.write_text(f"{group},t,0,5\n{group},t,1,{'9' * 5000}\n")
    result, output = run("migrate", "import", "--file", str(file), "--zookeeper", zk_hosts)
    assert result.exit_code == 2
    assert f"{file} line 2: offset '999" in output and "is not a whole number" in output
    assert zk.exists(f"/consumers/{group}") is None
    file.write_text(f"{group},t,0,{2**70}\n")
    result, output = run("migrate", "import", "--file", str(file), "--zookeeper", zk_hosts)
    assert result.exit_code == 2 and f"line 1: offset '{2**70}' is not a whole number" in output
    assert zk.exists(f"/consumers/{group}") is None


def test_a_node_registration_named_by_a_huge_number_is_skipped(zk_hosts, zk, unique_name):
    """/zkcoord/nodes/<5,000 digits>: Python's int() refuses such a string
    (ValueError, its 4,300-digit limit), which once failed every lookup."""
    group = unique_name("g")

    async def scenario():
        daemon, client = await start_daemon(zk_hosts)  # it initialises the layout
        await client.close()
        await daemon.stop()
        put(zk, "/zkcoord/nodes/" + "9" * 5000, b'{"host":"h","port":1}')
        put(zk, "/zkcoord/nodes/" + "9" * 12, b'{"host":"h","port":1}')  # beyond int32: not a node id
        daemon, client = await start_daemon(zk_hosts)  # reads the registrations as it starts
        try:
            found = await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
            assert (found.error_code, found.node_id) == (E_NONE, 1)
            joined = await join_group(client, group)
            assert joined.error_code == E_NONE
        finally:
            await client.close()
            await daemon.stop()

    asyncio.run(scenario())
    result = CliRunner().invoke(cli, ["groups", "--zookeeper", zk_hosts])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
