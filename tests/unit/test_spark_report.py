"""The Spark job's report (zkcoord.migrate.spark_report): which layout a
report dir gets, and the driver-side merge of Spark's CSV part files into
one file, on part files laid out as Spark writes them (no Spark here: the
job itself is tests/integration/test_migrate_spark.py)."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from zkcoord.cli.spark_cmd import report_lines
from zkcoord.errors import UsageError, ZkcoordError
from zkcoord.migrate.spark_report import (
    FILE,
    PART_FILES,
    REPORT_COLUMNS,
    CsvPart,
    ReportPaths,
    csv_text,
    check_report,
    discard,
    merge_parts,
    part_files,
    plan_report,
    publish,
)

COLUMNS = ("group", "topic", "partition")


def write_parts(directory: Path, parts: dict[str, bytes]) -> None:
    """A CSV output directory as Spark leaves it: part files, their .crc files, _SUCCESS."""
    directory.mkdir(parents=True)
    for name, data in parts.items():
        (directory / name).write_bytes(data)
        (directory / f".{name}.crc").write_bytes(b"crc\x00")
    (directory / "_SUCCESS").write_bytes(b"")


def part(task: int, file: int = 0) -> str:
    return f"part-{task:05d}-49fc8760-d5f2-4ca6-baf7-8b6dbce56d81-c{file:03d}.csv"


# -- the layout --------------------------------------------------------------------------------

def test_a_local_dir_with_a_local_master_gets_files(tmp_path):
    for given in (str(tmp_path / "r"), f"{(tmp_path / 'r').as_uri()}/", f"file:{tmp_path / 'r'}"):
        report = plan_report(given, "local[*]")
        assert report.paths == ReportPaths(str(tmp_path / "r/partitions.parquet"), str(tmp_path / "r/partitions.csv"),
                                           str(tmp_path / "r/groups.csv"), FILE), given
        assert report.parquet_uri == (tmp_path / "r/partitions.parquet").as_uri()
        assert [s.final for s in report.staged] == [tmp_path / "r/partitions.csv", tmp_path / "r/groups.csv"]
        assert [s.staging.as_uri() for s in report.staged] == [report.csv_uri, report.groups_csv_uri]
        assert all(s.staging.parent == s.temporary.parent == tmp_path / "r" and s.staging.name.startswith(".")
                   for s in report.staged)


def test_a_relative_dir_is_resolved_where_the_command_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert plan_report("reports/plan-1 ", "local[2]").paths.csv == str(tmp_path / "reports/plan-1/partitions.csv")


def test_a_standalone_master_on_this_machine_gets_files_as_local_does(tmp_path):
    for master in ("spark://127.0.0.1:7077", "spark://localhost:7077"):
        report = plan_report(str(tmp_path / "r"), master)
        assert report.paths.csv_layout == FILE and report.paths.csv == str(tmp_path / "r" / "partitions.csv")
    assert plan_report(str(tmp_path / "r"), "spark://10.1.2.3:7077").paths.csv_layout == PART_FILES


def test_any_other_filesystem_or_a_cluster_keeps_sparks_directories(tmp_path):
    for given, master in (("hdfs://nn:8020/r/", "local[*]"), ("s3a://bucket/r", "local[*]"),
                          (str(tmp_path / "r"), "spark://host:7077"), ("file://otherhost/r", "local[*]")):
        report = plan_report(given, master)
        base = given.rstrip("/")
        assert report.paths == ReportPaths(f"{base}/partitions.parquet", f"{base}/partitions.csv",
                                           f"{base}/groups.csv", PART_FILES), given
        assert (report.csv_uri, report.groups_csv_uri) == (report.paths.csv, report.paths.groups_csv)
        assert report.staged == () and report.local_dir is None


def test_the_summary_says_what_each_part_of_the_report_is(tmp_path):
    local = plan_report(str(tmp_path / "r"), "local[*]").paths
    assert report_lines(local, 2, 1) == [f"report: {tmp_path}/r/partitions.parquet/ (Parquet)",
                                         f"        {tmp_path}/r/partitions.csv",
                                         f"        {tmp_path}/r/groups.csv (2 note(s), 1 error(s))"]
    remote = plan_report("hdfs://nn/r", "local[*]").paths
    assert report_lines(remote, 0, 0) == [
        "report: hdfs://nn/r/partitions.parquet/ (Parquet)",
        "        hdfs://nn/r/partitions.csv/ (a directory of Spark's part-*.csv files, each with a header line)",
        "        hdfs://nn/r/groups.csv/ (a directory of Spark's part-*.csv files, each with a header line; "
        "0 note(s), 0 error(s))"]


def test_a_local_report_dir_that_is_or_is_under_a_file_is_refused_before_spark_runs(tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(UsageError, match=rf"^--report-dir {tmp_path}/a-file is a file, not a directory; "
                                         "choose another --report-dir$"):
        check_report(None, plan_report(str(tmp_path / "a-file"), "local[*]"), overwrite=True)
    with pytest.raises(UsageError, match=rf"^--report-dir {tmp_path}/a-file/r/s is under {tmp_path}/a-file, "
                                         "which is a file, not a directory; choose another --report-dir$"):
        check_report(None, plan_report(str(tmp_path / "a-file/r/s"), "local[*]"), overwrite=False)
    check_report(None, plan_report(str(tmp_path / "new/r"), "local[*]"), overwrite=False)  # made by Spark
    (tmp_path / "old/partitions.parquet").mkdir(parents=True)
    with pytest.raises(UsageError, match=rf"^the report {tmp_path}/old/partitions.parquet already exists"):
        check_report(None, plan_report(str(tmp_path / "old"), "local[*]"), overwrite=False)
    check_report(None, plan_report(str(tmp_path / "old"), "local[*]"), overwrite=True)


# -- the merge ---------------------------------------------------------------------------------

def test_parts_are_joined_in_task_order_under_one_header(tmp_path):
    header = b"group,topic,partition\n"
    write_parts(tmp_path / "out", {
        part(10): header + b"g10,t,0\n",
        part(2, 1): header + b"g2b,t,1\n",
        part(2, 0): header + b'g2a,"multi\nline",0\n',
        part(0): header + b"g0,t,0",  # no newline at its end
        part(3): header,  # a task without rows
        part(4): b"",
        "part-100000-x-c000.csv": header + b"g100000,t,0\n",  # sorted by number, not by name
    })
    assert [p.name for p in part_files(tmp_path / "out")][:3] == [part(0), part(2, 0), part(2, 1)]

    merge_parts(part_files(tmp_path / "out"), tmp_path / "merged.csv", COLUMNS)
    assert (tmp_path / "merged.csv").read_bytes() == (
        header + b"g0,t,0\n" + b'g2a,"multi\nline",0\n' + b"g2b,t,1\n" + b"g10,t,0\n" + b"g100000,t,0\n")


def test_no_parts_is_a_header_line(tmp_path):
    merge_parts([], tmp_path / "merged.csv", COLUMNS)
    assert (tmp_path / "merged.csv").read_bytes() == b"group,topic,partition\n"


def test_a_part_without_the_header_is_refused_and_an_existing_file_never_overwritten(tmp_path):
    write_parts(tmp_path / "out", {part(0): b"other,columns\nx,y\n"})
    with pytest.raises(ZkcoordError, match=r"part-00000-.*\.csv does not start with the header line "
                                           r"'group,topic,partition'; the report's CSV was not written"):
        merge_parts(part_files(tmp_path / "out"), tmp_path / "merged.csv", COLUMNS)
    (tmp_path / "kept.csv").write_bytes(b"kept\n")
    with pytest.raises(FileExistsError):
        merge_parts([], tmp_path / "kept.csv", COLUMNS)
    assert (tmp_path / "kept.csv").read_bytes() == b"kept\n"


def test_a_million_rows_are_merged_in_bounded_memory(tmp_path):
    header = b"group,topic,partition\n"
    rows = b"".join(b"group-%07d,orders,%d\n" % (i, i % 12) for i in range(250_000))
    write_parts(tmp_path / "out", {part(task): header + rows for task in range(4)})
    tracemalloc.start()
    try:
        merge_parts(part_files(tmp_path / "out"), tmp_path / "merged.csv", COLUMNS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    merged = (tmp_path / "merged.csv").stat().st_size
    assert merged == len(header) + 4 * len(rows) > 20_000_000
    assert peak < 3 * (1 << 20)  # the copy buffer and a little: not the 22 MB of rows


# -- publishing a local report -------------------------------------------------------------------

def staged_by_spark(report, partitions: bytes = b"g,t,0\n", groups: bytes = b"g,note,hello\n") -> None:
    csv, group_csv = report.staged
    write_parts(csv.staging, {part(0): b"group,topic,partition\n" + partitions})
    write_parts(group_csv.staging, {part(0): b"group,kind,message\n" + groups})


def test_publish_leaves_two_files_and_nothing_else(tmp_path):
    report = plan_report(str(tmp_path / "r"), "local[*]")
    (tmp_path / "r/partitions.parquet").mkdir(parents=True)
    staged_by_spark(report)
    publish(report, COLUMNS, overwrite=False)
    assert sorted(os.listdir(tmp_path / "r")) == ["groups.csv", "partitions.csv", "partitions.parquet"]
    assert Path(report.paths.csv).read_text() == "group,topic,partition\ng,t,0\n"
    assert Path(report.paths.groups_csv).read_text() == "group,kind,message\ng,note,hello\n"


def test_publish_refuses_an_existing_report_unless_overwrite(tmp_path):
    (tmp_path / "r/groups.csv").mkdir(parents=True)  # a report written when the CSVs were directories
    (tmp_path / "r/groups.csv/part-00000-a-c000.csv").write_text("group,kind,message\nold,note,x\n")
    (tmp_path / "r/partitions.csv").write_text("old\n")
    report = plan_report(str(tmp_path / "r"), "local[*]")
    staged_by_spark(report)
    with pytest.raises(UsageError, match=r"the report .*/r/partitions.csv already exists; choose another "
                                         r"--report-dir or pass --overwrite"):
        publish(report, COLUMNS, overwrite=False)
    assert sorted(os.listdir(tmp_path / "r")) == ["groups.csv", "partitions.csv"]  # as it was, staging gone
    assert (tmp_path / "r/partitions.csv").read_text() == "old\n"

    report = plan_report(str(tmp_path / "r"), "local[*]")
    staged_by_spark(report, partitions=b"new,t,1\n")
    publish(report, COLUMNS, overwrite=True)
    assert sorted(os.listdir(tmp_path / "r")) == ["groups.csv", "partitions.csv"]
    assert (tmp_path / "r/partitions.csv").read_text() == "group,topic,partition\nnew,t,1\n"
    assert (tmp_path / "r/groups.csv").is_file()


def test_a_merge_that_fails_halfway_publishes_nothing(tmp_path):
    report = plan_report(str(tmp_path / "r"), "local[*]")
    staged_by_spark(report)
    groups = report.staged[1]
    (groups.staging / part(1)).write_bytes(b"not,the,header\n")  # the second CSV fails after the first merged
    with pytest.raises(ZkcoordError, match="does not start with the header line"):
        publish(report, COLUMNS, overwrite=False)
    assert os.listdir(tmp_path / "r") == []


def test_a_file_that_cannot_be_written_is_a_clear_error(tmp_path):
    report = plan_report(str(tmp_path / "r"), "local[*]")
    staged_by_spark(report)
    report.staged[1].temporary.mkdir()  # in the way of the second merge
    with pytest.raises(ZkcoordError, match=rf"^cannot write the report in {tmp_path}/r: File exists "
                                           rf"\({report.staged[1].temporary}\); check its free space and "
                                           "permissions, then run the job again$"):
        publish(report, COLUMNS, overwrite=False)
    assert os.listdir(tmp_path / "r") == [report.staged[1].temporary.name]  # not ours: left as it was


def test_discard_removes_what_a_failed_job_staged(tmp_path):
    report = plan_report(str(tmp_path / "r"), "local[*]")
    staged_by_spark(report)
    report.staged[0].temporary.write_bytes(b"half")
    discard(report)
    discard(report)
    assert os.listdir(tmp_path / "r") == []


# -- the tasks' own CSV parts (the bytes Spark writes: tests/integration/test_migrate_spark.py compares them) --
# Each value as Spark's CSV writer wrote it with CSV_OPTIONS (pyspark 4.3): empty strings and carriage returns
# are quoted, where Python's csv module would not quote them.
SPARK_FIELDS = [(None, ""), ("", '""'), (7, "7"), (-5, "-5"), (2**63 - 1, "9223372036854775807"),
                (" 25\n", '" 25\n"'), ('a"b', '"a""b"'), ("a,b", '"a,b"'), ("x\r", '"x\r"'), (" 7", " 7"),
                ("\t8", "\t8"), ("é€😀", "é€😀"), ("a\\b", "a\\b"), ("#c", "#c"), ("'q'", "'q'"), ('"', '""""'),
                ("null", "null"), ("a;b", "a;b"), ("\u2028", "\u2028"), ("  ", "  "), ('a\nb"c', '"a\nb""c"')]


