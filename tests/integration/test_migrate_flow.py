"""The whole migration on real ZooKeeper and Kafka: plan, apply, verify,
finalize, rollback, status; a zkcoord daemon in ``dual`` and ``kafka``
offset storage; the mode switch reaching a running daemon; apply killed
with SIGKILL mid-way and resumed.

Kafka's committed offsets are always read back with kafka-python's own
``KafkaAdminClient.list_group_offsets``, legacy offsets with kazoo.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner
from kafka import KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.protocol.consumer.group import HeartbeatRequest, OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.structs import OffsetAndMetadata
from test_daemon_protocol import join, join_with_id
from test_zk_support import connection

from tests.support.kafka_ready import active_kafka_member
from tests.support.wire import WireClient
from zkcoord.cli.main import cli
from zkcoord.config import DaemonConfig
from zkcoord.kafka.forwarder import KafkaGroupOffsets
from zkcoord.migrate.apply import Adapters, apply_group
from zkcoord.zk.modes import set_offset_storage
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration
RECORDS = 50
E_NONE, E_COORDINATOR_NOT_AVAILABLE = 0, 15
P = OffsetCommitRequest.OffsetCommitRequestTopic


# -- helpers -------------------------------------------------------------------------------

def run_cli(*args: str):
    result = CliRunner().invoke(cli, ["migrate", *args], env={"COLUMNS": "300"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert "Traceback" not in result.output
    return result


def json_cli(*args: str, code: int = 0):
    """The command's JSON document; of the per-group commands, its groups."""
    result = run_cli(*args, "--output", "json")
    assert result.exit_code == code, result.output
    document = json.loads(result.stdout)
    assert document["schema"] == f"zkcoord/migrate-{args[0]}/v1"
    return document if args[0] == "plan" else document["groups"]


@pytest.fixture
def layout(zk_hosts):
    """zkcoord's ZooKeeper layout, for tests that write zkcoord znodes before a
    daemon starts (a daemon creates it only on an empty ZooKeeper)."""
    result = CliRunner().invoke(cli, ["migrate", "layout", "up", "--zookeeper", zk_hosts])
    assert result.exit_code == 0, result.output


@pytest.fixture
def topic(services, admin, unique_name):
    """A 4-partition topic with RECORDS records per partition."""
    name = unique_name("orders")
    admin.create_topics([NewTopic(name, 4, 1)], wait_for_metadata=True)
    producer = KafkaProducer(bootstrap_servers=services.bootstrap_servers, acks="all")
    for partition in range(4):
        for i in range(RECORDS):
            producer.send(name, value=b"r%d" % i, partition=partition)
    producer.flush()
    producer.close()
    return name


def seed(zk, group: str, values: dict, root: str = "/consumers") -> None:
    for (topic, partition), value in values.items():
        zk.create(f"{root}/{group}/offsets/{topic}/{partition}", value, makepath=True)


def kafka_offsets(admin, group: str) -> dict:
    answer = admin.list_group_offsets({group: None})[group]
    return {(tp.topic, tp.partition): oam.offset for tp, oam in answer.items() if oam.offset >= 0}


def legacy(zk, group: str, topic: str, partition: int) -> bytes | None:
    path = f"/consumers/{group}/offsets/{topic}/{partition}"
    return zk.get(path)[0] if zk.exists(path) else None


def state(zk, group: str) -> dict:
    return json.loads(zk.get(f"/coordinators/{group}/state")[0])


def migration(zk, group: str, child: str = "") -> dict | None:
    path = f"/zkcoord/migrations/{group}" + (f"/{child}" if child else "")
    return json.loads(zk.get(path)[0]) if zk.exists(path) else None


def commit_request(group, offsets, generation=-1, member="", version=7):
    topics = {}
    for (topic, partition), (offset, metadata) in offsets.items():
        topics.setdefault(topic, []).append(P.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
            committed_metadata=metadata))
    return OffsetCommitRequest(version=version, group_id=group, generation_id_or_member_epoch=generation,
                               member_id=member, group_instance_id=None,
                               topics=[P(name=t, partitions=parts) for t, parts in topics.items()])


async def commit(client, group, offsets, **kwargs) -> list[int]:
    answer = await client.call(commit_request(group, offsets, **kwargs))
    return [p.error_code for t in answer.topics for p in t.partitions]


