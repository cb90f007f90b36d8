"""`zkcoord migrate plan / export / import` against a real ZooKeeper and Kafka.

Legacy offsets are written the way old ZooKeeper consumers wrote them (plain
decimal znodes, one garbage value), records are produced so log ends are
real, delete_records moves a log start, Kafka offsets are committed with
alter_group_offsets, a real KafkaConsumer makes a group active in Kafka and a
zkcoord state record makes one active in zkcoord. Every decision is checked
exactly, through the Python API and through the CLI in all three outputs.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json

import pytest
from click.testing import CliRunner
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from test_zk_support import connection

from tests.support.kafka_ready import poll_until_assigned

from zkcoord.cli.main import cli
from zkcoord.cli.migrate_cmd import migrate
from zkcoord.core.migration import Decision, Options
from zkcoord.errors import NotFoundError, ZkcoordError
from zkcoord.kafka.offsets import KafkaGroup, KafkaOffsets, LogRange
from zkcoord.zk.legacy import LegacyOffsets
from zkcoord.migrate.plan import Selection, gather_plan

pytestmark = pytest.mark.integration
D = Decision

if "migrate" not in cli.commands:  # until zkcoord.cli.main registers it
    cli.add_command(migrate)

RECORDS = 50  # per partition: every log ends at 50
LOG_START_2 = 20  # partition 2's log starts here (delete_records)


# -- helpers -------------------------------------------------------------------------------

def run_cli(*args: str, input: str | None = None):
    result = CliRunner().invoke(cli, ["migrate", *args], input=input, env={"COLUMNS": "500"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert "Traceback" not in result.output
    return result


def put(zk, path: str, value: bytes) -> None:
    zk.create(path, value, makepath=True)


@pytest.fixture
def kafka(services):
    with KafkaOffsets(services.bootstrap_servers, request_timeout_ms=30_000) as offsets:
        yield offsets


@pytest.fixture
def topic(services, unique_name):
    """A 4-partition topic with RECORDS records per partition; partition 2 starts at LOG_START_2."""
    name = unique_name("orders")
    admin = KafkaAdminClient(bootstrap_servers=services.bootstrap_servers, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(name, 4, 1)], wait_for_metadata=True)
        producer = KafkaProducer(bootstrap_servers=services.bootstrap_servers, acks="all")
        for partition in range(4):
            for i in range(RECORDS):
                producer.send(name, value=f"r{i}".encode(), partition=partition)
        producer.flush()
        producer.close()
        admin.delete_records({TopicPartition(name, 2): LOG_START_2})
    finally:
        admin.close()
    return name


class Groups:
    """Three legacy groups seeded in the test's chroot, and what Kafka holds for them."""

    def __init__(self, zk, kafka: KafkaOffsets, unique_name, topic: str, root: str = "/consumers") -> None:
        self.copy, self.ahead, self.odd = unique_name("copy"), unique_name("ahead"), unique_name("odd")
        self.topic, self.missing = topic, unique_name("no-such-topic")
        legacy = {
            self.copy: {(topic, 0): b"42", (topic, 1): b"50", (topic, 2): b"5", (topic, 9): b"1",
                        (self.missing, 0): b"3"},
            self.ahead: {(topic, 0): b"10", (topic, 1): b"30", (topic, 2): b"40"},
            self.odd: {(topic, 0): b"abc", (topic, 1): b"500", (topic, 2): b" 25\n"},
        }
        for group, offsets in legacy.items():
            for (t, p), value in offsets.items():
                put(zk, f"{root}/{group}/offsets/{t}/{p}", value)
        put(zk, f"{root}/{self.copy}/ids/{self.copy}_host-1234-abcd", b'{"version":1}')  # an old consumer
        put(zk, f"/coordinators/{self.ahead}/state", json.dumps({
            "v": 1, "s": "Stable", "g": 3, "os": "dual", "pt": "consumer", "pn": "range", "l": "m1",
            "m": [{"id": f"m{i}", "c": "c", "h": "/10.0.0.1", "st": 10000, "rt": 300000, "p": [["range", ""]]}
                  for i in (1, 2)]}).encode())
        # Kafka: ahead on partition 0, equal on 1, behind on 2, and one partition only Kafka has
        kafka.commit_offsets(self.ahead, {(topic, 0): 30, (topic, 1): 30, (topic, 2): 25, (topic, 3): 7})


