"""Offset files users already have: kafka-consumer-groups CSV and ExportZkOffsets lines.

This module owns reading and writing ``{group: {(topic, partition): offset}}``
in two formats, with no I/O (text in, text out):

``csv``
    What ``kafka-consumer-groups --reset-offsets --export`` writes and
    ``--from-file`` reads: no header, ``topic,partition,offset`` for one
    group, ``group,topic,partition,offset`` for several. Fields are quoted as
    CSV quotes them (a group id may hold a comma). A first line naming the
    columns is accepted and skipped.
``zk-lines``
    What the old ``kafka.tools.ExportZkOffsets`` wrote and
    ``ImportZkOffsets`` read: ``/consumers/<group>/offsets/<topic>/<partition>:<offset>``
    per line, the path under the legacy root (``--zk-root``).

Rules: every line is checked before anything is returned; the first bad one
is a :class:`~zkcoord.errors.UsageError` saying its line number and what is
wrong. Blank lines are skipped. A partition given twice with the same offset
counts once; with two offsets it is an error naming both lines.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping

from zkcoord.core.legacy_values import shown
from zkcoord.core.migration import MAX_OFFSET
from zkcoord.errors import UsageError
from zkcoord.zk import paths

__all__ = ["FORMATS", "Offsets", "read_offsets", "write_offsets", "read_csv", "write_csv",
           "read_zk_lines", "write_zk_lines"]

FORMATS = ("csv", "zk-lines")
MAX_PARTITION = 2**31 - 1
Offsets = dict[str, dict[tuple[str, int], int]]
_NO_GROUP = ("topic", "partition", "offset")
_WITH_GROUP = ("group", "topic", "partition", "offset")


class _Collector:
    """Gathers validated records, remembering the line of each for duplicate errors."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.offsets: Offsets = {}
        self._lines: dict[tuple[str, str, int], int] = {}

    def fail(self, line: int, problem: str) -> UsageError:
        return UsageError(f"{self.source} line {line}: {problem}")

    def add(self, line: int, group: str, topic: str, partition_text: str, offset_text: str) -> None:
        for what, value in (("group id", group), ("topic", topic)):
            try:
                paths.component(value, what)
            except UsageError as exc:
                raise self.fail(line, str(exc)) from None
        partition = self._number(line, "partition", partition_text, MAX_PARTITION)
        offset = self._number(line, "offset", offset_text, MAX_OFFSET)
        key = (group, topic, partition)
        known = self.offsets.setdefault(group, {}).get((topic, partition))
        if known is not None and known != offset:
            raise self.fail(line, f"group {group!r} {topic}-{partition} has offset {offset}, but line "
                                  f"{self._lines[key]} gave it {known}")
        self._lines.setdefault(key, line)
        self.offsets[group][(topic, partition)] = offset

    def _number(self, line: int, what: str, text: str, most: int) -> int:
        value = text.strip()
        # the length first: a value of thousands of digits never reaches int() (and its digit limit)
        if not (value.isascii() and value.isdigit()) or len(value.lstrip("0")) > len(str(most)) \
                or int(value) > most:
            raise self.fail(line, f"{what} {shown(text)} is not a whole number from 0 to {most}")
        return int(value)

    def result(self) -> Offsets:
        if not self.offsets:
            raise UsageError(f"{self.source} holds no offsets")
        return self.offsets


# ------------------------------------------------------------------ csv
def read_csv(text: str, group: str | None = None, source: str = "the file") -> Offsets:
    """Offsets in kafka-consumer-groups CSV; ``group`` names the group of a
    three-column file and must not be given for a four-column one."""
    found = _Collector(source)
    width = None
    for number, fields in _csv_rows(text, found):
        fields = [f.strip() for f in fields]
        if width is None and tuple(f.lower() for f in fields) in (_NO_GROUP, _WITH_GROUP):
            width = len(fields)  # a header line
            _check_group_option(found, number, width, group)
            continue
        if len(fields) not in (3, 4):
            raise found.fail(number, f"expected topic,partition,offset or group,topic,partition,offset; "
                                     f"found {len(fields)} field(s)")
        if width is None:
            width = len(fields)
            _check_group_option(found, number, width, group)
        elif len(fields) != width:
            raise found.fail(number, f"has {len(fields)} fields where the lines before have {width}")
        if width == 3:
            found.add(number, group, *fields)
        else:
            found.add(number, *fields)
    return found.result()