async def fetch(client, group, partitions=None) -> tuple[int, dict]:
    topics = None
    if partitions is not None:
        by_topic = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        topics = [OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                  for t, ps in by_topic.items()]
    answer = await client.call(OffsetFetchRequest(version=5, group_id=group, topics=topics))
    return answer.error_code, {(t.name, p.partition_index): (p.committed_offset, p.metadata)
                               for t in answer.topics for p in t.partitions}


class OneDaemon:
    """One in-process daemon (node 1) and clients to it."""

    def __init__(self, zk_hosts: str, bootstrap_servers: str = ""):
        self.daemon = Daemon(DaemonConfig(zookeeper=zk_hosts, listen="127.0.0.1:0", node_id=1,
                                          bootstrap_servers=bootstrap_servers,
                                          group_initial_rebalance_delay_ms=0, zk_session_timeout_ms=6000))
        self.clients: list[WireClient] = []

    async def __aenter__(self):
        self.running = await self.daemon.start()
        return self

    async def __aexit__(self, *exc):
        for client in self.clients:
            await client.close()
        await self.daemon.stop()

    async def coordinator(self, group: str) -> WireClient:
        client = await WireClient.connect(*self.running.advertised, client_id="c")
        self.clients.append(client)
        found = await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
        assert (found.error_code, found.node_id) == (E_NONE, 1), found
        return client


async def adapters_for(zk_hosts: str, bootstrap: str, work):
    async with connection(zk_hosts) as conn:
        with KafkaGroupOffsets(bootstrap, request_timeout_ms=30_000) as kafka:
            return await work(Adapters.of(conn, kafka))


# -- plan, apply, verify, finalize -----------------------------------------------------------

def test_plan_apply_verify_finalize(services, zk_hosts, zk, admin, topic, unique_name, tmp_path):
    a, b, c = unique_name("a"), unique_name("b"), unique_name("c")
    seed(zk, a, {(topic, 0): b"10", (topic, 1): b"20", (topic, 2): b"30", (topic, 3): b"40"})
    seed(zk, b, {(topic, 0): b"abc", (topic, 1): b"5"})  # one corrupt value
    seed(zk, c, {(topic, 0): b"50", (topic, 2): b"7"})
    admin.alter_group_offsets(c, {TopicPartition(topic, 0): OffsetAndMetadata(3, "", None)})  # Kafka behind
    z = ["--zookeeper", zk_hosts, "--bootstrap-servers", services.bootstrap_servers]

    plan = json_cli("plan", "--all", *z)
    assert plan["totals"]["to_write"] == 7 and plan["totals"]["by_decision"]["unparsable"] == 1

    backup_file = tmp_path / "backups.jsonl"
    applied = json_cli("apply", "--all", *z, "--backup-file", str(backup_file))
    by_group = {r["group"]: r for r in applied}
    assert {g: (r["outcome"], r["phase"]) for g, r in by_group.items()} == \
        {a: ("applied", "dual"), b: ("applied", "dual"), c: ("applied", "dual")}
    assert by_group[b]["committed"] == [[topic, 1, 5]]
    assert [s[:3] for s in by_group[b]["skipped"]] == [[topic, 0, "unparsable"]]
    assert by_group[a]["steps"] == ["backed-up", "kafka-committed", "dual"]

    expected = {a: {(topic, 0): 10, (topic, 1): 20, (topic, 2): 30, (topic, 3): 40},
                b: {(topic, 1): 5}, c: {(topic, 0): 50, (topic, 2): 7}}
    assert {g: kafka_offsets(admin, g) for g in expected} == expected
    assert {g: state(zk, g)["os"] for g in expected} == {a: "dual", b: "dual", c: "dual"}
    assert migration(zk, c, "backup")["kafka"] == [[topic, 0, 3]]  # what Kafka had before
    assert migration(zk, b, "backup")["zookeeper"] == [[topic, 0, "abc"], [topic, 1, "5"]]
    lines = [json.loads(line) for line in backup_file.read_text().splitlines()]
    assert sorted(line["group"] for line in lines) == sorted([a, b, c])

    again = json_cli("apply", "--all", *z)  # idempotent: nothing changes
    assert {r["outcome"] for r in again} == {"already-done"}
    assert {g: kafka_offsets(admin, g) for g in expected} == expected

    verified = json_cli("verify", "--all", *z)
    assert {r["group"]: (r["clean"], r["checked"]) for r in verified} == {a: (True, 4), b: (True, 1), c: (True, 2)}
    assert migration(zk, a)["verify"]["clean"] is True

    zk.set(f"/consumers/{c}/offsets/{topic}/2", b"9")  # a legacy consumer moved on: Kafka is behind
    behind = json_cli("verify", "--group", c, *z, code=1)
    assert behind[0]["behind"] == [{"topic": topic, "partition": 2, "zookeeper": 9, "kafka": 7}]
    assert json_cli("finalize", "--group", c, *z, code=1)[0]["outcome"] == "not-clean"
    assert state(zk, c)["os"] == "dual"

    finalized = json_cli("finalize", "--group", a, "--group", b, *z, "--delete-legacy")
    assert {r["group"]: (r["outcome"], r["archived"], r["deleted"]) for r in finalized} == \
        {a: ("finalized", 4, 4), b: ("finalized", 2, 2)}
    assert (state(zk, a)["os"], state(zk, b)["os"]) == ("kafka", "kafka")
    assert not zk.exists(f"/consumers/{a}/offsets")
    assert migration(zk, b, "archive")["offsets"] == [[topic, 0, "abc"], [topic, 1, "5"]]
    assert kafka_offsets(admin, a) == expected[a]

    status = {s["group"]: s for s in json_cli("status", "--zookeeper", zk_hosts)}
    assert {g: (s["mode"], s["phase"], s["verify"]["clean"]) for g, s in status.items()} == \
        {a: ("kafka", "kafka", True), b: ("kafka", "kafka", True), c: ("dual", "dual", False)}
    table = run_cli("status", "--zookeeper", zk_hosts)
    assert table.exit_code == 0 and "1 behind" in table.output