def decisions(plan) -> dict:
    return {(r.facts.group, r.facts.topic, r.facts.partition): (r.decision, r.plan.target_offset) for r in plan.rows}


def gather(zk_hosts, kafka, selection, options=Options(), root="/consumers"):
    async def scenario():
        async with connection(zk_hosts) as conn:
            return await gather_plan(LegacyOffsets(conn, root), kafka, selection, options)
    return asyncio.run(scenario())


def expected_plain(g: Groups) -> dict:
    t = g.topic
    return {
        (g.copy, t, 0): (D.COPY, 42),
        (g.copy, t, 1): (D.COPY, 50),  # the log end itself: everything consumed
        (g.copy, t, 2): (D.CLAMPED_TO_LOG_START, LOG_START_2),
        (g.copy, t, 9): (D.PARTITION_MISSING, None),
        (g.copy, g.missing, 0): (D.TOPIC_MISSING, None),
        (g.ahead, t, 0): (D.KAFKA_AHEAD_KEPT, None),
        (g.ahead, t, 1): (D.EQUAL, None),
        (g.ahead, t, 2): (D.COPY, 40),
        (g.odd, t, 0): (D.UNPARSABLE, None),
        (g.odd, t, 1): (D.BEYOND_LOG_END_REFUSED, None),
        (g.odd, t, 2): (D.COPY, 25),
    }


# -- the Kafka adapter -------------------------------------------------------------------

def test_kafka_adapter_answers_from_the_cluster(kafka, topic, unique_name):
    group, missing = unique_name("g"), unique_name("no-such-topic")
    assert kafka.partition_counts([topic, missing]) == {topic: 4, missing: None}
    assert kafka.log_ranges([(topic, 0), (topic, 2)]) == {(topic, 0): LogRange(0, RECORDS),
                                                          (topic, 2): LogRange(LOG_START_2, RECORDS)}
    assert kafka.committed_offsets([group]) == {group: {}}
    assert kafka.groups([group]) == {group: KafkaGroup("Dead", 0, "")}
    kafka.commit_offsets(group, {(topic, 0): 12, (topic, 3): 0})
    assert kafka.committed_offsets([group]) == {group: {(topic, 0): 12, (topic, 3): 0}}
    assert kafka.groups([group]) == {group: KafkaGroup("Empty", 0, "")}
    assert group in kafka.list_groups()
    with pytest.raises(NotFoundError, match="list the log offsets of 1 partition"):
        kafka.log_ranges([(topic, 9)])


def test_kafka_adapter_names_the_servers_it_cannot_reach():
    unreachable = KafkaOffsets("127.0.0.1:1", request_timeout_ms=1_000)
    with pytest.raises(ZkcoordError, match=r"cannot connect to Kafka at 127\.0\.0\.1:1: no broker answered within 1 s"):
        unreachable.start()


# -- the plan ----------------------------------------------------------------------------

def test_plan_decides_every_partition(zk, zk_hosts, kafka, topic, unique_name):
    g = Groups(zk, kafka, unique_name, topic)
    plan = gather(zk_hosts, kafka, Selection(all_groups=True))
    assert decisions(plan) == expected_plain(g)
    t = plan.totals
    assert (t.groups, t.partitions, t.to_write, t.flagged, t.active_groups) == (3, 11, 5, 5, 2)
    by_group = {p.group: p for p in plan.groups}
    assert by_group[g.copy].activity.legacy_consumers == 1
    assert by_group[g.copy].activity.zkcoord_members is None
    assert by_group[g.ahead].activity.zkcoord_members == 2 and by_group[g.ahead].activity.offset_storage == "dual"
    assert by_group[g.ahead].activity.kafka_state == "Empty"
    assert by_group[g.ahead].notes == (
        "2 active member(s) in zkcoord (offset storage dual): they keep committing, so legacy offsets move on",
        "Kafka also has offsets for 1 partition(s) without a legacy offset; kept")
    assert by_group[g.odd].activity.kafka_state == "Dead" and not by_group[g.odd].activity.active
    # the plan changed nothing: Kafka and ZooKeeper hold what they held
    assert kafka.committed_offsets([g.copy, g.ahead]) == {
        g.copy: {}, g.ahead: {(topic, 0): 30, (topic, 1): 30, (topic, 2): 25, (topic, 3): 7}}
    assert zk.get(f"/consumers/{g.copy}/offsets/{topic}/0")[0] == b"42"


