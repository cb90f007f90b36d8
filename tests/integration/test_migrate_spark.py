"""The Spark migration job (`zkcoord migrate run-job`) on real ZooKeeper, Kafka and a local Spark.

Twenty legacy groups are seeded the way old consumers wrote them (plain
decimals, an unparsable value, a znode without data, offsets beyond the log
end, below a moved log start, on a missing topic and a missing partition),
with Kafka offsets ahead, equal and behind, a zkcoord state record and a
legacy consumer registration. The job runs on 2 Spark partitions, and its
report must equal, row for row, what the single-group path decides
(``gather_plan``, ``verify_group``, ``apply_group``'s results). One local
SparkSession serves the whole module.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from test_zk_support import connection

from zkcoord.cli.main import cli
from zkcoord.cli.migrate_cmd import migrate
from zkcoord.cli.spark_cmd import run_job_command
from zkcoord.core.migration import Options
from zkcoord.errors import ServiceUnavailableError, UsageError
from zkcoord.kafka.offsets import KafkaOffsets
from zkcoord.migrate.apply import Adapters
from zkcoord.zk.legacy import LegacyOffsets
from zkcoord.migrate.plan import Selection, gather_plan
from zkcoord.migrate.spark_job import JobConfig, run_job, spark_session
from zkcoord.migrate.spark_report import CSV_OPTIONS, CsvPart, part_files, report_schema
from zkcoord.migrate.spark_tasks import REPORT_COLUMNS
from zkcoord.migrate.verify import verify_group

pytestmark = pytest.mark.integration

if "run-job" not in migrate.commands:  # until zkcoord.cli.main registers it
    migrate.add_command(run_job_command)

RECORDS = 50  # per partition
LOG_START = 20  # topic b, partition 2 starts here (delete_records)
GROUPS = 20


@pytest.fixture(scope="module")
def spark():
    with spark_session() as session:
        yield session


@pytest.fixture
def kafka(services):
    with KafkaOffsets(services.bootstrap_servers, request_timeout_ms=30_000) as offsets:
        yield offsets


@pytest.fixture
def topics(services, unique_name):
    """Two 3-partition topics with RECORDS records per partition; b-2 starts at LOG_START."""
    names = (unique_name("a"), unique_name("b"))
    admin = KafkaAdminClient(bootstrap_servers=services.bootstrap_servers, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(name, 3, 1) for name in names], wait_for_metadata=True)
        producer = KafkaProducer(bootstrap_servers=services.bootstrap_servers, acks="all", linger_ms=5)
        for name in names:
            for partition in range(3):
                for i in range(RECORDS):
                    producer.send(name, value=b"r%d" % i, partition=partition)
        producer.flush()
        producer.close()
        admin.delete_records({TopicPartition(names[1], 2): LOG_START})
    finally:
        admin.close()
    return names


def seed(zk, kafka: KafkaOffsets, topics: tuple[str, str], unique_name) -> list[str]:
    """GROUPS legacy groups over both topics, with every kind of decision."""
    a, b = topics
    groups = [unique_name(f"g{i:02d}") for i in range(GROUPS)]
    for i, group in enumerate(groups):
        for t, topic in enumerate(topics):
            for p in range(3):
                value = str((i * 7 + p * 3 + t * 11) % 58).encode()  # 50..57: beyond the log end
                zk.create(f"/consumers/{group}/offsets/{topic}/{p}", value, makepath=True)
    zk.set(f"/consumers/{groups[3]}/offsets/{a}/0", b"abc")
    zk.set(f"/consumers/{groups[4]}/offsets/{a}/1", b" 25\n")
    zk.set(f"/consumers/{groups[5]}/offsets/{a}/2", b"")
    zk.create(f"/consumers/{groups[6]}/offsets/{unique_name('gone')}/0", b"3", makepath=True)
    zk.create(f"/consumers/{groups[7]}/offsets/{a}/9", b"1")
    zk.set(f"/consumers/{groups[8]}/offsets/{b}/2", b"4")  # below the log start
    zk.create(f"/consumers/{groups[9]}/ids/{groups[9]}_host-1-abc", b'{"version":1}', makepath=True)
    zk.create(f"/coordinators/{groups[10]}/state", json.dumps({
        "v": 1, "s": "Stable", "g": 3, "os": "dual", "pt": "consumer", "pn": "range", "l": "m1",
        "m": [{"id": "m1", "c": "c", "h": "/10.0.0.1", "st": 10000, "rt": 300000, "p": [["range", ""]]}]}).encode(),
        makepath=True)
    zk.create(f"/consumers/{unique_name('empty')}/ids", b"", makepath=True)  # a group without offsets
    kafka.commit_offsets(groups[11], {(a, 0): 49, (a, 1): 0, (b, 0): 5})  # ahead, behind, ...
    kafka.commit_offsets(groups[12], {(a, p): (12 * 7 + p * 3) % 58 for p in range(3)})  # equal
    zk.delete(f"/consumers/{groups[13]}/offsets/{b}/1")
    kafka.commit_offsets(groups[13], {(b, 1): 2})  # a partition only Kafka has
    return groups


def job(zk_hosts, services, report_dir, spark, mode="plan", selection=Selection(all_groups=True), on_progress=None,
        **kwargs):
    """The job on 2 Spark partitions, 4 groups per batch (so tasks pipeline several batches)."""
    config = JobConfig(zk_hosts, services.bootstrap_servers, selection, str(report_dir), mode=mode,
                       spark_partitions=2, batch_groups=kwargs.pop("batch_groups", 4), **kwargs)
    return run_job(config, spark, on_progress=on_progress)


def single_plan(zk_hosts, kafka, selection=Selection(all_groups=True), options=Options()):
    async def scenario():
        async with connection(zk_hosts) as conn:
            return await gather_plan(LegacyOffsets(conn), kafka, selection, options)
    return asyncio.run(scenario())


def as_rows(plan) -> list[tuple]:
    return [(r.facts.group, r.facts.topic, r.facts.partition, r.facts.legacy_raw, r.facts.kafka_offset,
             r.facts.log_start, r.facts.log_end, r.decision.value, r.plan.target_offset, r.plan.note)
            for r in plan.rows]


def parquet_rows(spark, result) -> list[tuple]:
    return sorted((tuple(row) for row in spark.read.parquet(result.report.parquet).collect()),
                  key=lambda r: (r[0], r[1] or "", r[2] if r[2] is not None else -1))


def csv_rows(path: str) -> list[tuple]:
    """The report's partitions.csv (one file, one header line), values typed back (empty: None, as
    Python's csv cannot tell "" from null)."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        assert next(reader) == list(REPORT_COLUMNS)
        return [tuple(_typed(name, value) for name, value in zip(REPORT_COLUMNS, values)) for values in reader]