def test_group_with_active_kafka_members_is_refused(services, zk_hosts, zk, admin, topic, unique_name):
    group = unique_name("g")
    seed(zk, group, {(topic, 0): b"10"})
    with active_kafka_member(services.bootstrap_servers, topic, group):
        result = run_cli("apply", "--group", group, "--zookeeper", zk_hosts,
                         "--bootstrap-servers", services.bootstrap_servers)
        assert result.exit_code == 1
        assert "refused: 1 active member(s) in Kafka" in result.output
        assert migration(zk, group) is None and not zk.exists(f"/coordinators/{group}/state")
        assert kafka_offsets(admin, group) == {}


def test_bad_input_is_one_line_and_exit_2(services, zk_hosts, tmp_path):
    z = ["--zookeeper", zk_hosts, "--bootstrap-servers", services.bootstrap_servers]
    both = run_cli("apply", "--all", "--group", "x", *z)
    assert both.exit_code == 2 and "exactly one of --group" in both.output
    folder = run_cli("apply", "--all", *z, "--backup-file", str(tmp_path))
    assert folder.exit_code == 2
    missing = run_cli("rollback", "--group", "nobody", *z, "--to-backup")
    assert missing.exit_code == 1 and "not migrated" in missing.output


# -- apply killed and resumed ------------------------------------------------------------------

KILLABLE_APPLY = textwrap.dedent("""
    import asyncio, sys, time
    from zkcoord.kafka.forwarder import KafkaGroupOffsets
    from zkcoord.migrate.apply import Adapters, apply_group
    from zkcoord.zk.connection import ZkConnection

    zk_hosts, bootstrap, group, pause = sys.argv[1:5]

    def freeze(what):
        print(what, flush=True)
        if what == pause:
            time.sleep(600)  # the test kills us here with SIGKILL

    class Kafka(KafkaGroupOffsets):
        def commit_offsets(self, group, offsets):
            super().commit_offsets(group, offsets)
            freeze("committed")  # in Kafka, not yet in the migration record

    async def main():
        async with ZkConnection(zk_hosts, request_timeout_ms=20000) as conn:
            with Kafka(bootstrap) as kafka:
                await apply_group(Adapters.of(conn, kafka), group, on_step=lambda g, phase: freeze(phase))

    asyncio.run(main())
""")


