"""`zkcoord describe` and `zkcoord groups` of KIP-848 consumer groups, on real
ZooKeeper, Kafka and in-process daemons.

The groups are made on the wire, as a consumer speaks to its coordinator:
ConsumerGroupHeartbeat (API 68) members that take what they are assigned at
once and report what they own, OffsetCommit v9 with their member epoch; in
the mixed group a classic member (JoinGroup/SyncGroup/Heartbeat, rejoining
when told) beside a consumer-protocol one. Each test waits, with a
deadline, until the owner's own ConsumerGroupDescribe says the group is
Stable with every member at its target, then reads the CLI's output (table
and JSON) and checks it against what the members were given; then the
metrics, summed over every daemon (whichever owns the group); then, with the
daemons stopped, the same from ZooKeeper's stored records, the topic ids
named by Kafka and by ZooKeeper's ``/brokers/topics``. Last, the same mixed
group on the Kafka 4.4 reference peer (fixture ``kafka4``): Kafka 4.4's
kafka-consumer-groups and zkcoord's tables, column by column.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from click.testing import CliRunner
from kafka.protocol.consumer.group import HeartbeatRequest, OffsetCommitRequest, SyncGroupRequest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_client_support import ThreadDaemons, create_topic, produce
from tests.integration.test_inspect import join_request
from tests.support.consumer_members import ConsumerMember, no_partition_twice
from tests.support.http import http_get
from tests.support.wire import coordinator_client
from zkcoord.cli.inspect_cmd import describe, groups
from zkcoord.cli.main import ZkcoordGroup
from zkcoord.kafka.offsets import KafkaOffsets
from zkcoord.schemas import ConsumerGroupDescribeRequest

pytestmark = pytest.mark.integration
CLI = ZkcoordGroup(commands={"groups": groups, "describe": describe})
PARTITIONS, RECORDS = 4, 5
WAIT_S = 60.0
E_NONE, E_REBALANCE_IN_PROGRESS = 0, 27
P = OffsetCommitRequest.OffsetCommitRequestTopic


def run(*args: str, env: dict):
    result = CliRunner().invoke(CLI, list(args), env=env)
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result


def run_json(*args: str, env: dict) -> dict:
    result = run(*args, "--output", "json", env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def rows(stdout: str, first: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.split()[:1] == [first]]


def daemons_for(zk_hosts: str, bootstrap: str, count: int) -> ThreadDaemons:
    return ThreadDaemons(zk_hosts, count, bootstrap_servers=bootstrap, topic_metadata_refresh_ms=200,
                         metrics_listen="127.0.0.1:0")


# -- members on the wire ------------------------------------------------------------------------
async def commit(addresses: str, member: ConsumerMember, topic: str, offset: int) -> None:
    """OffsetCommit v9 (a consumer-protocol member's: its id and epoch) of every partition it owns."""
    client = await coordinator_client(addresses, member.group)
    try:
        answer = await client.call(OffsetCommitRequest(
            version=9, group_id=member.group, generation_id_or_member_epoch=member.epoch,
            member_id=member.member_id, group_instance_id=None, topics=[P(name=topic, partitions=[
                P.OffsetCommitRequestPartition(partition_index=p, committed_offset=offset, committed_metadata="")
                for _, p in sorted(member.partitions())])]))
    finally:
        await client.close()
    assert all(p.error_code == E_NONE for t in answer.topics for p in t.partitions), answer


class ClassicProtocolMember:
    """A classic member (JoinGroup/SyncGroup/Heartbeat) inside a consumer group: rejoins when told."""

    def __init__(self, client, group: str, topic: str):
        self.client, self.group, self.topic = client, group, topic
        self.member_id, self.generation, self.owned = "", -1, []

    async def join(self) -> None:  # None: nothing for settle() to check (the asserts are here)
        joined = await self.client.call(join_request(self.group, self.member_id, self.topic))
        if not self.member_id:  # MEMBER_ID_REQUIRED: again with the id it was given
            self.member_id = joined.member_id
            joined = await self.client.call(join_request(self.group, self.member_id, self.topic))
        assert joined.error_code == E_NONE, joined
        self.generation = joined.generation_id
        synced = await self.client.call(SyncGroupRequest(
            version=3, group_id=self.group, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=None, assignments=[]))
        if synced.error_code == E_REBALANCE_IN_PROGRESS:
            return  # behind the group's target already: the next heartbeat says rejoin
        assert synced.error_code == E_NONE, synced
        from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

        decoded = ConsumerProtocolAssignment.decode(bytes(synced.assignment))
        self.owned = sorted(p for tp in decoded.assigned_partitions for p in tp.partitions)

    async def heartbeat(self) -> None:
        if self.generation < 0:
            return await self.join()
        answer = await self.client.call(HeartbeatRequest(version=3, group_id=self.group, generation_id=self.generation,
                                                         member_id=self.member_id, group_instance_id=None))
        if answer.error_code == E_REBALANCE_IN_PROGRESS:
            return await self.join()
        assert answer.error_code == E_NONE, answer
        return None

    async def commit(self, offset: int) -> None:
        answer = await self.client.call(OffsetCommitRequest(
            version=7, group_id=self.group, generation_id_or_member_epoch=self.generation, member_id=self.member_id,
            group_instance_id=None, topics=[P(name=self.topic, partitions=[
                P.OffsetCommitRequestPartition(partition_index=p, committed_offset=offset, committed_metadata="")
                for p in self.owned])]))
        assert all(p.error_code == E_NONE for t in answer.topics for p in t.partitions), answer


async def described(client, group: str):
    answer = await client.call(ConsumerGroupDescribeRequest(version=1, group_ids=[group],
                                                            include_authorized_operations=False))
    [found] = answer.groups
    assert found.error_code == E_NONE, found
    return found


async def settle(members: list, observer, group: str, partitions: int) -> object:
    """Heartbeat every member until the owner describes the group Stable, each member at its target,
    every partition owned once (by the members' own account too)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        for member in members:
            answer = await member.heartbeat()
            assert answer is None or answer.error_code == E_NONE, answer
        no_partition_twice([m for m in members if isinstance(m, ConsumerMember)])
        group_now = await described(observer, group)
        at_target = all(_parts(m.assignment) == _parts(m.target_assignment) and m.member_epoch ==
                        group_now.assignment_epoch for m in group_now.members)
        owned = sorted(p for m in members for p in _owned(m))
        if group_now.group_state == "Stable" and at_target and owned == list(range(partitions)):
            return group_now
        assert time.monotonic() < deadline, f"group {group} never settled: {group_now}"
        await asyncio.sleep(0.1)


def _parts(assignment) -> list[tuple[str, int]]:
    return sorted((t.topic_name, p) for t in assignment.topic_partitions for p in t.partitions)


def _owned(member) -> list[int]:
    return member.owned if isinstance(member, ClassicProtocolMember) else [p for _, p in member.partitions()]


def metrics_summed(daemons: ThreadDaemons) -> dict[tuple[str, tuple], float]:
    """Every sample of every daemon's /metrics, summed over the daemons (whichever owns the group)."""
    total: dict[tuple[str, tuple], float] = {}
    for running in daemons.running:
        status, body = daemons._run(http_get(running.metrics_port, "/metrics"))
        assert status == 200
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                total[key] = total.get(key, 0) + s.value
    return total


def labels(**kw) -> tuple:
    return tuple(sorted(kw.items()))


# -- the tests ------------------------------------------------------------------------------------
def test_a_consumer_group_live_then_stored(services, zk_hosts, zk, unique_name):
    group, topic = unique_name("cg"), unique_name("t")
    create_topic(services.bootstrap_servers, topic, PARTITIONS)
    produce(services.bootstrap_servers, topic, range(PARTITIONS), RECORDS)
    env = {"ZKCOORD_ZOOKEEPER": zk_hosts, "ZKCOORD_BOOTSTRAP_SERVERS": services.bootstrap_servers}
    with daemons_for(zk_hosts, services.bootstrap_servers, 2) as daemons:
        addresses = daemons.addresses

        async def start():
            observer = await coordinator_client(addresses, group, client_id="observer")
            members = [ConsumerMember(addresses, group, [topic], assignor="range", client_id=name)
                       for name in ("worker-a", "worker-b")]
            await members[0].heartbeat()  # the first one alone, then both: one rebalance on the way
            final = await settle(members, observer, group, PARTITIONS)
            await commit(addresses, members[0], topic, 2)
            await commit(addresses, members[1], topic, 3)
            return [observer, *members], members, final

        clients, members, final = daemons._run(start())
        by_id = {m.member_id: m for m in members}
        owned = {m.member_id: sorted(_owned(m)) for m in members}

        doc = run_json("describe", group, env=env)
        [view] = doc["groups"]
        assert (view["type"], view["state"], view["read_from"], view["generation"], view["group_epoch"],
                view["assignment_epoch"], view["assignment_strategy"], view["protocol_type"], view["storage"]) == \
            ("consumer", "Stable", "daemon", None, final.group_epoch, final.assignment_epoch, "range", "consumer",
             "zookeeper")
        assert view["notes"] == [] and doc["errors"] == []
        assert {m["member_id"]: (m["member_type"], m["client_id"], m["member_epoch"], m["assignment"],
                                 m["target_assignment"], m["subscribed_topic_names"], m["partitions"])
                for m in view["members"]} == {
            mid: ("consumer", by_id[mid].client_id, by_id[mid].epoch, {topic: ps}, {topic: ps}, [topic], len(ps))
            for mid, ps in owned.items()}
        assert [(r["partition"], r["member_id"], r["current_offset"], r["log_end_offset"], r["lag"])
                for r in view["offsets"]] == [
            (p, mid, 2 if mid == members[0].member_id else 3, RECORDS, RECORDS - (2 if mid == members[0].member_id
                                                                                    else 3))
            for p, mid in sorted((p, mid) for mid, ps in owned.items() for p in ps)]

        offsets = run("describe", group, env=env)
        assert (f"Consumer group '{group}': Stable, type consumer, group epoch {final.group_epoch}, assignment epoch "
                f"{final.assignment_epoch}, assignor range, storage zookeeper, coordinator ") in offsets.stdout
        assert rows(offsets.stdout, group)[0] == [group, topic, "0", "2" if 0 in owned[members[0].member_id] else "3",
                                                  str(RECORDS), str(RECORDS - (2 if 0 in owned[members[0].member_id]
                                                                               else 3)),
                                                  *_owner_cells(members, owned, 0)]

        verbose = run("describe", group, "--members", "--verbose", env=env)
        assert rows(verbose.stdout, "GROUP") == [["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                                                  "#PARTITIONS", "MEMBER-TYPE", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT",
                                                  "TARGET-EPOCH", "TARGET-ASSIGNMENT"]]
        shown = ",".join
        assert sorted(rows(verbose.stdout, group)) == sorted(
            [group, mid, "-", "/127.0.0.1", by_id[mid].client_id, str(len(ps)), "Consumer", str(by_id[mid].epoch),
             f"{topic}:{shown(map(str, ps))}", str(final.assignment_epoch), f"{topic}:{shown(map(str, ps))}"]
            for mid, ps in owned.items())

        state = run("describe", group, "--state", "--verbose", env=env)
        [state_row] = rows(state.stdout, group)
        assert state_row[:1] + state_row[4:] == [
            group, "range", "Stable", "2", "-", str(final.group_epoch), str(final.assignment_epoch), "zookeeper", "-",
            "consumer", "daemon"]
        assert state_row[1] == "Consumer"

        listed = run("groups", "--type", "consumer", env=env)
        [listed_row] = rows(listed.stdout, group)
        assert listed_row[:3] == [group, "Consumer", "Stable"] and listed_row[-3:] == ["2", "zookeeper", "zkcoord"]
        assert run_json("groups", "--type", "classic", env=env)["groups"] == []
        [summary] = run_json("groups", "--state", "stable", env=env)["groups"]
        assert (summary["type"], summary["group_epoch"], summary["assignment_epoch"], summary["generation"]) == \
            ("consumer", final.group_epoch, final.assignment_epoch, None)

        metrics = metrics_summed(daemons)
        assert metrics[("zkcoord_groups", labels(type="consumer", state="Stable", mode="zookeeper"))] == 1
        assert metrics[("zkcoord_members_by_protocol", labels(type="consumer", protocol="consumer"))] == 2
        assert metrics[("zkcoord_members_by_protocol", labels(type="consumer", protocol="classic"))] == 0
        assert metrics[("zkcoord_consumer_group_unreconciled_members", ())] == 0
        assert metrics[("zkcoord_consumer_group_epoch_lag_max", ())] == 0
        assert metrics[("zkcoord_requests_total", labels(api="ConsumerGroupHeartbeat", error="NONE"))] > 0
        assert metrics[("zkcoord_requests_total", labels(api="ConsumerGroupDescribe", error="NONE"))] > 0

        for client in clients:
            daemons._run(client.close())

    # every daemon stopped: the stored records, topic ids named by Kafka
    stored = run_json("describe", group, env=env)
    [view] = stored["groups"]
    assert stored["notes"][0].startswith("no zkcoord daemon is registered under /zkcoord/nodes")
    assert (view["type"], view["state"], view["read_from"], view["group_epoch"], view["assignment_epoch"],
            view["assignment_strategy"], view["coordinator"]) == \
        ("consumer", "Stable", "zookeeper", final.group_epoch, final.assignment_epoch, "range", None)
    assert {m["member_id"]: (m["member_type"], m["assignment"], m["target_assignment"]) for m in view["members"]} == \
        {mid: ("consumer", {topic: ps}, {topic: ps}) for mid, ps in owned.items()}
    assert view["notes"] == []

    # without Kafka, ZooKeeper's /brokers/topics names the ids (seeded in this chroot as a broker writes it)
    with KafkaOffsets(services.bootstrap_servers) as kafka:
        topic_id = kafka.topic_ids([topic])[topic]
    assert topic_id in {t for m in members for t in m.owned}
    no_kafka = {"ZKCOORD_ZOOKEEPER": zk_hosts}
    unnamed = run_json("describe", group, env=no_kafka)["groups"][0]
    assert [m["assignment"] for m in unnamed["members"]] == [{}, {}]
    assert unnamed["notes"] == [f"topic id(s) {topic_id} in its stored assignments are named by neither ZooKeeper's "
                                "/brokers/topics (pass --bootstrap-servers to ask Kafka): their partitions are left "
                                "out (deleted topics?)"]
    zk.create(f"/brokers/topics/{topic}", json.dumps({"version": 3, "topic_id": topic_id, "partitions": {
        str(p): [0] for p in range(PARTITIONS)}, "adding_replicas": {}, "removing_replicas": {}}).encode(),
              makepath=True)
    named = run_json("describe", group, "--members", env=no_kafka)["groups"][0]
    assert {m["member_id"]: m["assignment"] for m in named["members"]} == {mid: {topic: ps} for mid, ps in owned.items()}
    assert named["notes"] == []


def _owner_cells(members, owned, partition: int) -> list[str]:
    [member] = [m for m in members if partition in owned[m.member_id]]
    return [member.member_id, "/127.0.0.1", member.client_id]


def test_a_mixed_group_shows_classic_and_consumer_members_side_by_side(services, zk_hosts, unique_name):
    group, topic = unique_name("mixed"), unique_name("t")
    create_topic(services.bootstrap_servers, topic, PARTITIONS)
    produce(services.bootstrap_servers, topic, range(PARTITIONS), RECORDS)
    env = {"ZKCOORD_ZOOKEEPER": zk_hosts, "ZKCOORD_BOOTSTRAP_SERVERS": services.bootstrap_servers}
    with daemons_for(zk_hosts, services.bootstrap_servers, 2) as daemons:
        addresses = daemons.addresses

        async def start():
            observer = await coordinator_client(addresses, group, client_id="observer")
            classic_client = await coordinator_client(addresses, group, client_id="classic-worker")
            modern = ConsumerMember(addresses, group, [topic], assignor="range", client_id="kip848-worker")
            await settle([modern], observer, group, PARTITIONS)  # a consumer group, every partition its own
            classic = ClassicProtocolMember(classic_client, group, topic)  # joins it: a mixed group
            final = await settle([modern, classic], observer, group, PARTITIONS)
            await commit(addresses, modern, topic, 1)
            await classic.commit(4)
            return [observer, classic_client, modern], modern, classic, final

        clients, modern, classic, final = daemons._run(start())
        modern_parts, classic_parts = sorted(_owned(modern)), classic.owned
        assert modern_parts and classic_parts  # each holds some: the group is shared

        [view] = run_json("describe", group, env=env)["groups"]
        assert (view["type"], view["state"], view["read_from"]) == ("consumer", "Stable", "daemon")
        assert {m["member_id"]: (m["member_type"], m["client_id"], m["member_epoch"], m["assignment"],
                                 m["target_assignment"]) for m in view["members"]} == {
            modern.member_id: ("consumer", "kip848-worker", modern.epoch, {topic: modern_parts},
                               {topic: modern_parts}),
            classic.member_id: ("classic", "classic-worker", classic.generation, {topic: classic_parts},
                                {topic: classic_parts})}
        assert view["notes"] == [f"mixed group: 1 of 2 member(s) use the classic protocol (JoinGroup/SyncGroup), "
                                 f"the others the consumer protocol: {classic.member_id}"]
        assert {r["partition"]: (r["member_id"], r["current_offset"], r["lag"]) for r in view["offsets"]} == {
            **{p: (modern.member_id, 1, RECORDS - 1) for p in modern_parts},
            **{p: (classic.member_id, 4, RECORDS - 4) for p in classic_parts}}

        members = run("describe", group, "--members", "--verbose", env=env)
        assert "type consumer (mixed: classic and consumer members)" in members.stdout
        assert sorted(rows(members.stdout, group)) == sorted([
            [group, modern.member_id, "-", "/127.0.0.1", "kip848-worker", str(len(modern_parts)), "Consumer",
             str(modern.epoch), f"{topic}:{','.join(map(str, modern_parts))}", str(final.assignment_epoch),
             f"{topic}:{','.join(map(str, modern_parts))}"],
            [group, classic.member_id, "-", "/127.0.0.1", "classic-worker", str(len(classic_parts)), "Classic",
             str(classic.generation), f"{topic}:{','.join(map(str, classic_parts))}", str(final.assignment_epoch),
             f"{topic}:{','.join(map(str, classic_parts))}"]])

        metrics = metrics_summed(daemons)
        assert metrics[("zkcoord_members_by_protocol", labels(type="consumer", protocol="classic"))] == 1
        assert metrics[("zkcoord_members_by_protocol", labels(type="consumer", protocol="consumer"))] == 1
        assert metrics[("zkcoord_requests_total", labels(api="Heartbeat", error="NONE"))] > 0
        for client in clients:
            daemons._run(client.close())

    stored = run_json("describe", group, "--members", env=env)["groups"][0]
    assert {m["member_id"]: m["member_type"] for m in stored["members"]} == {
        modern.member_id: "consumer", classic.member_id: "classic"}
    assert stored["read_from"] == "zookeeper"


def test_a_member_on_its_way_shows_current_and_target_apart(services, zk_hosts, unique_name):
    """A second member joins while the first has not heartbeat since: the owner's target
    gives it half the partitions, the first still owns them all (it has not revoked yet):
    Reconciling, each member's current assignment beside its target."""
    group, topic = unique_name("cg"), unique_name("t")
    create_topic(services.bootstrap_servers, topic, PARTITIONS)
    env = {"ZKCOORD_ZOOKEEPER": zk_hosts}
    with daemons_for(zk_hosts, services.bootstrap_servers, 2) as daemons:
        addresses = daemons.addresses

        async def start():
            observer = await coordinator_client(addresses, group, client_id="observer")
            first = ConsumerMember(addresses, group, [topic], client_id="first")
            await settle([first], observer, group, PARTITIONS)
            second = ConsumerMember(addresses, group, [topic], client_id="second")
            deadline = time.monotonic() + WAIT_S
            while True:  # only the second heartbeats: the first keeps every partition it owns
                assert (await second.heartbeat()).error_code == E_NONE
                now = await described(observer, group)
                targets = {m.member_id: _parts(m.target_assignment) for m in now.members}
                if now.group_state == "Reconciling" and targets.get(second.member_id):
                    return [observer, first, second], first, second, now
                assert time.monotonic() < deadline, f"no target for the second member: {now}"
                await asyncio.sleep(0.1)

        clients, first, second, now = daemons._run(start())
        wanted = {m.member_id: sorted(p for _, p in _parts(m.target_assignment)) for m in now.members}
        [view] = run_json("describe", group, env=env)["groups"]
        assert (view["state"], view["group_epoch"], view["assignment_epoch"]) == \
            ("Reconciling", now.group_epoch, now.assignment_epoch)
        assert {m["member_id"]: (m["assignment"], m["target_assignment"]) for m in view["members"]} == {
            first.member_id: ({topic: list(range(PARTITIONS))}, {topic: wanted[first.member_id]}),
            second.member_id: ({}, {topic: wanted[second.member_id]})}
        assert f"member(s) not at the target assignment of epoch {now.assignment_epoch} yet: " in view["notes"][0]
        assert {first.member_id, second.member_id} == {m for m in view["notes"][0].split(": ")[-1].split(", ")}
        # the offsets view shows who owns each partition now: the first member, all four
        assert {r["partition"]: r["member_id"] for r in view["offsets"]} == \
            {p: first.member_id for p in range(PARTITIONS)}
        metrics = metrics_summed(daemons)
        assert metrics[("zkcoord_groups", labels(type="consumer", state="Reconciling", mode="zookeeper"))] == 1
        assert metrics[("zkcoord_consumer_group_unreconciled_members", ())] == 2
        for client in clients:
            daemons._run(client.close())


def test_stored_consumer_groups_corrupt_or_not_and_bad_input(zk_hosts, zk, unique_name):
    """Records as a daemon writes them (no daemon running): an Assigning group is listed and
    filtered by its state; a group one of whose member records is not JSON is reported, not
    raised: `describe` names the znode (exit 1), `groups` lists it Corrupt (exit 0)."""
    good, broken = unique_name("good"), unique_name("broken")
    member = {"v": 1, "id": "AAAAAAAAAAAAAAAAAAAAAQ", "e": 3, "pe": 2, "s": 0, "rt": 30000, "c": "c", "h": "/h",
              "tn": ["orders"], "te": 3}
    for group in (good, broken):
        zk.create(f"/coordinators/{group}/state", json.dumps({"v": 1, "t": "consumer", "os": "zookeeper",
                                                              "ge": 4, "ae": 3}).encode(), makepath=True)
        zk.create(f"/coordinators/{group}/members/{member['id']}", json.dumps(member).encode(), makepath=True)
    zk.create(f"/coordinators/{broken}/members/BBBBBBBBBBBBBBBBBBBBBQ", b"{not json")
    env = {"ZKCOORD_ZOOKEEPER": zk_hosts}

    assigning = run_json("groups", "--state", "ASSIGNING", env=env)["groups"]
    assert [(g["group"], g["type"], g["state"], g["members"], g["group_epoch"], g["assignment_epoch"])
            for g in assigning] == [(good, "consumer", "Assigning", 1, 4, 3)]
    listed = run("groups", env=env)
    assert listed.exit_code == 0
    assert rows(listed.stdout, broken) == [[broken, "-", "Corrupt", "-", "-", "-", "zkcoord"]]
    assert f"error: group {broken}: member record /coordinators/{broken}/members/BBBBBBBBBBBBBBBBBBBBBQ of group " \
           f"'{broken}' is not JSON" in listed.output

    described = run("describe", broken, env=env)
    assert described.exit_code == 1 and described.stdout == ""
    assert f"member record /coordinators/{broken}/members/BBBBBBBBBBBBBBBBBBBBBQ of group '{broken}' is not JSON" \
        in described.output
    both = run("describe", good, broken, "--members", env=env)
    assert both.exit_code == 0 and good in both.stdout  # the readable one is described
    assert rows(both.stdout, good) == [[good, "AAAAAAAAAAAAAAAAAAAAAQ", "-", "/h", "c", "0", "Consumer"]]

    bad_type = run("groups", "--type", "share", env=env)
    assert bad_type.exit_code == 2 and "Invalid value for '--type'" in bad_type.output


# -- against Kafka 4.4's own kafka-consumer-groups ---------------------------------------------------------
async def mixed_group(addresses: str, group: str, topic: str):
    """A consumer member, then a classic member beside it, settled; (members, owner's description)."""
    observer = await coordinator_client(addresses, group, client_id="observer")
    classic_client = await coordinator_client(addresses, group, client_id="classic-worker")
    modern = ConsumerMember(addresses, group, [topic], assignor="range", client_id="kip848-worker")
    try:
        await settle([modern], observer, group, PARTITIONS)
        classic = ClassicProtocolMember(classic_client, group, topic)
        final = await settle([modern, classic], observer, group, PARTITIONS)
        return {"kip848-worker": modern.member_id, "classic-worker": classic.member_id}, final
    finally:
        for client in (observer, classic_client, modern):
            await client.close()


def table(stdout: str, group: str) -> tuple[list[str], list[list[str]]]:
    """(header cells, the group's rows) of the one table in a tool's output (no cell has spaces but the
    header COORDINATOR (ID), joined here, and a coordinator "host:port (id)", two cells)."""
    lines = [line.replace("COORDINATOR (ID)", "COORDINATOR-(ID)").split() for line in stdout.splitlines()]
    [header] = [cells for cells in lines if cells[:1] == ["GROUP"]]
    return header, [cells for cells in lines if cells[:1] == [group]]


def test_the_layout_is_kafka_4_4s(services, zk_hosts, kafka4, unique_name):
    """The same mixed group on Kafka 4.4 and on zkcoord: kafka-consumer-groups 4.4's
    --describe --members --verbose and --state --verbose columns, in zkcoord's tables,
    with the same values (zkcoord: GROUP-INSTANCE-ID always, MEMBER-TYPE for UPGRADED)."""
    from tests.support import java_tools

    group, topic = unique_name("mixed"), unique_name("t")
    create_topic(kafka4, topic, PARTITIONS)
    create_topic(services.bootstrap_servers, topic, PARTITIONS)
    kafka_ids, _ = asyncio.run(mixed_group(kafka4, group, topic))
    kafka_members = java_tools.consumer_groups(kafka4, "--describe", "--members", "--verbose", "--group", group,
                                               kafka4=True)
    kafka_state = java_tools.consumer_groups(kafka4, "--describe", "--state", "--verbose", "--group", group,
                                             kafka4=True)
    kafka_list = java_tools.consumer_groups(kafka4, "--list", "--type", kafka4=True)
    env = {"ZKCOORD_ZOOKEEPER": zk_hosts}
    with daemons_for(zk_hosts, services.bootstrap_servers, 2) as daemons:
        ours_ids, _ = daemons._run(mixed_group(daemons.addresses, group, topic))
        ours_members = run("describe", group, "--members", "--verbose", env=env).stdout
        ours_state = run("describe", group, "--state", "--verbose", env=env).stdout
        ours_list = run("groups", "--type", "consumer", env=env).stdout

    k_header, k_rows = table(kafka_members.stdout, group)
    o_header, o_rows = table(ours_members, group)
    assert k_header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                        "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT", "UPGRADED"]
    assert o_header == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-TYPE",
                        *k_header[5:-1]]
    upgraded = {"true": "Consumer", "false": "Classic"}

    def by_client(header, rows, ids) -> dict[str, dict[str, str]]:
        found = {row[header.index("CLIENT-ID")]: dict(zip(header, row)) for row in rows}
        assert {c: r["CONSUMER-ID"] for c, r in found.items()} == ids
        return found

    kafka_rows, our_rows = by_client(k_header, k_rows, kafka_ids), by_client(o_header, o_rows, ours_ids)
    for client in ("kip848-worker", "classic-worker"):
        k, o = kafka_rows[client], our_rows[client]
        assert (o["MEMBER-TYPE"], o["#PARTITIONS"], o["HOST"]) == (upgraded[k["UPGRADED"]], k["#PARTITIONS"], k["HOST"])
        for row in (k, o):  # each at its target, at the group's target epoch (member ids order range's result)
            assert row["CURRENT-ASSIGNMENT"] == row["TARGET-ASSIGNMENT"] and row["CURRENT-EPOCH"] == row["TARGET-EPOCH"]
            assert row["CURRENT-ASSIGNMENT"].startswith(f"{topic}:")

    k_header, [k_state] = table(kafka_state.stdout, group)
    o_header, [o_state] = table(ours_state, group)
    assert k_header == ["GROUP", "COORDINATOR-(ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                        "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    kafka_cells = dict(zip(k_header, [*k_state[:1], " ".join(k_state[1:3]), *k_state[3:]]))
    our_cells = dict(zip(o_header, [o_state[0], o_state[1], " ".join(o_state[2:4]), *o_state[4:]]))
    assert set(k_header) <= set(o_header)
    assert [our_cells[c] for c in ("ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")] == \
        [kafka_cells[c] for c in ("ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")] == ["range", "Stable", "2"]
    assert our_cells["GROUP-EPOCH"] == our_cells["TARGET-ASSIGNMENT-EPOCH"] and \
        kafka_cells["GROUP-EPOCH"] == kafka_cells["TARGET-ASSIGNMENT-EPOCH"]

    [kafka_listed] = table(kafka_list.stdout, group)[1]
    [our_listed] = table(ours_list, group)[1]
    assert kafka_listed[:2] == our_listed[:2] == [group, "Consumer"]