def groups_csv_rows(path: str) -> list[list[str]]:
    with open(path, newline="") as f:
        reader = csv.reader(f)
        assert next(reader) == ["group", "kind", "message"]
        return list(reader)


def assert_report_files(report_dir: Path, result) -> None:
    """Parquet, then two CSV files a user opens as they are: no Spark directory, nothing staged."""
    assert sorted(os.listdir(report_dir)) == ["groups.csv", "partitions.csv", "partitions.parquet"]
    assert result.report.csv_layout == "file"
    assert (result.report.csv, result.report.groups_csv) == (str(report_dir / "partitions.csv"),
                                                             str(report_dir / "groups.csv"))
    assert Path(result.report.csv).is_file() and Path(result.report.groups_csv).is_file()


def _typed(name: str, value: str):
    if value == "":
        return None
    return int(value) if name in ("partition", "kafka", "log_start", "log_end", "target") else value


def blank_as_none(rows: list[tuple]) -> list[tuple]:
    return [tuple(None if v == "" else v for v in row) for row in rows]


# -- plan ----------------------------------------------------------------------------------

def test_plan_report_equals_the_single_group_path(zk, zk_hosts, kafka, services, topics, unique_name, spark,
                                                  tmp_path):
    seed(zk, kafka, topics, unique_name)
    expected = single_plan(zk_hosts, kafka)
    seen = []
    result = job(zk_hosts, services, tmp_path / "multi", spark, zk_reads="multi", on_progress=seen.append)

    rows = parquet_rows(spark, result)
    assert [r[:10] for r in rows] == as_rows(expected)
    assert [r[10] for r in rows] == ["write" if r.decision.writes else "skip" for r in expected.rows]
    assert result.totals == expected.totals
    assert result.notes == tuple(sorted((g.group, n) for g in expected.groups for n in g.notes))
    assert (result.groups_selected, result.error_groups, result.errors) == (GROUPS + 1, 0, ())
    assert result.spark_partitions == 2
    assert len({r.decision for r in expected.rows}) == 8  # every decision but rewind and forced is exercised
    assert csv_rows(result.report.csv) == blank_as_none(rows)
    assert_report_files(tmp_path / "multi", result)
    assert groups_csv_rows(result.report.groups_csv) == [[g, "note", n] for g, n in result.notes]
    assert seen[-1].groups_done == seen[-1].groups_total == GROUPS + 1
    assert seen[-1].offsets_done == len(rows)

    single = job(zk_hosts, services, tmp_path / "single", spark, zk_reads="single")
    assert parquet_rows(spark, single) == rows
    forced = job(zk_hosts, services, tmp_path / "forced", spark, options=Options(allow_rewind=True, force=True))
    assert [r[:10] for r in parquet_rows(spark, forced)] == as_rows(
        single_plan(zk_hosts, kafka, options=Options(allow_rewind=True, force=True)))