def _csv_rows(text: str, found: _Collector):
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise found.fail(reader.line_num, f"is not valid CSV ({exc})") from None
        if row and any(field.strip() for field in row):
            yield reader.line_num, row


def _check_group_option(found: _Collector, number: int, width: int, group: str | None) -> None:
    if width == 3 and group is None:
        raise found.fail(number, "the file has no group column (topic,partition,offset): name the group "
                                 "with --group")
    if width == 4 and group is not None:
        raise found.fail(number, f"the file names its groups (group,topic,partition,offset); drop --group "
                                 f"{group!r}")


def write_csv(offsets: Mapping[str, Mapping[tuple[str, int], int]], with_group: bool | None = None) -> str:
    """kafka-consumer-groups CSV, sorted; without the group column when there
    is one group (or ``with_group`` says so), as the tool exports one group."""
    if with_group is None:
        with_group = len(offsets) != 1
    if not with_group and len(offsets) > 1:
        raise UsageError(f"{len(offsets)} groups cannot be written without the group column")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for group in sorted(offsets):
        for (topic, partition), offset in sorted(offsets[group].items()):
            writer.writerow([group, topic, partition, offset] if with_group else [topic, partition, offset])
    return out.getvalue()


# ------------------------------------------------------------------ zk-lines
def read_zk_lines(text: str, root: str = paths.DEFAULT_CONSUMERS_ROOT, source: str = "the file") -> Offsets:
    """Offsets in ExportZkOffsets lines; every path must be under ``root``."""
    layout = paths.OffsetPaths(root)
    found = _Collector(source)
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        path, sep, offset = line.rpartition(":")
        if not sep:
            raise found.fail(number, f"expected <root>/<group>/offsets/<topic>/<partition>:<offset>, got {line!r}")
        parts = path.split("/")
        if len(parts) < 6 or parts[-3] != paths.OFFSETS or not path.startswith("/"):
            raise found.fail(number, f"{path!r} is not <root>/<group>/offsets/<topic>/<partition>")
        prefix = "/".join(parts[:-4])
        if prefix != layout.root:
            raise found.fail(number, f"{path!r} is under {prefix or '/'}, not under --zk-root {layout.root} "
                                     f"(give --zk-root {prefix or '/'} if that is where the offsets belong)")
        found.add(number, parts[-4], parts[-2], parts[-1], offset)
    return found.result()


def write_zk_lines(offsets: Mapping[str, Mapping[tuple[str, int], int]],
                   root: str = paths.DEFAULT_CONSUMERS_ROOT) -> str:
    """ExportZkOffsets lines, sorted by group, topic, partition."""
    layout = paths.OffsetPaths(root)
    lines = [f"{layout.partition(group, topic, partition)}:{offset}\n"
             for group in sorted(offsets) for (topic, partition), offset in sorted(offsets[group].items())]
    return "".join(lines)


# ------------------------------------------------------------------ either
def read_offsets(text: str, fmt: str, *, group: str | None = None, root: str = paths.DEFAULT_CONSUMERS_ROOT,
                 source: str = "the file") -> Offsets:
    """Offsets in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "csv":
        return read_csv(text, group, source)
    if fmt == "zk-lines":
        if group is not None:
            raise UsageError("zk-lines name their groups in each path; drop --group")
        return read_zk_lines(text, root, source)
    raise UsageError(f"unknown offsets format {fmt!r}; expected one of {', '.join(FORMATS)}")


def write_offsets(offsets: Mapping[str, Mapping[tuple[str, int], int]], fmt: str, *,
                  with_group: bool | None = None, root: str = paths.DEFAULT_CONSUMERS_ROOT) -> str:
    if fmt == "csv":
        return write_csv(offsets, with_group)
    if fmt == "zk-lines":
        return write_zk_lines(offsets, root)
    raise UsageError(f"unknown offsets format {fmt!r}; expected one of {', '.join(FORMATS)}")