@pytest.mark.parametrize("pause", ["backed-up", "committed", "kafka-committed"])
def test_apply_killed_mid_way_resumes_without_loss(services, zk_hosts, layout, zk, admin, topic, unique_name, pause):
    group = unique_name("g")
    seed(zk, group, {(topic, 0): b"10", (topic, 1): b"20", (topic, 2): b"xyz"})
    admin.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(4, "", None),
                                      TopicPartition(topic, 3): OffsetAndMetadata(33, "", None)})
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE_APPLY, zk_hosts, services.bootstrap_servers, group,
                             pause], stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        seen = []
        while pause not in seen:
            line = proc.stdout.readline()
            assert line, f"apply exited early with {proc.wait()} after {seen}"
            seen.append(line.strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    phase = migration(zk, group)["phase"]
    assert phase == {"backed-up": "backed-up", "committed": "backed-up", "kafka-committed": "kafka-committed"}[pause]
    assert not zk.exists(f"/coordinators/{group}/state")  # still zookeeper storage: no mode written yet

    rerun = json_cli("apply", "--group", group, "--zookeeper", zk_hosts,
                     "--bootstrap-servers", services.bootstrap_servers)
    assert (rerun[0]["outcome"], rerun[0]["phase"]) == ("applied", "dual")
    assert kafka_offsets(admin, group) == {(topic, 0): 10, (topic, 1): 20, (topic, 3): 33}
    assert migration(zk, group, "backup")["kafka"] == [[topic, 0, 4], [topic, 3, 33]]  # still the "before"
    assert state(zk, group)["os"] == "dual"
    assert migration(zk, group)["history"][-1][0] == "dual"


# -- rollback ----------------------------------------------------------------------------------

def test_rollback_copies_the_max_back_to_zookeeper(services, zk_hosts, zk, admin, topic, unique_name):
    group = unique_name("g")
    seed(zk, group, {(topic, 0): b"10", (topic, 1): b"20"})
    z = ["--zookeeper", zk_hosts, "--bootstrap-servers", services.bootstrap_servers]
    json_cli("apply", "--group", group, *z)
    json_cli("finalize", "--group", group, *z)
    admin.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(15, "", None),
                                      TopicPartition(topic, 2): OffsetAndMetadata(2, "", None)})
    zk.set(f"/consumers/{group}/offsets/{topic}/1", b"25")  # ZooKeeper ahead here: kept

    rolled = json_cli("rollback", "--group", group, *z)
    assert rolled[0]["outcome"] == "rolled-back"
    assert rolled[0]["written"] == [[topic, 0, 15], [topic, 2, 2]]
    assert [(m["before"], m["after"]) for m in rolled[0]["modes"]] == [("kafka", "dual"), ("dual", "zookeeper")]
    assert [legacy(zk, group, topic, p) for p in range(3)] == [b"15", b"25", b"2"]
    assert state(zk, group)["os"] == "zookeeper" and migration(zk, group)["phase"] == "zookeeper"
    assert json_cli("rollback", "--group", group, *z, code=1)[0]["outcome"] == "not-migrated"


def test_rollback_to_backup_restores_both_stores(services, zk_hosts, zk, admin, topic, unique_name):
    group = unique_name("g")
    seed(zk, group, {(topic, 0): b"10", (topic, 1): b"20"})
    admin.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(3, "", None)})
    z = ["--zookeeper", zk_hosts, "--bootstrap-servers", services.bootstrap_servers]
    json_cli("apply", "--group", group, *z)
    admin.alter_group_offsets(group, {TopicPartition(topic, 3): OffsetAndMetadata(5, "", None)})
    zk.set(f"/consumers/{group}/offsets/{topic}/0", b"12")

    rolled = json_cli("rollback", "--group", group, *z, "--to-backup")
    assert (rolled[0]["written"], rolled[0]["kafka_restored"], rolled[0]["kafka_deleted"]) == \
        ([[topic, 0, 10], [topic, 1, 20]], [[topic, 0, 3]], [[topic, 1], [topic, 3]])
    assert [legacy(zk, group, topic, p) for p in range(2)] == [b"10", b"20"]
    assert kafka_offsets(admin, group) == {(topic, 0): 3}
    assert state(zk, group)["os"] == "zookeeper"


# -- the daemon in dual and kafka storage ------------------------------------------------------

