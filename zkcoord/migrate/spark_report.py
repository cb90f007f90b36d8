"""Where the Spark job's report goes, and how its CSVs become files a user can open.

This module owns the report's names (:class:`ReportPaths`, what the user is
told; :class:`ReportTargets`, what Spark writes), the check that refuses an
existing report (:func:`check_report`), and the driver-side merge of Spark's
CSV part files (:func:`publish`, :func:`merge_parts`).

Spark writes a CSV as a directory of ``part-*.csv`` files, one or more per
task, each with its own header line. Two layouts follow (``csv_layout``):

* ``file``: the report dir is on the driver's filesystem (a plain path or a
  ``file:`` URI) and the executors run on this machine (the default
  ``local[*]``, or a standalone master on loopback such as the sandbox's
  ``local up --spark-workers N``), so every part file is on this machine. Spark writes each CSV into a hidden
  staging directory beside its final name (``.partitions.csv.<token>.parts``);
  :func:`publish` then concatenates the parts in task order into
  ``partitions.csv`` and ``groups.csv``: one header line, the rows in the
  order Spark wrote them.
* ``part-files``: anywhere else (HDFS, S3, a cluster whose executors write
  to their own disks) the driver cannot read every part, so the CSVs stay
  Spark's directories and the report says so.

Rules:

1. A CSV file is complete or absent: the merge writes a hidden temporary
   file next to it, and only a rename gives it its name, once every CSV of
   the report is merged. A failure removes the temporary files and the
   staging directories; nothing of it is left under a report name.
2. An existing report is refused unless ``overwrite`` (checked before any
   task runs, by :func:`check_report`, and again when the files are
   renamed into place); with ``overwrite`` the old file, or an old report's
   directory of the same name, is replaced.
3. The merge streams: memory is one copy buffer, whatever the row count.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from zkcoord.errors import UsageError, ZkcoordError
from zkcoord.migrate.spark_master import runs_here

__all__ = ["FILE", "PART_FILES", "REPORT_COLUMNS", "GROUPS_COLUMNS", "CSV_OPTIONS", "ReportPaths", "ReportTargets",
           "Staged",
           "CsvPart", "csv_text", "write_csv_file", "report_schema", "group_rows", "write_groups", "plan_report",
           "check_report", "publish", "discard", "merge_parts", "part_files"]

FILE, PART_FILES = "file", "part-files"
# partitions.parquet's and partitions.csv's columns (their meaning: zkcoord.migrate.spark_tasks)
REPORT_COLUMNS = ("group", "topic", "partition", "legacy", "kafka", "log_start", "log_end", "decision", "target",
                  "note", "status")
GROUPS_COLUMNS = ("group", "kind", "message")
# RFC 4180 quoting (what Python's csv reads), values kept as they are (legacy " 25\n" stays that);
# CsvPart writes the same bytes as Spark's writer with these options.
CSV_OPTIONS = {"header": True, "escape": '"', "ignoreLeadingWhiteSpace": False, "ignoreTrailingWhiteSpace": False}
_COPY_BYTES = 1 << 20
# part-00003-<uuid>-c000.csv: task 3's first file (Spark numbers a task's files c000, c001, ... when it splits them)
_PART = re.compile(r"^part-(\d+)(?:-[^.]*?)?(?:-c(\d+))?\.csv$")


@dataclass(frozen=True)
class ReportPaths:
    """The report as the user reaches it: plain paths for a local report,
    URIs otherwise. ``csv_layout``: ``file`` when ``csv`` and
    ``groups_csv`` are single CSV files, ``part-files`` when they are
    directories of Spark's ``part-*.csv`` files (each with a header line)."""

    parquet: str
    csv: str
    groups_csv: str
    csv_layout: str = PART_FILES


@dataclass(frozen=True)
class Staged:
    """One CSV of a local report: Spark writes ``staging``, the merge writes ``temporary``, renamed ``final``."""

    name: str
    staging: Path
    temporary: Path
    final: Path


@dataclass(frozen=True)
class ReportTargets:
    """What Spark writes (URIs), and for a local report (``local_dir``) the
    CSVs the merge turns into files (``staged``)."""

    paths: ReportPaths
    parquet_uri: str
    csv_uri: str
    groups_csv_uri: str
    local_dir: Path | None = None
    staged: tuple[Staged, ...] = ()