def test_a_corrupt_group_is_an_error_row_and_the_others_are_planned(zk, zk_hosts, kafka, services, topics,
                                                                   unique_name, spark, tmp_path):
    good, bad = unique_name("good"), unique_name("bad")
    zk.create(f"/consumers/{good}/offsets/{topics[0]}/0", b"7", makepath=True)
    zk.create(f"/consumers/{bad}/offsets/{topics[0]}/0", b"7", makepath=True)
    zk.create(f"/coordinators/{bad}/state", b"{not json", makepath=True)
    result = job(zk_hosts, services, tmp_path / "r", spark)
    message = (f"state znode /coordinators/{bad}/state of group '{bad}' is not valid JSON (Expecting property "
               f"name enclosed in double quotes: line 1 column 2 (char 1)); repair it, or delete "
               f"/coordinators/{bad}/state to start the group afresh")
    assert result.errors == ((bad, message),) and result.error_groups == 1
    assert groups_csv_rows(result.report.groups_csv) == [[bad, "error", message]]
    assert parquet_rows(spark, result) == [
        (bad, None, None, None, None, None, None, None, None, message, "error"),
        (good, topics[0], 0, "7", None, 0, RECORDS, "copy", 7, "copies 7 (Kafka has no offset)", "write")]
    assert result.totals.groups == 1 and result.statuses == {"error": 1, "write": 1}


def test_an_existing_report_is_never_overwritten(zk, zk_hosts, kafka, services, topics, spark, tmp_path):
    zk.create(f"/consumers/g/offsets/{topics[0]}/0", b"7", makepath=True)
    first = job(zk_hosts, services, tmp_path / "r", spark)
    written = Path(first.report.csv).read_bytes()
    with pytest.raises(UsageError, match=r"partitions.parquet already exists; choose another --report-dir"):
        job(zk_hosts, services, tmp_path / "r", spark)
    assert Path(first.report.csv).read_bytes() == written
    again = job(zk_hosts, services, tmp_path / "r", spark, overwrite=True)
    assert again.totals.partitions == 1 and len(csv_rows(again.report.csv)) == 1
    assert_report_files(tmp_path / "r", again)

    # A report of an older zkcoord, its CSVs Spark's directories: refused, or replaced by files.
    old = tmp_path / "old"
    job(zk_hosts, services, old, spark)
    for name in ("partitions.csv", "groups.csv"):
        (old / name).unlink()
        (old / name).mkdir()
        (old / name / "part-00000-x-c000.csv").write_text("old\n")
    (old / "partitions.parquet").rename(tmp_path / "parquet-aside")
    with pytest.raises(UsageError, match=r"partitions.csv already exists; choose another --report-dir"):
        job(zk_hosts, services, old, spark)
    replaced = job(zk_hosts, services, old, spark, overwrite=True)
    assert_report_files(old, replaced)
    assert len(csv_rows(replaced.report.csv)) == 1