def test_daemon_in_dual_commits_to_both_and_fetches_the_max(services, zk_hosts, layout, zk, admin, topic,
                                                            unique_name):
    group = unique_name("g")
    seed(zk, group, {(topic, 0): b"10", (topic, 1): b"20", (topic, 2): b"30"})

    async def scenario():
        applied = await adapters_for(zk_hosts, services.bootstrap_servers, lambda a: apply_group(a, group))
        assert (applied.outcome, applied.mode.via) == ("applied", "direct")  # no daemon owned it
        async with OneDaemon(zk_hosts, services.bootstrap_servers) as one:
            client = await one.coordinator(group)
            assert await commit(client, group, {(topic, 0): (15, "m0")}) == [E_NONE]
            assert legacy(zk, group, topic, 0) == b"15"
            assert kafka_offsets(admin, group)[(topic, 0)] == 15
            zk.set(f"/consumers/{group}/offsets/{topic}/1", b"25")  # a legacy consumer, ZooKeeper only
            admin.alter_group_offsets(group, {TopicPartition(topic, 2): OffsetAndMetadata(40, "k2", None)})
            code, rows = await fetch(client, group)
            assert code == E_NONE
            assert rows == {(topic, 0): (15, "m0"), (topic, 1): (25, ""), (topic, 2): (40, "k2")}
            code, rows = await fetch(client, group, [(topic, 1), (topic, 3)])
            assert rows == {(topic, 1): (25, ""), (topic, 3): (-1, "")}

    asyncio.run(scenario())


def test_mode_switch_reaches_a_running_daemon_without_restart(services, zk_hosts, zk, admin, topic, unique_name):
    group = unique_name("g")
    z = ["--zookeeper", zk_hosts, "--bootstrap-servers", services.bootstrap_servers]

    async def scenario():
        async with OneDaemon(zk_hosts, services.bootstrap_servers) as one:
            client = await one.coordinator(group)
            member = await join_with_id(client, group)
            joined = await client.call(join(group, member))
            synced = await client.call(SyncGroupRequest(
                version=3, group_id=group, generation_id=joined.generation_id, member_id=member,
                group_instance_id=None,
                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"a")]))
            assert synced.error_code == E_NONE
            owner_before = zk.get_children(f"/coordinators/{group}/owner")
            as_member = dict(generation=joined.generation_id, member=member)

            assert await commit(client, group, {(topic, 0): (5, "")}, **as_member) == [E_NONE]
            assert kafka_offsets(admin, group) == {}  # zookeeper storage: Kafka untouched

            applied = json.loads((await asyncio.to_thread(run_cli, "apply", "--group", group, *z, "--output",
                                                          "json")).stdout)["groups"]
            assert applied[0]["mode"]["via"] == "owner 1"
            record = state(zk, group)
            assert (record["os"], record["s"], record["g"], [m["id"] for m in record["m"]]) == \
                ("dual", "Stable", joined.generation_id, [member])
            assert await commit(client, group, {(topic, 0): (7, "")}, **as_member) == [E_NONE]
            assert (legacy(zk, group, topic, 0), kafka_offsets(admin, group)) == (b"7", {(topic, 0): 7})

            finalized = await asyncio.to_thread(run_cli, "finalize", "--group", group, *z)
            assert finalized.exit_code == 0, finalized.output
            assert state(zk, group)["os"] == "kafka"
            assert await commit(client, group, {(topic, 0): (9, "")}, **as_member) == [E_NONE]
            assert (legacy(zk, group, topic, 0), kafka_offsets(admin, group)) == (b"7", {(topic, 0): 9})
            assert (await fetch(client, group))[1] == {(topic, 0): (9, "")}

            rolled = await asyncio.to_thread(run_cli, "rollback", "--group", group, *z)
            assert rolled.exit_code == 0, rolled.output
            assert (state(zk, group)["os"], legacy(zk, group, topic, 0)) == ("zookeeper", b"9")
            assert await commit(client, group, {(topic, 0): (11, "")}, **as_member) == [E_NONE]
            assert (legacy(zk, group, topic, 0), kafka_offsets(admin, group)) == (b"11", {(topic, 0): 9})

            beat = await client.call(HeartbeatRequest(version=3, group_id=group, generation_id=joined.generation_id,
                                                      member_id=member, group_instance_id=None))
            assert beat.error_code == E_NONE  # same generation all along: no rebalance, no step-down
            assert zk.get_children(f"/coordinators/{group}/owner") == owner_before

    asyncio.run(scenario())


