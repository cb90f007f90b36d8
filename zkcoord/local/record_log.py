"""Per-record logs of consumers, and what they show: records delivered more
than once, to two members, and records no member got.

A record log is a text file, one line per record a consumer handed to its
application, six tab-separated fields::

    topic  partition  offset  member  thread  wall-ms

``member`` is the consumer's name in the test or benchmark, ``thread`` the
stream or thread of that member that got the record (the legacy driver's
stream index; ``0`` for a consumer with one), ``wall-ms`` the machine's
clock (``System.currentTimeMillis``, ``time.time``) when it was handed over.
Written by the sandbox's legacy driver (``legacy_consumer/LegacyGroup.java``,
``LegacySettings.record_log``) and by :class:`RecordLogWriter`. Topic names
cannot hold tabs or newlines (Kafka allows ``[a-zA-Z0-9._-]``).

A writer killed in the middle of a line leaves a last line without its
newline: :func:`read_record_log` skips it (that record counts as not
delivered, as its consumer did not get to commit it either).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from zkcoord.errors import ZkcoordError

TopicPartition = tuple[str, int]
Record = tuple[str, int, int]  # topic, partition, offset


class RecordLogError(ZkcoordError):
    """A record log that cannot be read; the message names the file and line."""


class Delivery(NamedTuple):
    topic: str
    partition: int
    offset: int
    member: str
    thread: str
    ts_ms: int

    @property
    def record(self) -> Record:
        return self.topic, self.partition, self.offset


def format_line(topic: str, partition: int, offset: int, member: str, thread: str, ts_ms: int) -> str:
    return f"{topic}\t{partition}\t{offset}\t{member}\t{thread}\t{ts_ms}\n"


class RecordLogWriter:
    """Appends deliveries to a record log; shared by threads. Lines are
    buffered and reach the file at :meth:`flush` and :meth:`close`: flush
    before committing, so that a committed record is in the log."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._file = open(self.path, "a", encoding="utf-8", buffering=1 << 16)
        self._lock = threading.Lock()

    def write(self, topic: str, partition: int, offset: int, member: str, thread: str = "0",
              ts_ms: int | None = None) -> None:
        line = format_line(topic, partition, offset, member, thread,
                           int(time.time() * 1000) if ts_ms is None else ts_ms)
        with self._lock:
            self._file.write(line)

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


def read_record_log(path: Path) -> list[Delivery]:
    """Every complete line of ``path``; RecordLogError naming the file and
    line for one that is not six fields with numbers where numbers go."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []  # its consumer never got a record
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordLogError(f"record log {path}: cannot read it: {exc}") from None
    lines = text.split("\n")
    deliveries = []
    for number, line in enumerate(lines[:-1], 1):  # the part after the last newline is unfinished
        fields = line.split("\t")
        try:
            if len(fields) != 6:
                raise ValueError(f"{len(fields)} fields, expected 6")
            topic, partition, offset, member, thread, ts_ms = fields
            deliveries.append(Delivery(topic, int(partition), int(offset), member, thread, int(ts_ms)))
        except ValueError as exc:
            raise RecordLogError(f"record log {path}, line {number}: {exc}: {line[:200]!r}") from None
    return deliveries


def read_record_logs(paths: Iterable[Path]) -> list[Delivery]:
    return [d for path in paths for d in read_record_log(path)]


@dataclass(frozen=True)
class DeliveryCheck:
    """What the record logs say of ``produced``'s records.

    ``duplicates``: every record handed over more than once (to one member
    again, or to another), with its deliveries in time order;
    ``to_two_members``: those of them that reached two or more members;
    ``missed``: per partition, the produced offsets no one got."""

    deliveries: int
    duplicates: dict[Record, list[Delivery]] = field(default_factory=dict)
    to_two_members: frozenset[Record] = frozenset()
    missed: dict[TopicPartition, list[int]] = field(default_factory=dict)

    @property
    def extra_deliveries(self) -> int:
        """Deliveries beyond the first of each record."""
        return sum(len(ds) - 1 for ds in self.duplicates.values())

    @property
    def missed_count(self) -> int:
        return sum(map(len, self.missed.values()))

    def summary(self) -> str:
        missed = ", ".join(f"{t}-{p}: {len(os)} from offset {os[0]}" for (t, p), os in sorted(self.missed.items()))
        return (f"{self.deliveries} deliveries, {len(self.duplicates)} records more than once "
                f"({self.extra_deliveries} extra deliveries, {len(self.to_two_members)} to two members), "
                f"{self.missed_count} missed" + (f" ({missed})" if missed else ""))


def check_deliveries(deliveries: Iterable[Delivery], produced: Mapping[TopicPartition, range]) -> DeliveryCheck:
    """Duplicates among ``deliveries`` (of any record), and which of
    ``produced``'s offsets (per partition, e.g. ``range(0, end)``) no
    delivery covers."""
    by_record: dict[Record, list[Delivery]] = defaultdict(list)
    count = 0
    for delivery in deliveries:
        by_record[delivery.record].append(delivery)
        count += 1
    duplicates = {r: sorted(ds, key=lambda d: d.ts_ms) for r, ds in by_record.items() if len(ds) > 1}
    to_two = frozenset(r for r, ds in duplicates.items() if len({d.member for d in ds}) > 1)
    missed: dict[TopicPartition, list[int]] = {}
    for (topic, partition), offsets in produced.items():
        gone = [o for o in offsets if (topic, partition, o) not in by_record]
        if gone:
            missed[(topic, partition)] = gone
    return DeliveryCheck(count, duplicates, to_two, missed)