# -- verify and apply ----------------------------------------------------------------------

def migrated(zk, group: str, phase: str = "dual") -> None:
    zk.create(f"/zkcoord/migrations/{group}", json.dumps({"v": 1, "phase": phase, "history": []}).encode(),
              makepath=True)


def single_verify(zk_hosts, kafka, group):
    async def scenario():
        async with connection(zk_hosts) as conn:
            return await verify_group(Adapters.of(conn, kafka), group, record=False)
    return asyncio.run(scenario())


def test_verify_flags_the_group_where_kafka_is_behind(zk, zk_hosts, kafka, services, topics, unique_name, spark,
                                                      tmp_path):
    a, b = topics
    clean, late, unmigrated = unique_name("clean"), unique_name("late"), unique_name("unmigrated")
    for group in (clean, late, unmigrated):
        for p in range(3):
            zk.create(f"/consumers/{group}/offsets/{a}/{p}", str(10 + p).encode(), makepath=True)
        kafka.commit_offsets(group, {(a, p): 10 + p for p in range(3)})
    kafka.commit_offsets(late, {(a, 1): 4})  # Kafka behind ZooKeeper on a-1
    zk.set(f"/consumers/{late}/offsets/{a}/2", b"30")  # a dual-commit member moved ZooKeeper on
    migrated(zk, clean)
    migrated(zk, late, "kafka-committed")
    migrated(zk, unmigrated, "backed-up")  # apply stopped before committing: not verified

    result = job(zk_hosts, services, tmp_path / "all", spark, mode="verify")
    rows = {(r[0], r[1], r[2]): r for r in parquet_rows(spark, result)}
    assert {k: r[10] for k, r in rows.items()} == {
        (clean, a, 0): "ok", (clean, a, 1): "ok", (clean, a, 2): "ok",
        (late, a, 0): "ok", (late, a, 1): "behind", (late, a, 2): "behind"}
    assert rows[(late, a, 1)][3:5] == ("11", 4)
    assert result.outcomes == {"behind": 1, "clean": 1, "not-verified": 1} and result.groups_selected == 3
    single = single_verify(zk_hosts, kafka, late)
    assert sorted((x.topic, x.partition) for x in single.behind) == [(a, 1), (a, 2)]
    # recorded, as migrate verify records it
    record = json.loads(zk.get(f"/zkcoord/migrations/{late}")[0])
    assert (record["phase"], record["verify"]["clean"], record["verify"]["checked"]) == ("kafka-committed", False, 3)
    assert record["verify"]["behind"] == [[a, 1, 11, 4], [a, 2, 30, 12]]
    assert json.loads(zk.get(f"/zkcoord/migrations/{clean}")[0])["verify"]["clean"] is True

    named = job(zk_hosts, services, tmp_path / "named", spark, mode="verify",
                selection=Selection(groups=(unmigrated, clean)), record_verify=False)
    assert [r for r in parquet_rows(spark, named) if r[0] == unmigrated] == [
        (unmigrated, None, None, None, None, None, None, None, None,
         "not migrated (phase backed-up): run migrate apply", "not-migrated")]
    assert named.outcomes == {"clean": 1, "not-migrated": 1}