def plan_report(report_dir: str, master: str) -> ReportTargets:
    """The report's names for ``report_dir`` (as given: path or URI) and Spark's ``master``."""
    base = report_dir.strip()
    local = _local_path(base) if runs_here(master) else None
    if local is None:
        base = base.rstrip("/") or base
        paths = ReportPaths(f"{base}/partitions.parquet", f"{base}/partitions.csv", f"{base}/groups.csv")
        return ReportTargets(paths, paths.parquet, paths.csv, paths.groups_csv)
    token = uuid.uuid4().hex[:12]
    csv, groups = (Staged(name, local / f".{name}.{token}.parts", local / f".{name}.{token}.tmp", local / name)
                   for name in ("partitions.csv", "groups.csv"))
    paths = ReportPaths(str(local / "partitions.parquet"), str(csv.final), str(groups.final), FILE)
    return ReportTargets(paths, (local / "partitions.parquet").as_uri(), csv.staging.as_uri(),
                         groups.staging.as_uri(), local, (csv, groups))


def _local_path(base: str) -> Path | None:
    """The local directory ``base`` names (a plain path or a ``file:`` URI); None for any other URI."""
    if base.startswith("file:"):
        parsed = urlparse(base)
        if parsed.netloc not in ("", "localhost"):
            return None
        return Path(url2pathname(parsed.path)).resolve()
    if "://" in base:
        return None
    return Path(base).expanduser().resolve()


def check_report(sc: Any, report: ReportTargets, overwrite: bool) -> None:
    """Before any task runs: a local report dir must be a directory (or absent); an existing
    report is refused unless ``overwrite``. Raises UsageError naming what is in the way."""
    local = report.local_dir
    found = next((p for p in (local, *local.parents) if p.exists()), None) if local is not None else None
    if found is not None and not found.is_dir():
        where = "is a file" if found == local else f"is under {found}, which is a file"
        raise UsageError(f"--report-dir {local} {where}, not a directory; choose another --report-dir")
    if overwrite:
        return
    if local is not None:
        for final in (local / "partitions.parquet", *(s.final for s in report.staged)):
            if os.path.lexists(final):
                raise _exists(final)
        return
    jvm = sc._jvm  # Hadoop's FileSystem: the same check Spark makes, for every scheme it knows
    for target in (report.parquet_uri, report.csv_uri, report.groups_csv_uri):
        path = jvm.org.apache.hadoop.fs.Path(target)
        if path.getFileSystem(sc._jsc.hadoopConfiguration()).exists(path):
            raise _exists(target)


def _exists(target: str | Path) -> UsageError:
    return UsageError(f"the report {target} already exists; choose another --report-dir or pass --overwrite")


def publish(report: ReportTargets, partition_columns: Sequence[str], overwrite: bool) -> None:
    """After Spark wrote the staging directories of a local report: merge
    each into its CSV file, rename the files into place, remove the staging
    directories (rule 1). Nothing to do for a ``part-files`` report."""
    if not report.staged:
        return
    columns = {"partitions.csv": tuple(partition_columns), "groups.csv": GROUPS_COLUMNS}
    try:
        for staged in report.staged:
            merge_parts(part_files(staged.staging), staged.temporary, columns[staged.name])
        if not overwrite:
            for staged in report.staged:
                if os.path.lexists(staged.final):
                    raise _exists(staged.final)
        for staged in report.staged:
            if staged.final.is_dir() and not staged.final.is_symlink():  # a report from before CSVs were files
                shutil.rmtree(staged.final)
            os.replace(staged.temporary, staged.final)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise ZkcoordError(f"cannot write the report in {report.local_dir}: {exc.strerror or exc}{where}; check "
                           "its free space and permissions, then run the job again") from None
    finally:
        discard(report)