def test_a_dual_group_without_bootstrap_servers_is_not_available(zk_hosts, layout, zk, unique_name, caplog):
    group = unique_name("g")

    async def scenario():
        async with connection(zk_hosts) as conn:
            change = await set_offset_storage(conn, group, "dual")
            assert (change.before, change.after, change.via) == ("zookeeper", "dual", "direct")
        assert state(zk, group) == {"v": 1, "s": "Empty", "g": 0, "os": "dual"}
        async with OneDaemon(zk_hosts) as one:
            client = await one.coordinator(group)
            assert await commit(client, group, {("t", 0): (1, "")}) == [E_COORDINATOR_NOT_AVAILABLE]
            assert (await fetch(client, group))[0] == E_COORDINATOR_NOT_AVAILABLE
            assert not zk.exists(f"/consumers/{group}")

    with caplog.at_level("ERROR", logger="zkcoord.server.manager"):
        asyncio.run(scenario())
    assert "has no Kafka bootstrap servers" in caplog.text


def test_mode_switch_keeps_an_unowned_groups_members(zk_hosts, zk, unique_name):
    group = unique_name("g")
    record = {"v": 1, "s": "Stable", "g": 4, "os": "zookeeper", "pt": "consumer", "pn": "range", "l": "m1",
              "m": [{"id": "m1", "c": "c", "h": "/h", "st": 10000, "rt": 30000, "p": [["range", ""]], "a": ""}]}
    zk.create(f"/coordinators/{group}/state", json.dumps(record).encode(), makepath=True)

    async def scenario():
        async with connection(zk_hosts) as conn:
            first = await set_offset_storage(conn, group, "kafka")
            again = await set_offset_storage(conn, group, "kafka")
            return first, again

    first, again = asyncio.run(scenario())
    assert (first.via, again.via) == ("direct", "unchanged")
    assert state(zk, group) == dict(record, os="kafka")
    assert zk.get_children(f"/coordinators/{group}/owner") == []  # the command released the election


def test_a_pending_request_is_applied_when_a_daemon_loads_the_group(zk_hosts, layout, zk, unique_name):
    group = unique_name("g")
    zk.create(f"/zkcoord/migrations/{group}/mode-request", b'{"os":"dual","id":"x"}', makepath=True)

    async def scenario():
        async with OneDaemon(zk_hosts) as one:
            client = await one.coordinator(group)  # a lookup alone: nobody contends, nothing is loaded
            assert not zk.exists(f"/coordinators/{group}/owner")
            # The group's first request makes the daemon take and load it: the request is read at once.
            await client.call(OffsetFetchRequest(version=5, group_id=group, topics=None))
            for _ in range(200):
                if zk.exists(f"/coordinators/{group}/state") and state(zk, group)["os"] == "dual":
                    return
                await asyncio.sleep(0.05)
            raise AssertionError("the pending mode request was not applied")

    asyncio.run(scenario())


def test_a_stale_request_for_another_mode_is_withdrawn(zk_hosts, zk, unique_name):
    group = unique_name("g")
    zk.create(f"/zkcoord/migrations/{group}/mode-request", b'{"os":"kafka","id":"dead"}', makepath=True)

    async def scenario():
        async with connection(zk_hosts) as conn:
            return await set_offset_storage(conn, group, "zookeeper")

    assert asyncio.run(scenario()).via == "unchanged"
    assert not zk.exists(f"/zkcoord/migrations/{group}/mode-request")


def test_an_owner_that_does_not_answer_times_out_and_the_request_is_withdrawn(zk_hosts, zk, unique_name):
    from zkcoord.errors import ServiceUnavailableError

    group = unique_name("g")
    zk.create(f"/coordinators/{group}/owner/{'a' * 32}__lock__", b"5", makepath=True, sequence=True)

    async def scenario():
        async with connection(zk_hosts) as conn:
            with pytest.raises(ServiceUnavailableError, match=r"its owner \(node 5\) did not apply the request"):
                await set_offset_storage(conn, group, "dual", timeout_s=1.5)

    asyncio.run(scenario())
    assert not zk.exists(f"/zkcoord/migrations/{group}/mode-request")
    assert not zk.exists(f"/coordinators/{group}/state")
