"""`zkcoord groups` and `zkcoord describe` on real ZooKeeper, Kafka and daemons.

One scene per module, in a chroot of its own: a 3-partition topic with 10
records per partition, two in-process daemons (with Kafka, for dual-commit),
and four groups:

* ``live``:   two real consumers (``zkcoord.client.Consumer``) that consumed
  and committed through the daemons; offsets in ZooKeeper.
* ``dual``:   one real consumer, switched to dual-commit with the migration
  toolkit's ``set_offset_storage``; its commits land in both stores, then
  Kafka is moved ahead on one partition so the stores differ.
* ``legacy``: only znodes, as Kafka's old ZooKeeper consumer wrote them
  (offsets, ``ids``, ``owners``), one unparsable offset.
* ``kafka``:  offsets committed to Kafka alone.

Each view (offsets, members, state) and each output (table, json) is
checked with exact values; then the daemons-down, rebalance (live state),
watch and error cases, each in a chroot of its own.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from click.testing import CliRunner
from kafka.protocol.consumer.group import JoinGroupRequest, SyncGroupRequest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.integration.test_client_support import ThreadDaemons, config, create_topic, eventually, produce
from tests.support.wire import WireClient
from zkcoord.cli.inspect_cmd import describe, groups
from zkcoord.cli.main import ZkcoordGroup
from zkcoord.client import Consumer, TopicPartition
from zkcoord.kafka.offsets import KafkaOffsets
from zkcoord.zk.modes import set_offset_storage
from zkcoord.zk.connection import ZkConnection

pytestmark = pytest.mark.integration
RECORDS = 10
CLI = ZkcoordGroup(commands={"groups": groups, "describe": describe})  # as zkcoord.cli.main registers them


def run(*args: str, env: dict | None = None):
    result = CliRunner().invoke(CLI, list(args), env=env or {})
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result


def row(stdout: str, *first: str) -> list[str]:
    """The cells of the one table row whose first cells are ``first``."""
    [found] = [line.split() for line in stdout.splitlines() if line.split()[:len(first)] == list(first)]
    return found


def run_json(*args: str, env: dict | None = None) -> dict:
    result = run(*args, "--output", "json", env=env)
    return json.loads(result.stdout)


# -- the scene -----------------------------------------------------------------------------
class Scene:
    def __init__(self, services, zk_root_client):
        self.chroot = f"/zkcoord-tests/inspect-{uuid.uuid4().hex[:8]}"
        zk_root_client.ensure_path(self.chroot)
        self.zk_hosts = f"{services.zookeeper}{self.chroot}"
        self.bootstrap = services.bootstrap_servers
        tag = uuid.uuid4().hex[:8]
        self.topic = f"inspect-{tag}"
        self.live, self.dual, self.legacy, self.kafka_only = (f"{k}-{tag}" for k in ("live", "dual", "legacy", "kafka"))
        self.consumers: dict[str, list[Consumer]] = {}

    def env(self, kafka: bool = True) -> dict:
        env = {"ZKCOORD_ZOOKEEPER": self.zk_hosts}
        if kafka:
            env["ZKCOORD_BOOTSTRAP_SERVERS"] = self.bootstrap
        return env

    def consumer(self, daemons: ThreadDaemons, group: str, name: str) -> Consumer:
        consumer = Consumer(config(daemons.addresses, self.bootstrap, group, client_id=name,
                                   max_poll_interval_ms=600_000, session_timeout_ms=30_000))
        consumer.start()
        consumer.subscribe([self.topic])
        self.consumers.setdefault(group, []).append(consumer)
        return consumer

    def settle(self, group: str, total: int) -> None:
        """Poll the group's consumers until each has its partitions and all
        ``total`` records are consumed, committing as they go."""
        members = self.consumers[group]
        seen: set = set()

        def step():
            for c in members:
                for record in c.poll(timeout_ms=200):
                    seen.add((record.partition, record.offset))
                if c.assignment():
                    c.commit()

        eventually(lambda: len(seen) == total and all(c.membership().state == "stable" and c.assignment()
                                                      for c in members) and _one_generation(members),
                   f"group {group} settled", step=step)
        for c in members:
            c.commit()

    def close(self) -> None:
        for consumers in self.consumers.values():
            for c in consumers:
                c.close()


def _one_generation(members) -> bool:
    return len({c.membership().generation_id for c in members}) == 1


def seed_legacy(zk, scene: Scene) -> None:
    base = f"/consumers/{scene.legacy}"
    consumer_id = f"{scene.legacy}_web-1.example-1700000000000-abcd1234"
    zk.create(f"{base}/ids/{consumer_id}", b'{"version":1,"subscription":{"t":1},"pattern":"static"}', makepath=True)
    zk.create(f"{base}/offsets/{scene.topic}/0", b"7", makepath=True)
    zk.create(f"{base}/offsets/{scene.topic}/1", b"10", makepath=True)
    zk.create(f"{base}/offsets/{scene.topic}/2", b"garbage", makepath=True)
    zk.create(f"{base}/owners/{scene.topic}/0", f"{consumer_id}-0".encode(), makepath=True)


def switch_to_dual(scene: Scene) -> None:
    async def main():
        conn = ZkConnection(scene.zk_hosts, connect_timeout_ms=20_000, request_timeout_ms=20_000)
        async with conn:
            return await set_offset_storage(conn, scene.dual, "dual", timeout_s=60)
    change = asyncio.run(main())
    assert (change.before, change.after) == ("zookeeper", "dual")


@pytest.fixture(scope="module")
def scene(services, zk_root):
    from kazoo.client import KazooClient

    scene = Scene(services, zk_root)
    create_topic(scene.bootstrap, scene.topic, 3)
    produce(scene.bootstrap, scene.topic, range(3), RECORDS)
    zk = KazooClient(hosts=scene.zk_hosts, timeout=10)
    zk.start(timeout=30)
    with ThreadDaemons(scene.zk_hosts, 2, bootstrap_servers=scene.bootstrap) as daemons:
        scene.daemons = daemons
        try:
            scene.consumer(daemons, scene.live, "worker-a")
            scene.consumer(daemons, scene.live, "worker-b")
            scene.settle(scene.live, 3 * RECORDS)
            scene.consumer(daemons, scene.dual, "dual-worker")
            scene.settle(scene.dual, 3 * RECORDS)  # commits 10 on every partition, in ZooKeeper
            switch_to_dual(scene)
            [dual_consumer] = scene.consumers[scene.dual]
            dual_consumer.commit({TopicPartition(scene.topic, p): 10 for p in range(3)})  # now in both stores
            with KafkaOffsets(scene.bootstrap) as kafka:
                kafka.commit_offsets(scene.dual, {(scene.topic, 1): 4})  # Kafka behind on partition 1
                kafka.commit_offsets(scene.kafka_only, {(scene.topic, 0): 3})
            seed_legacy(zk, scene)
            yield scene
        finally:
            scene.close()
            zk.stop()
            zk.close()


def members_of(scene: Scene, group: str) -> dict[str, Consumer]:
    return {c.membership().member_id: c for c in scene.consumers[group]}


def owner_address(scene: Scene, group: str) -> tuple[int, str]:
    node_id = scene.consumers[group][0].coordinator_node_id()
    host, port = scene.daemons.running[node_id - 1].advertised
    return node_id, f"{host}:{port}"


# -- groups -------------------------------------------------------------------------------
def test_groups_lists_every_source(scene):
    doc = run_json("groups", env=scene.env())
    assert doc["schema"] == "zkcoord/groups/v1" and doc["zookeeper"] == scene.zk_hosts
    assert sorted(d["node_id"] for d in doc["daemons"]) == [1, 2]
    by_name = {g["group"]: g for g in doc["groups"]}
    node, address = owner_address(scene, scene.live)
    host, port = address.rsplit(":", 1)
    assert by_name[scene.live] == {
        "group": scene.live, "state": "Stable", "generation": scene.consumers[scene.live][0].membership().generation_id,
        "owner": {"node_id": node, "host": host, "port": int(port), "live": True}, "members": 2,
        "storage": "zookeeper", "sources": ["zkcoord"], "error": None,  # its offsets under /consumers are its own
        "type": "classic", "group_epoch": None, "assignment_epoch": None, "legacy_consumers": 0, "handover": None}
    # its Kafka offsets are zkcoord's too, and Kafka's own coordinator has no members in it
    assert (by_name[scene.dual]["storage"], by_name[scene.dual]["sources"]) == ("dual", ["zkcoord"])
    assert by_name[scene.legacy] == {"group": scene.legacy, "state": "Stable", "generation": None, "owner": None,
                                     "members": 1, "storage": "zookeeper", "sources": ["legacy"], "error": None,
                                     "type": None, "group_epoch": None, "assignment_epoch": None,
                                     "legacy_consumers": 1, "handover": None}
    assert by_name[scene.kafka_only] == {"group": scene.kafka_only, "state": "Empty", "generation": None,
                                         "owner": None, "members": 0, "storage": "kafka", "sources": ["kafka"],
                                         "error": None, "type": None, "group_epoch": None, "assignment_epoch": None,
                                         "legacy_consumers": 0, "handover": None}
    assert doc["notes"] == []


def test_groups_filters_and_table(scene):
    dual_only = run_json("groups", "--mode", "dual", env=scene.env())
    assert [g["group"] for g in dual_only["groups"]] == [scene.dual]
    stable = run_json("groups", "--state", "stable,EMPTY", "--mode", "zookeeper", env=scene.env(kafka=False))
    assert [g["group"] for g in stable["groups"]] == sorted([scene.live, scene.legacy])
    assert stable["notes"] == ["groups only Kafka knows are not listed: pass --bootstrap-servers (or set "
                               "ZKCOORD_BOOTSTRAP_SERVERS)"]

    table = run("groups", env=scene.env(kafka=False))
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[1].split() == ["GROUP", "TYPE", "STATE", "OWNER", "MEMBERS", "STORAGE", "SOURCE"]
    node, address = owner_address(scene, scene.live)
    assert [line.split() for line in lines if line.startswith(scene.live)] == [
        [scene.live, "Classic", "Stable", address, f"({node})", "2", "zookeeper", "zkcoord"]]
    assert [line.split() for line in lines if line.startswith(scene.legacy)] == [
        [scene.legacy, "-", "Stable", "-", "1", "zookeeper", "legacy"]]
    classic = run_json("groups", "--type", "classic", env=scene.env(kafka=False))
    assert [g["group"] for g in classic["groups"]] == sorted([scene.live, scene.dual])

    bad = run("groups", "--state", "Running", env=scene.env())
    assert bad.exit_code == 2 and "--state 'Running' is not a group state" in bad.output


# -- describe: the three views ---------------------------------------------------------
def test_describe_offsets_of_a_live_group(scene):
    doc = run_json("describe", scene.live, env=scene.env())
    assert doc["schema"] == "zkcoord/describe/v1" and doc["errors"] == [] and doc["notes"] == []
    [group] = doc["groups"]
    members = members_of(scene, scene.live)
    owner_of = {(tp.topic, tp.partition): mid for mid, c in members.items() for tp in c.assignment()}
    names = {"worker-a", "worker-b"}
    rows = [(r["topic"], r["partition"], r["current_offset"], r["zookeeper_offset"], r["kafka_offset"],
             r["log_end_offset"], r["lag"], r["member_id"]) for r in group["offsets"]]
    assert rows == [(scene.topic, p, RECORDS, RECORDS, None, RECORDS, 0, owner_of[(scene.topic, p)])
                    for p in range(3)]
    assert all(r["client_id"] in names and r["member_id"].startswith(r["client_id"] + "-") for r in group["offsets"])
    assert all(r["host"] and r["host"].startswith("/127.0.0.1") for r in group["offsets"])
    assert (group["state"], group["read_from"], group["storage"], group["sources"], group["type"]) == \
        ("Stable", "daemon", "zookeeper", ["zkcoord"], "classic")
    assert (group["group_epoch"], group["assignment_epoch"]) == (None, None)
    assert {m["member_type"] for m in group["members"]} == {"classic"}
    assert group["kafka_group"] is None  # Kafka's own coordinator never saw the group (it says "Dead")

    table = run("describe", scene.live, env=scene.env())
    lines = table.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("GROUP ") and "TOPIC" in line)
    assert lines[header].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                     "CONSUMER-ID", "HOST", "CLIENT-ID"]
    first = lines[header + 1].split()
    assert first[:6] == [scene.live, scene.topic, "0", str(RECORDS), str(RECORDS), "0"]
    assert first[6] == owner_of[(scene.topic, 0)]
    node, address = owner_address(scene, scene.live)
    assert f"Consumer group '{scene.live}': Stable, generation " in table.stdout
    assert f"coordinator {address} ({node}), live from the owner" in table.stdout


def test_describe_members_and_state_views(scene):
    members = members_of(scene, scene.live)
    generation = next(iter(members.values())).membership().generation_id
    doc = run_json("describe", scene.live, "--members", env=scene.env(kafka=False))
    [group] = doc["groups"]
    assert {m["member_id"]: (m["partitions"], m["assignment"], m["group_instance_id"]) for m in group["members"]} == {
        mid: (len(c.assignment()), {scene.topic: sorted(tp.partition for tp in c.assignment())}, None)
        for mid, c in members.items()}
    assert {m["client_id"] for m in group["members"]} == {"worker-a", "worker-b"}
    node, address = owner_address(scene, scene.live)
    assert (group["generation"], group["assignment_strategy"], group["protocol_type"]) == (generation, "range",
                                                                                         "consumer")
    assert group["coordinator"]["node_id"] == node and group["coordinator"]["live"] is True

    verbose = run("describe", scene.live, "--members", "--verbose", env=scene.env(kafka=False)).stdout
    header = next(line for line in verbose.splitlines() if line.startswith("GROUP "))
    assert header.split() == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                              "ASSIGNMENT"]
    rows = {line.split()[1]: line.split() for line in verbose.splitlines() if line.startswith(scene.live + " ")}
    for mid, c in members.items():
        parts = ",".join(str(p) for p in sorted(tp.partition for tp in c.assignment()))
        assert rows[mid][2] == "-" and rows[mid][3].startswith("/127.0.0.1")  # no group.instance.id; host
        assert rows[mid][4] in ("worker-a", "worker-b") and mid.startswith(rows[mid][4] + "-")
        assert rows[mid][5:] == [str(len(c.assignment())), f"{scene.topic}({parts})"]

    state = run("describe", scene.live, scene.dual, "--state", env=scene.env(kafka=False)).stdout.splitlines()
    header = next(line for line in state if line.startswith("GROUP"))
    assert header.split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS",
                              "GENERATION", "STORAGE", "MIGRATION"]
    live_row = next(line for line in state if line.startswith(scene.live))
    assert live_row.split() == [scene.live, address, f"({node})", "range", "Stable", "2", str(generation),
                                "zookeeper", "-"]
    dual_row = next(line for line in state if line.startswith(scene.dual))
    assert dual_row.split()[3:6] == ["range", "Stable", "1"] and dual_row.split()[7] == "dual"


def test_describe_dual_shows_both_stores(scene):
    doc = run_json("describe", scene.dual, env=scene.env())
    [group] = doc["groups"]
    assert (group["storage"], group["kafka_group"]) == ("dual", {"state": "Empty", "members": 0, "member_list": []})
    assert [(r["partition"], r["current_offset"], r["zookeeper_offset"], r["kafka_offset"], r["log_end_offset"],
             r["lag"]) for r in group["offsets"]] == [
        (0, 10, 10, 10, 10, 0), (1, 10, 10, 4, 10, 0), (2, 10, 10, 10, 10, 0)]
    [member] = group["members"]
    assert all(r["member_id"] == member["member_id"] for r in group["offsets"])

    table = run("describe", scene.dual, env=scene.env()).stdout
    assert row(table, "GROUP", "TOPIC") == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "ZK-OFFSET",
                                            "KAFKA-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert row(table, scene.dual, scene.topic, "1")[:8] == [scene.dual, scene.topic, "1", "10", "10", "4", "10", "0"]
    assert row(table, scene.dual, scene.topic, "1")[8:] == [member["member_id"], member["host"], "dual-worker"]

    without_kafka = run_json("describe", scene.dual, env=scene.env(kafka=False))["groups"][0]
    assert [(r["current_offset"], r["zookeeper_offset"], r["kafka_offset"], r["log_end_offset"])
            for r in without_kafka["offsets"]] == [(None, 10, None, None)] * 3  # resume point unknown without Kafka
    assert "the group's offsets are in Kafka too (dual storage); pass --bootstrap-servers (or set " \
           "ZKCOORD_BOOTSTRAP_SERVERS) to see them" in without_kafka["notes"]


def test_describe_legacy_and_kafka_only_groups(scene):
    doc = run_json("describe", scene.legacy, scene.kafka_only, env=scene.env())
    legacy, kafka_only = doc["groups"]
    consumer_id = f"{scene.legacy}_web-1.example-1700000000000-abcd1234"
    assert (legacy["state"], legacy["storage"], legacy["read_from"], legacy["coordinator"]) == \
        ("Stable", "zookeeper", "zookeeper", None)
    assert legacy["members"] == [{"member_id": consumer_id, "group_instance_id": None, "client_id": "",
                                  "host": "web-1.example", "partitions": 1, "assignment": {scene.topic: [0]},
                                  "member_type": None, "member_epoch": None, "target_assignment": None,
                                  "rack_id": None, "subscribed_topic_names": None, "subscribed_topic_regex": None}]
    assert (legacy["type"], kafka_only["type"]) == (None, None)  # neither is a Kafka group type
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"], r["member_id"], r["host"])
            for r in legacy["offsets"]] == [
        (0, 7, 10, 3, f"{consumer_id}-0", "web-1.example"), (1, 10, 10, 0, None, None),
        (2, None, 10, None, None, None)]
    assert (f"legacy offset of {scene.topic}-2 is unparsable: znode /consumers/{scene.legacy}/offsets/{scene.topic}/2 "
            "holds 'garbage' (not a decimal number)") in legacy["notes"]

    assert (kafka_only["state"], kafka_only["storage"], kafka_only["read_from"], kafka_only["sources"]) == \
        ("Empty", "kafka", "kafka", ["kafka"])
    assert [(r["partition"], r["current_offset"], r["kafka_offset"], r["log_end_offset"], r["lag"])
            for r in kafka_only["offsets"]] == [(0, 3, 3, 10, 7)]

    table = run("describe", scene.legacy, env=scene.env()).stdout
    g, t = scene.legacy, scene.topic
    assert row(table, g, t, "1") == [g, t, "1", "10", "10", "0", "-", "-", "-"]
    assert row(table, g, t, "2") == [g, t, "2", "-", "10", "-", "-", "-", "-"]


def test_unknown_group_is_exit_1_and_the_others_are_shown(scene):
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    result = run("describe", scene.live, missing, "--state", env=scene.env())
    assert result.exit_code == 1
    assert scene.live in result.stdout
    assert f"error: Consumer group {missing!r} does not exist (no state at /coordinators/{missing}/state, nothing " \
           f"under /consumers/{missing}, and Kafka at {scene.bootstrap} does not know it)" in result.stderr
    doc = run_json("describe", missing, env=scene.env(kafka=False))
    assert doc["groups"] == [] and [e["error"] for e in doc["errors"]] == ["not-found"]
    for kafka in (True, False):  # only the error: no empty line, no note about log ends of nothing
        alone = run("describe", missing, env=scene.env(kafka=kafka))
        assert (alone.exit_code, alone.stdout) == (1, "")
        assert alone.stderr.startswith(f"error: Consumer group {missing!r} does not exist (")
        assert len(alone.stderr.splitlines()) == 1


# -- without daemons, during a rebalance, watching ---------------------------------------
def subscription(topic: str) -> bytes:
    return bytes(ConsumerProtocolSubscription(version=0, topics=[topic], user_data=None).encode())


def assignment(topic: str, partitions) -> bytes:
    return bytes(ConsumerProtocolAssignment(version=0, assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=list(partitions))],
        user_data=None).encode())


def join_request(group: str, member_id: str, topic: str) -> JoinGroupRequest:
    return JoinGroupRequest(version=5, group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
                            member_id=member_id, group_instance_id=None, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                 metadata=subscription(topic))])


async def stable_member(daemons: ThreadDaemons, group: str, topic: str, client_id: str = "solo"):
    """A member that joined and synced alone, owning partitions 0 and 1: (client, member id)."""
    host, port = daemons.running[0].advertised
    client = await WireClient.connect(host, port, client_id)
    found = await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))  # names this daemon
    assert found.error_code == 0, found
    first = await client.call(join_request(group, "", topic))
    joined = await client.call(join_request(group, first.member_id, topic))
    assert joined.error_code == 0, joined
    synced = await client.call(SyncGroupRequest(
        version=3, group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
        group_instance_id=None, assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
            member_id=joined.member_id, assignment=assignment(topic, [0, 1]))]))
    assert synced.error_code == 0, synced
    return client, joined.member_id


def test_daemons_down_reads_zookeeper_and_says_so(zk_hosts, zk, unique_name):
    group, topic = unique_name("g"), unique_name("t")
    with ThreadDaemons(zk_hosts, 1) as daemons:
        client, member_id = daemons._run(stable_member(daemons, group, topic))
        daemons._run(client.close())
    # every daemon stopped: the record stays Stable with its member, nobody owns it
    env = {"ZKCOORD_ZOOKEEPER": zk_hosts}
    doc = run_json("describe", group, env=env)
    [view] = doc["groups"]
    assert doc["daemons"] == [] and doc["notes"][0].startswith("no zkcoord daemon is registered under /zkcoord/nodes")
    assert (view["state"], view["read_from"], view["generation"], view["coordinator"]) == \
        ("Stable", "zookeeper", 1, None)
    assert [(m["member_id"], m["client_id"], m["assignment"]) for m in view["members"]] == \
        [(member_id, "solo", {topic: [0, 1]})]
    assert [(r["partition"], r["member_id"], r["current_offset"]) for r in view["offsets"]] == \
        [(0, member_id, None), (1, member_id, None)]
    table = run("describe", group, "--state", env=env)
    assert table.exit_code == 0
    assert "note: no zkcoord daemon is registered under /zkcoord/nodes (all down?): read from ZooKeeper directly" \
        in table.stdout
    listed = run_json("groups", env=env)
    assert listed["groups"][0]["owner"] is None and listed["notes"][0].startswith("no zkcoord daemon is registered")


def test_live_state_during_a_rebalance_and_watch(zk_hosts, zk, unique_name):
    group, topic = unique_name("g"), unique_name("t")
    env = {"ZKCOORD_ZOOKEEPER": zk_hosts}
    with ThreadDaemons(zk_hosts, 1) as daemons:
        first, first_id = daemons._run(stable_member(daemons, group, topic))
        host, port = daemons.running[0].advertised
        second = daemons._run(WireClient.connect(host, port, "second"))
        handshake = daemons._run(second.call(join_request(group, "", topic)))
        pending = asyncio.run_coroutine_threadsafe(second.call(join_request(group, handshake.member_id, topic)),
                                                   daemons.loop)  # parked until the first member rejoins
        eventually(lambda: run_json("describe", group, "--state", env=env)["groups"][0]["state"] ==
                   "PreparingRebalance", "the owner reports the rebalance")
        stored = json.loads(zk.get(f"/coordinators/{group}/state")[0])
        assert (stored["s"], stored["g"]) == ("Stable", 1)  # ZooKeeper has not seen it yet: only the owner knows
        view = run_json("describe", group, "--state", env=env)["groups"][0]
        assert (view["read_from"], view["generation"]) == ("daemon", 1)
        assert sorted(m["member_id"] for m in view["members"]) == sorted([first_id, handshake.member_id])

        watched = run("describe", group, "--state", "--watch", "--count", "2", "--interval", "0.2",
                      "--output", "json", env=env)
        lines = [json.loads(line) for line in watched.stdout.splitlines()]
        assert watched.exit_code == 0 and len(lines) == 2
        assert [doc["groups"][0]["state"] for doc in lines] == ["PreparingRebalance"] * 2
        assert all(doc["schema"] == "zkcoord/describe/v1" and doc["at"] for doc in lines)

        daemons._run(first.call(join_request(group, first_id, topic)))  # the rebalance completes
        assert pending.result(30).generation_id == 2
        table = run("describe", group, "--state", "--watch", "--count", "2", "--interval", "0.2", env=env)
        snapshots = table.stdout.split(f"Every 0.2s: zkcoord describe {group} --state")
        assert table.exit_code == 0 and len(snapshots) == 3
        assert all(group in s and "CompletingRebalance" in s and " 2 " in s for s in snapshots[1:])
        for client in (first, second):
            daemons._run(client.close())


def test_zookeeper_unreachable_is_exit_2():
    result = run("describe", "g", "--zookeeper", "127.0.0.1:1", "--timeout-ms", "2000")
    assert result.exit_code == 2
    assert "error: cannot connect to ZooKeeper at 127.0.0.1:1: 127.0.0.1:1 refused the connection" in result.output
    listed = run("groups", "--zookeeper", "127.0.0.1:1", "--timeout-ms", "2000", "--output", "json")
    assert listed.exit_code == 2 and listed.stdout == ""


def test_bad_usage_is_exit_2(zk_hosts):
    env = {"ZKCOORD_ZOOKEEPER": zk_hosts}
    both = run("describe", "g", "--members", "--state", env=env)
    assert both.exit_code == 2 and "give at most one" in both.output
    none = run("describe", env=env)
    assert none.exit_code == 2 and "name the groups to describe" in none.output
    bad_timeout = run("describe", "g", "--timeout-ms", "5", env=env)
    assert bad_timeout.exit_code == 2 and "'--timeout-ms': 5 is not in the range" in bad_timeout.output
    # Any id Kafka accepts is a group id (zk/paths encodes it into a znode name): not a usage error
    slashed = run("describe", "a/b", "--output", "json", env=env)
    assert slashed.exit_code != 2 and "Traceback" not in slashed.output and "a/b" in slashed.output