def discard(report: ReportTargets) -> None:
    """Remove the staging directories and temporary files of a local report
    (after its merge, or after a job that failed before it). Never raises:
    it runs while another error may be on its way to the user."""
    for staged in report.staged:
        shutil.rmtree(staged.staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            staged.temporary.unlink(missing_ok=True)


def part_files(directory: Path) -> list[Path]:
    """Spark's part files of one CSV output, in task order, then in each task's file order."""
    found = []
    for path in directory.iterdir():
        match = _PART.match(path.name)
        if match:
            found.append(((int(match[1]), int(match[2] or 0), path.name), path))
    return [path for _, path in sorted(found)]


def merge_parts(parts: Iterable[Path], target: Path, columns: Sequence[str]) -> None:
    """One CSV file ``target`` (created, never overwritten) of ``parts``: the header
    line of ``columns``, then each part without its own header line, streamed."""
    header = ",".join(columns).encode()
    with open(target, "xb") as out:
        out.write(header + b"\n")
        for part in parts:
            with open(part, "rb") as rows:
                first = rows.readline(len(header) + 2)  # bounded: a part without a header must not be read whole
                if not first:
                    continue
                if first.rstrip(b"\r\n") != header:
                    raise ZkcoordError(f"Spark's part file {part} does not start with the header line "
                                       f"{header.decode()!r}; the report's CSV was not written")
                last = b"\n"
                while chunk := rows.read(_COPY_BYTES):
                    out.write(chunk)
                    last = chunk[-1:]
                if last != b"\n":
                    out.write(b"\n")
        out.flush()
        os.fsync(out.fileno())


# ------------------------------------------------------------------ the tasks' own CSV parts
def csv_text(value: object) -> str:
    """One field as Spark's CSV writer (:data:`CSV_OPTIONS`) writes it: null empty, an empty string
    ``""``, a string holding ``,`` ``"`` ``\\n`` or ``\\r`` quoted with its quotes doubled, the rest as it is.

    >>> [csv_text(v) for v in (None, "", 7, " 25\\n", 'a"b', "x\\r", " 7")]
    ['', '""', '7', '" 25\\n"', '"a""b"', '"x\\r"', ' 7']
    """
    if value is None:
        return ""
    text = str(value)
    if text == "" or any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


class CsvPart:
    """One task's part of a local report's ``partitions.csv``, written by the task as it yields its
    rows (the ``file`` layout only: the staging directory is on this machine), in the bytes Spark's
    CSV writer would write (:func:`csv_text`), header line first, as ``part-<index>-zkcoord.csv``,
    which :func:`part_files` orders by ``index``. The rows go to a hidden temporary file renamed to
    that name by :meth:`close`, so a task Spark runs again replaces its earlier attempt's part
    whole, and an attempt that failed leaves only a hidden file, removed with the staging directory.
    """

    def __init__(self, directory: str | Path, index: int, columns: Sequence[str]) -> None:
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        self.final = folder / f"part-{index:05d}-zkcoord.csv"
        self.temporary = folder / f".part-{index:05d}-{uuid.uuid4().hex[:12]}.tmp"
        self._file = open(self.temporary, "x", encoding="utf-8", newline="")
        self._file.write(",".join(columns) + "\n")
        self._fast = csv.writer(self._file, lineterminator="\n").writerow  # Python's csv: minimal quoting

    def write(self, rows: Iterable[Sequence]) -> None:
        """Append ``rows``; the four free-text columns of a report row (0, 1, 3, 9: group, topic,
        legacy value, note) are the only ones that can be empty or hold a carriage return, the two
        things Python's csv writes differently from Spark's (unquoted): such a row is written field
        by field."""
        fast, out = self._fast, self._file
        for row in rows:
            group, topic, legacy, note = row[0], row[1], row[3], row[9]
            if "" in (group, topic, legacy, note) or "\r" in f"{group}{topic}{legacy}{note}":
                out.write(",".join(csv_text(v) for v in row) + "\n")
            else:
                fast(row)

    def close(self) -> None:
        """The part complete: flushed, closed, renamed to its name."""
        self._file.close()
        os.replace(self.temporary, self.final)

    def abort(self) -> None:
        """The attempt failed: its temporary file removed (never raises)."""
        with contextlib.suppress(OSError):
            self._file.close()
        with contextlib.suppress(OSError):
            self.temporary.unlink(missing_ok=True)


def write_csv_file(path: str | Path, columns: Sequence[str], rows: Iterable[Sequence]) -> None:
    """A small CSV (groups.csv's rows) written on the driver as one part file at ``path``, field by
    field in Spark's bytes (:func:`csv_text`), header line first."""
    folder = Path(path).parent
    folder.mkdir(parents=True, exist_ok=True)
    with open(path, "x", encoding="utf-8", newline="") as out:
        out.write(",".join(columns) + "\n")
        for row in rows:
            out.write(",".join(csv_text(v) for v in row) + "\n")


# ------------------------------------------------------------------ what Spark writes
def report_schema():
    """The Spark schema of ``partitions.parquet`` (the columns of
    :data:`REPORT_COLUMNS`)."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    types = {"partition": IntegerType(), "kafka": LongType(), "log_start": LongType(), "log_end": LongType(),
             "target": LongType()}
    return StructType([StructField(name, types.get(name, StringType()), nullable=name != "group")
                       for name in REPORT_COLUMNS])


def group_rows(errors: Iterable[tuple[str, str]], notes: Iterable[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """``groups.csv``'s rows (:data:`GROUPS_COLUMNS`), sorted: the groups' errors and notes."""
    return sorted([(g, "error", text) for g, text in errors] + [(g, "note", text) for g, text in notes])


def write_groups(spark: Any, rows: list[tuple[str, str, str]], path: str, mode: str) -> None:
    """``groups.csv`` of ``rows`` at ``path`` (Spark's CSV writer, one part file)."""
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField(name, StringType(), False) for name in GROUPS_COLUMNS])
    spark.createDataFrame(rows, schema).coalesce(1).write.mode(mode).options(**CSV_OPTIONS).csv(path)
