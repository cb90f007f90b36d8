"""zkcoord/local/record_log.py: record logs written and read back, an
unfinished last line skipped, a bad line named, duplicates and misses found."""

from __future__ import annotations

import pytest

from zkcoord.local.record_log import (Delivery, RecordLogError, RecordLogWriter, check_deliveries, read_record_log,
                                      read_record_logs)


def test_written_lines_read_back(tmp_path):
    writer = RecordLogWriter(tmp_path / "a.log")
    writer.write("orders", 1, 7, "m1", "0", ts_ms=1000)
    writer.write("orders", 1, 8, "m1", ts_ms=1001)
    writer.close()
    assert read_record_log(tmp_path / "a.log") == [Delivery("orders", 1, 7, "m1", "0", 1000),
                                                  Delivery("orders", 1, 8, "m1", "0", 1001)]
    assert read_record_log(tmp_path / "none.log") == []  # its consumer never got a record


def test_an_unfinished_last_line_is_skipped_and_a_bad_line_named(tmp_path):
    (tmp_path / "cut.log").write_text("orders\t0\t1\tm1\t0\t5\norders\t0\t2\tm1")
    assert read_record_log(tmp_path / "cut.log") == [Delivery("orders", 0, 1, "m1", "0", 5)]
    (tmp_path / "bad.log").write_text("orders\t0\t1\tm1\t0\t5\norders\tzero\t2\tm1\t0\t6\n")
    with pytest.raises(RecordLogError, match=r"bad.log, line 2: .*'zero'"):
        read_record_log(tmp_path / "bad.log")
    (tmp_path / "short.log").write_text("orders\t0\t1\n")
    with pytest.raises(RecordLogError, match="line 1: 3 fields, expected 6"):
        read_record_logs([tmp_path / "short.log"])


def test_duplicates_to_one_or_two_members_and_misses():
    deliveries = [Delivery("t", 0, 0, "a", "0", 1), Delivery("t", 0, 1, "a", "0", 2),
                  Delivery("t", 0, 1, "b", "0", 3),  # to two members
                  Delivery("t", 1, 0, "a", "0", 4), Delivery("t", 1, 0, "a", "1", 5)]  # to one again
    check = check_deliveries(deliveries, {("t", 0): range(0, 3), ("t", 1): range(0, 1)})
    assert set(check.duplicates) == {("t", 0, 1), ("t", 1, 0)} and check.extra_deliveries == 2
    assert check.to_two_members == {("t", 0, 1)}
    assert check.missed == {("t", 0): [2]} and check.missed_count == 1
    assert check.summary() == ("5 deliveries, 2 records more than once (2 extra deliveries, 1 to two members), "
                               "1 missed (t-0: 1 from offset 2)")