def test_apply_commits_the_plan_and_verify_is_then_clean(zk, zk_hosts, kafka, services, topics, unique_name,
                                                         spark, tmp_path):
    a, b = topics
    groups = [unique_name(f"ap{i}") for i in range(6)]
    for i, group in enumerate(groups):
        for p in range(3):
            zk.create(f"/consumers/{group}/offsets/{a}/{p}", str(i + p).encode(), makepath=True)
        zk.create(f"/consumers/{group}/offsets/{b}/2", b"3", makepath=True)  # below the log start: clamped
    zk.set(f"/consumers/{groups[0]}/offsets/{a}/0", b"oops")
    kafka.commit_offsets(groups[1], {(a, 2): 40})  # ahead: kept
    expected = single_plan(zk_hosts, kafka)

    result = job(zk_hosts, services, tmp_path / "apply", spark, mode="apply")
    assert result.outcomes == {"applied": 6}
    rows = parquet_rows(spark, result)
    assert [r[:10] for r in rows] == as_rows(expected)
    writes = {(r.facts.group, r.facts.topic, r.facts.partition): r.plan.target_offset
              for r in expected.rows if r.decision.writes}
    assert {(r[0], r[1], r[2]): r[8] for r in rows if r[10] == "committed"} == writes
    assert {r[10] for r in rows if (r[0], r[1], r[2]) not in writes} == {"skipped"}
    committed = kafka.committed_offsets(groups)
    assert {(g, t, p): o for g, found in committed.items() for (t, p), o in found.items()
            if (g, t, p) in writes} == writes
    assert committed[groups[1]][(a, 2)] == 40
    assert {json.loads(zk.get(f"/zkcoord/migrations/{g}")[0])["phase"] for g in groups} == {"dual"}

    again = job(zk_hosts, services, tmp_path / "again", spark, mode="apply")
    assert again.outcomes == {"already-done": 6} and set(again.statuses) == {"already-done"}
    verified = job(zk_hosts, services, tmp_path / "verify", spark, mode="verify")
    # Kafka ahead, kept by apply, is ZooKeeper behind Kafka: the stores differ, so that group is not clean.
    assert verified.outcomes == {"clean": 5, "behind": 1}
    verified_rows = parquet_rows(spark, verified)
    assert {r[10] for r in verified_rows if r[0] == groups[0]} == {"ok", "unverifiable"}
    assert {(r[1], r[2]): r[10] for r in verified_rows if r[0] == groups[1] and r[10] != "ok"} == \
        {(a, 2): "zookeeper-behind"}
    record = json.loads(zk.get(f"/zkcoord/migrations/{groups[1]}")[0])["verify"]
    assert (record["clean"], record["behind"], record["zookeeper_behind"]) == (False, [], [[a, 2, 3, 40]])


# -- the CLI -------------------------------------------------------------------------------