@pytest.mark.parametrize("value, written", SPARK_FIELDS)
def test_a_field_is_written_as_spark_writes_it(value, written):
    assert csv_text(value) == written


def report_row(group: str, text) -> tuple:
    return (group, text, 3, text, None, 0, 100, "copy", 42, text, "write")


def test_a_part_writes_every_row_as_spark_would_whichever_path_it_takes(tmp_path):
    rows = [report_row(f"g{i}", value) for i, (value, _) in enumerate(SPARK_FIELDS)]
    rows.append(("g,\"x", None, None, None, None, None, None, None, None, "unreadable", "error"))
    written = CsvPart(tmp_path / "parts", 3, REPORT_COLUMNS)
    written.write(rows[:5])
    written.write(rows[5:])
    assert list((tmp_path / "parts").iterdir()) == [written.temporary]  # hidden until complete
    assert written.temporary.name.startswith(".")
    written.close()
    assert part_files(tmp_path / "parts") == [tmp_path / "parts" / "part-00003-zkcoord.csv"]
    expected = ",".join(REPORT_COLUMNS) + "\n" + "".join(",".join(csv_text(v) for v in row) + "\n" for row in rows)
    assert written.final.read_bytes().decode() == expected


def test_parts_of_tasks_are_merged_in_task_order_and_a_failed_attempt_leaves_no_part(tmp_path):
    folder = tmp_path / "parts"
    for index in (10, 2):
        written = CsvPart(folder, index, REPORT_COLUMNS)
        written.write([report_row(f"g{index}", "t")])
        written.close()
    failed = CsvPart(folder, 4, REPORT_COLUMNS)
    failed.write([report_row("g4", "t")])
    failed.abort()
    again = CsvPart(folder, 2, REPORT_COLUMNS)  # the same task run again replaces its part whole
    again.write([report_row("g2", "u")])
    again.close()
    merge_parts(part_files(folder), tmp_path / "out.csv", REPORT_COLUMNS)
    assert (tmp_path / "out.csv").read_text().splitlines()[1:] == ["g2,u,3,u,,0,100,copy,42,u,write",
                                                                   "g10,t,3,t,,0,100,copy,42,t,write"]
    assert sorted(p.name for p in folder.iterdir()) == ["part-00002-zkcoord.csv", "part-00010-zkcoord.csv"]
