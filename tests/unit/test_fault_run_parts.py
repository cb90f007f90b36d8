"""Pure parts of the fault run added for issue 29: daemon log times read back
in true time after a clock jump, the ensemble's connect string, the topics'
replication factor, the verdicts by name."""

from __future__ import annotations

import json

from tests.faults.checker import ClockShift, GenerationSeen, Violation, clock_shifts, load_dir, unshift, verdicts
from tests.faults.harness import replicas, zookeeper_ports


def seen(generation: int, t: float) -> GenerationSeen:
    return GenerationSeen(generation, frozenset({"m"}), "Stable", t)


def test_entries_logged_in_a_shift_window_are_moved_back_and_others_kept():
    shifts = [ClockShift(1, 3600.0, 1000.0, 1005.0), ClockShift(1, -7200.0, 2000.0, 2008.0)]
    entries = [seen(1, 999.0), seen(2, 1002.0 + 3600), seen(3, 1010.0), seen(4, 2003.0 - 7200), seen(5, 2010.0)]
    assert [g.t for g in unshift(entries, shifts)] == [999.0, 1002.0, 1010.0, 2003.0, 2010.0]


def test_clock_shifts_per_node():
    events = [{"ev": "clock-shift", "node": 2, "offset_s": 86400.0, "real_from": 1.0, "real_to": 3.0},
              {"ev": "fault", "number": 1}]
    assert clock_shifts(events) == {2: [ClockShift(2, 86400.0, 1.0, 3.0)]}


def test_load_dir_reads_a_shifted_daemon_log_in_true_time(tmp_path):
    events = tmp_path / "events"
    events.mkdir()
    (events / "run.jsonl").write_text(json.dumps(
        {"ev": "clock-shift", "node": 1, "offset_s": 3600.0, "real_from": 0.0, "real_to": 10 ** 10}) + "\n")
    line = "{stamp} INFO zkcoord.server.manager: group g: Stable, generation 7, leader m-1, members [m-1]\n"
    from datetime import datetime

    shifted = datetime.fromtimestamp(1_800_000_000.0 + 3600).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    true = datetime.fromtimestamp(1_800_000_000.0).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    (tmp_path / "daemon-1.log").write_text(line.format(stamp=shifted))
    (tmp_path / "daemon-2.log").write_text(line.format(stamp=true))
    log = load_dir(events, "g", [tmp_path / "daemon-1.log", tmp_path / "daemon-2.log"])
    assert [g.t for g in log.history] == [1_800_000_000.0, 1_800_000_000.0]


def test_zookeeper_ports_of_one_server_and_of_an_ensemble_with_a_chroot():
    assert zookeeper_ports("127.0.0.1:2181") == [2181]
    assert zookeeper_ports("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/faults/x-1") == [1, 2, 3]


def test_topics_are_replicated_on_every_broker_up_to_three():
    assert [replicas(",".join(f"127.0.0.1:{p}" for p in range(n))) for n in (1, 2, 3)] == [1, 2, 3]


def test_verdicts_count_each_kind_of_violation():
    counted = verdicts([Violation("stale-commit", "x"), Violation("stale-commit", "y"), Violation("rewind", "z"),
                        Violation("double-owner", "w"), Violation("mystery", "v")])
    assert counted == {"double ownership": 1, "stale commits": 2, "offset regressions": 1,
                       "acknowledged commits lost": 0, "acknowledged records not consumed": 0, "other": 1}
    assert set(verdicts([]).values()) == {0}