def test_rewind_and_force_are_opt_in(zk, zk_hosts, kafka, topic, unique_name):
    g = Groups(zk, kafka, unique_name, topic)
    plan = gather(zk_hosts, kafka, Selection(all_groups=True), Options(allow_rewind=True, force=True))
    assert decisions(plan) == expected_plain(g) | {
        (g.ahead, topic, 0): (D.REWIND, 10),
        (g.odd, topic, 1): (D.BEYOND_LOG_END_FORCED, RECORDS),
    }


def test_selection_by_name_and_pattern(zk, zk_hosts, kafka, topic, unique_name):
    g = Groups(zk, kafka, unique_name, topic)
    named = gather(zk_hosts, kafka, Selection(groups=(g.odd, g.copy)))
    assert [p.group for p in named.groups] == sorted([g.odd, g.copy])
    matched = gather(zk_hosts, kafka, Selection(pattern="ahead-.*"))
    assert [p.group for p in matched.groups] == [g.ahead]
    assert gather(zk_hosts, kafka, Selection(pattern="ahead")).groups == ()  # the whole name must match
    with pytest.raises(NotFoundError, match=r"no legacy group 'nope' under /consumers \(it has 3 group\(s\)\)"):
        gather(zk_hosts, kafka, Selection(groups=("nope",)))