def run_cli(*args: str):
    result = CliRunner().invoke(cli, ["migrate", "run-job", *args], env={"COLUMNS": "300"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert "Traceback" not in result.output
    return result


def test_cli_prints_the_summary_and_writes_the_report(zk, zk_hosts, kafka, services, topics, unique_name, spark,
                                                      tmp_path):
    groups = seed(zk, kafka, topics, unique_name)
    expected = single_plan(zk_hosts, kafka)
    common = ["--all", "--zookeeper", zk_hosts, "--bootstrap-servers", services.bootstrap_servers,
              "--spark-partitions", "2"]
    out = run_cli(*common, "--report-dir", str(tmp_path / "json"), "--output", "json")
    assert out.exit_code == 0, out.output
    document = json.loads(out.stdout)
    assert document["schema"] == "zkcoord/migrate-run-job/v1"
    assert document["totals"] == expected.totals.as_dict()
    assert document["groups_selected"] == GROUPS + 1 and document["error_groups"] == 0
    assert Path(document["report"]["parquet"]).is_dir() and document["report"]["csv_layout"] == "file"
    assert len(csv_rows(document["report"]["csv"])) == len(expected.rows)

    text = run_cli(*common, "--report-dir", str(tmp_path / "text"))
    assert text.exit_code == 0, text.output
    t = expected.totals
    assert f"{t.groups} group(s) read, {t.partitions} partition(s): " in text.stdout
    assert f"{t.to_write} to write, {t.flagged} flagged; {t.active_groups} group(s) with active members; " \
           "nothing was changed" in text.stdout
    assert f"group {groups[10]}: 1 active member(s) in zkcoord (offset storage dual)" in text.stdout
    report = tmp_path / "text"
    assert (f"report: {report}/partitions.parquet/ (Parquet)\n        {report}/partitions.csv\n        "
            f"{report}/groups.csv ({sum(len(g.notes) for g in expected.groups)} note(s), 0 error(s))\n") in text.stdout

    again = run_cli(*common, "--report-dir", str(tmp_path / "text"))
    assert again.exit_code == 2
    assert "already exists; choose another --report-dir or pass --overwrite" in again.stderr

    zk.create(f"/coordinators/{groups[0]}/state", b"[]", makepath=True)
    broken = run_cli(*common, "--report-dir", str(tmp_path / "broken"))
    assert broken.exit_code == 1
    assert f"error: group {groups[0]}: state znode /coordinators/{groups[0]}/state" in broken.stdout
    assert (f"1 group(s) need attention: see their rows' status in {tmp_path}/broken/partitions.csv and their "
            f"messages in {tmp_path}/broken/groups.csv") in broken.stderr

    (tmp_path / "a-file").write_text("")
    refused = run_cli(*common, "--report-dir", str(tmp_path / "a-file"))
    assert (refused.exit_code, refused.stderr) == (2, f"error: --report-dir {tmp_path}/a-file is a file, not a "
                                                      "directory; choose another --report-dir\n")


def test_an_unreachable_kafka_is_the_tasks_error(zk, zk_hosts, spark, tmp_path):
    zk.create("/consumers/g/offsets/t/0", b"7", makepath=True)
    config = JobConfig(zk_hosts, "127.0.0.1:1", Selection(all_groups=True), str(tmp_path / "r"), timeout_ms=1_000)
    with pytest.raises(ServiceUnavailableError, match=r"^cannot connect to Kafka at 127\.0\.0\.1:1: no broker "
                                                      r"answered within 1 s"):
        run_job(config, spark)


def test_a_pattern_that_matches_nothing_writes_an_empty_report(zk, zk_hosts, services, spark, tmp_path):
    zk.create("/consumers/g/offsets/t/0", b"7", makepath=True)
    result = job(zk_hosts, services, tmp_path / "r", spark, selection=Selection(pattern="nothing-.*"))
    assert (result.groups_selected, result.totals.partitions, dict(result.statuses)) == (0, 0, {})
    assert spark.read.parquet(result.report.parquet).count() == 0
    assert csv_rows(result.report.csv) == [] and groups_csv_rows(result.report.groups_csv) == []
    assert_report_files(tmp_path / "r", result)


def test_the_tasks_write_the_csv_bytes_sparks_writer_writes(spark, tmp_path):
    """A local report's partitions.csv comes from the tasks (spark_report.CsvPart), not from Spark's CSV
    writer, which writes it elsewhere: the same rows give the same bytes, whatever a legacy value or a
    note holds (the values Python's csv module would write otherwise among them: "" and a carriage return)."""
    texts = [None, "", " 25\n", 'a"b', "a,b", "x\r", "x\r\ny", " 7", "7 ", "\t8", "é€😀", "a\\b", "#c", '"', "null",
             "\x00z", "\u2028", "  ", 'a\nb"c']
    rows = [(f"g{i:02d}", "t" if i % 2 else text, i, text, None if i % 3 else 2**63 - 1, 0, 100, "copy", i, text, "write")
            for i, text in enumerate(texts)]
    rows.append(('g,"x', None, None, None, None, None, None, None, None, "the group could not be read", "error"))
    frame = spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), report_schema(), verifySchema=False)
    frame.coalesce(1).write.options(**CSV_OPTIONS).csv(str(tmp_path / "spark"))
    ours = CsvPart(tmp_path / "tasks", 0, REPORT_COLUMNS)
    ours.write(rows)
    ours.close()
    [sparks] = part_files(tmp_path / "spark")
    assert ours.final.read_bytes() == sparks.read_bytes()