def test_a_group_with_live_kafka_members_is_flagged(zk, zk_hosts, kafka, services, topic, unique_name):
    group = unique_name("live")
    put(zk, f"/consumers/{group}/offsets/{topic}/0", b"7")
    consumer = KafkaConsumer(topic, bootstrap_servers=services.bootstrap_servers, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        poll_until_assigned(consumer)
        assert consumer.assignment(), "the consumer never joined its group"
        plan = gather(zk_hosts, kafka, Selection(groups=(group,)))
    finally:
        consumer.close()
    (only,) = plan.groups
    assert (only.activity.kafka_state, only.activity.kafka_members) == ("Stable", 1)
    assert only.notes == ("1 active member(s) in Kafka (state Stable): Kafka refuses offset commits from outside "
                          "the group; stop them before applying",)
    assert plan.totals.active_groups == 1
    assert decisions(plan) == {(group, topic, 0): (D.COPY, 7)}


def test_legacy_layout_under_a_chroot_like_root(zk, zk_hosts, kafka, services, topic, unique_name):
    group = unique_name("chrooted")
    put(zk, f"/kafka/consumers/{group}/offsets/{topic}/1", b"33")
    plan = gather(zk_hosts, kafka, Selection(groups=(group,)), root="/kafka/consumers")
    assert decisions(plan) == {(group, topic, 1): (D.COPY, 33)}
    common = ["--zookeeper", zk_hosts, "--bootstrap-servers", services.bootstrap_servers]
    found = run_cli("plan", "--group", group, "--zk-root", "/kafka/consumers", "--output", "json", *common)
    assert found.exit_code == 0
    assert json.loads(found.stdout)["groups"][0]["partitions"][0]["decision"] == "copy"
    missing = run_cli("plan", "--group", group, *common)  # default root /consumers: not there
    assert missing.exit_code == 1
    assert missing.stderr.strip() == (f"error: no legacy group '{group}' under /consumers (it has 0 group(s)); "
                                      "check the name and --zk-root")


# -- the CLI, three outputs --------------------------------------------------------------

def test_plan_cli_outputs_table_json_and_csv(zk, zk_hosts, kafka, services, topic, unique_name):
    g = Groups(zk, kafka, unique_name, topic)
    common = ["--all", "--zookeeper", zk_hosts, "--bootstrap-servers", services.bootstrap_servers]
    expected = {k: (d.value, t) for k, (d, t) in expected_plain(g).items()}

    table = run_cli("plan", *common)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    row = next(line for line in lines if g.copy in line and "clamped-to-log-start" in line)
    assert [c.strip() for c in row.strip("│ ").split("│")][:9] == [
        g.copy, topic, "2", "5", "-", str(LOG_START_2), str(RECORDS), "clamped-to-log-start", str(LOG_START_2)]
    assert lines[-2:] == [
        "3 group(s), 11 partition(s): 4 copy, 1 equal, 1 kafka-ahead-kept, 1 clamped-to-log-start, "
        "1 beyond-log-end-refused, 1 topic-missing, 1 partition-missing, 1 unparsable",
        "5 to write, 5 flagged; 2 group(s) with active members; nothing was changed"]
    assert f"group {g.ahead}: 2 active member(s) in zkcoord" in table.stdout
    assert f"group {g.copy}: 1 legacy ZooKeeper consumer(s) registered" in table.stdout

    as_json = run_cli("plan", *common, "--output", "json", "--force")
    assert as_json.exit_code == 0
    document = json.loads(as_json.stdout)
    assert (document["schema"], document["zookeeper"], document["zk_root"], document["bootstrap_servers"]) == (
        "zkcoord/migrate-plan/v1", zk_hosts, "/consumers", services.bootstrap_servers)
    found = {(grp["group"], p["topic"], p["partition"]): (p["decision"], p["target"])
             for grp in document["groups"] for p in grp["partitions"]}
    assert found == expected | {(g.odd, topic, 1): ("beyond-log-end-forced", RECORDS)}
    assert document["options"] == {"allow_rewind": False, "force": True}
    assert document["totals"]["to_write"] == 6 and document["totals"]["by_decision"]["beyond-log-end-forced"] == 1
    odd = next(grp for grp in document["groups"] if grp["group"] == g.odd)
    assert odd["partitions"][0] == {"topic": topic, "partition": 0, "legacy": "abc", "kafka": None, "log_start": 0,
                                    "log_end": RECORDS, "decision": "unparsable", "target": None,
                                    "note": "legacy value 'abc' is not an offset (not a decimal number)"}

    as_csv = run_cli("plan", *common, "--output", "csv")
    assert as_csv.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert {(r["group"], r["topic"], int(r["partition"])): (r["decision"], int(r["target"]) if r["target"] else None)
            for r in rows} == expected
    ahead0 = next(r for r in rows if r["group"] == g.ahead and r["partition"] == "0")
    assert ahead0 == {"group": g.ahead, "topic": topic, "partition": "0", "legacy": "10", "kafka": "30",
                      "log_start": "0", "log_end": str(RECORDS), "decision": "kafka-ahead-kept", "target": "",
                      "note": "Kafka at 30 is ahead of 10; kept (--allow-rewind rewinds)"}
    assert as_csv.stderr.splitlines()[-1] == (
        "5 to write, 5 flagged; 2 group(s) with active members; nothing was changed")


def test_plan_cli_errors_are_one_line(zk_hosts, services):
    no_kafka = run_cli("plan", "--all", "--zookeeper", zk_hosts, "--bootstrap-servers", "127.0.0.1:1",
                       "--timeout-ms", "1000")
    assert no_kafka.exit_code == 2
    assert no_kafka.stderr.startswith("error: cannot connect to Kafka at 127.0.0.1:1: no broker answered within 1 s")
    assert len(no_kafka.stderr.strip().splitlines()) == 1
    both = run_cli("plan", "--all", "--pattern", "x", "--zookeeper", zk_hosts,
                   "--bootstrap-servers", services.bootstrap_servers)
    assert (both.exit_code, both.stderr) == (
        2, "error: choose the groups with exactly one of --group G (repeatable), --all or --pattern REGEX\n")
    regex = run_cli("plan", "--pattern", "(", "--zookeeper", zk_hosts, "--bootstrap-servers", "k:9092")
    assert regex.exit_code == 2 and regex.stderr.startswith("error: --pattern '(' is not a regular expression")
    root = run_cli("plan", "--all", "--zk-root", "consumers/", "--zookeeper", zk_hosts, "--bootstrap-servers", "k:9092")
    assert (root.exit_code, root.stderr) == (
        2, "error: offsets root 'consumers/' must start with '/' and not end with one\n")


# -- export and import -------------------------------------------------------------------

def seed_legacy(zk, unique_name, root="/consumers"):
    a, b = unique_name("a"), unique_name("b")
    put(zk, f"{root}/{a}/offsets/t1/0", b"42")
    put(zk, f"{root}/{a}/offsets/t1/1", b"7")
    put(zk, f"{root}/{a}/offsets/t1/2", b"garbage")
    put(zk, f"{root}/{b}/offsets/t2/5", b"0")
    return a, b


def test_export_import_round_trip_in_both_formats(zk, zk_hosts, unique_name, tmp_path):
    a, b = seed_legacy(zk, unique_name)
    zkopt = ["--zookeeper", zk_hosts]

    exported = run_cli("export", "--all", "--format", "csv", "--file", str(tmp_path / "all.csv"), *zkopt)
    assert exported.exit_code == 0
    assert (tmp_path / "all.csv").read_text() == f"{a},t1,0,42\n{a},t1,1,7\n{b},t2,5,0\n"
    assert exported.stderr.splitlines() == [
        f"skipped /consumers/{a}/offsets/t1/2: it holds 'garbage', unparsable (not a decimal number)",
        f"exported 3 offset(s) of 2 group(s) to {tmp_path / 'all.csv'}"]

    imported = run_cli("import", "--file", str(tmp_path / "all.csv"), "--zk-root", "/kafka/consumers", *zkopt)
    assert (imported.exit_code, imported.stdout) == (0, "wrote 3 offset(s) of 2 group(s) under /kafka/consumers\n")
    assert zk.get(f"/kafka/consumers/{a}/offsets/t1/0")[0] == b"42"  # plain decimals, as legacy tools read
    assert zk.get(f"/kafka/consumers/{b}/offsets/t2/5")[0] == b"0"
    assert sorted(zk.get_children(f"/kafka/consumers/{a}/offsets/t1")) == ["0", "1"]

    lines = run_cli("export", "--all", "--format", "zk-lines", "--zk-root", "/kafka/consumers", *zkopt)
    assert lines.stdout == (f"/kafka/consumers/{a}/offsets/t1/0:42\n/kafka/consumers/{a}/offsets/t1/1:7\n"
                            f"/kafka/consumers/{b}/offsets/t2/5:0\n")
    moved = lines.stdout.replace("/kafka/consumers/", "/consumers/").replace(":42\n", ":43\n")
    again = run_cli("import", "--file", "-", "--format", "zk-lines", *zkopt, input=moved)
    assert again.exit_code == 0
    assert zk.get(f"/consumers/{a}/offsets/t1/0")[0] == b"43"
    assert zk.get(f"/consumers/{a}/offsets/t1/2")[0] == b"garbage"  # not in the file: untouched

    single = run_cli("export", "--group", a, *zkopt)
    assert single.stdout == "t1,0,43\nt1,1,7\n"  # one --group: kafka-consumer-groups' three columns
    other = unique_name("c")
    copied = run_cli("import", "--file", "-", "--group", other, *zkopt, input=single.stdout)
    assert copied.exit_code == 0
    assert zk.get(f"/consumers/{other}/offsets/t1/0")[0] == b"43"


def test_import_checks_every_line_before_writing(zk, zk_hosts, unique_name, tmp_path):
    a, _ = seed_legacy(zk, unique_name)
    zkopt = ["--zookeeper", zk_hosts]
    bad = tmp_path / "bad.csv"
    bad.write_text(f"{a},t1,0,100\n{a},t1,1,200\n{a},t1,x,5\n")
    refused = run_cli("import", "--file", str(bad), *zkopt)
    assert (refused.exit_code, refused.stderr) == (
        2, f"error: {bad} line 3: partition 'x' is not a whole number from 0 to 2147483647\n")
    assert zk.get(f"/consumers/{a}/offsets/t1/0")[0] == b"42"  # nothing was written

    clash = run_cli("import", "--file", "-", "--group", a, *zkopt, input="t1,0,1\nt1,0,2\n")
    assert (clash.exit_code, clash.stderr) == (
        2, f"error: stdin line 2: group '{a}' t1-0 has offset 2, but line 1 gave it 1\n")
    wrong_root = run_cli("import", "--file", "-", "--format", "zk-lines", *zkopt,
                         input=f"/kafka/consumers/{a}/offsets/t1/0:1\n")
    assert wrong_root.exit_code == 2
    assert "is under /kafka/consumers, not under --zk-root /consumers" in wrong_root.stderr

    dry = run_cli("import", "--file", "-", "--group", a, "--dry-run", *zkopt, input="t1,0,100\nt9,3,4\n")
    assert dry.exit_code == 0
    assert dry.stdout.splitlines()[-1] == "dry run: would write 2 offset(s) of 1 group(s); nothing was written"
    row = next(line for line in dry.stdout.splitlines() if " t1 " in line)
    assert [c.strip() for c in row.strip("│ ").split("│")] == [a, "t1", "0", "42", "100"]
    assert zk.get(f"/consumers/{a}/offsets/t1/0")[0] == b"42"
    assert zk.exists(f"/consumers/{a}/offsets/t9") is None
