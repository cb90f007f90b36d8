"""Pure parts of the migration commands: verify's comparison, the phase
table of the migration record, the mode-request format, the record a mode
switch writes."""

from __future__ import annotations

import pytest

from zkcoord.core.migration import PartitionFacts, plan_group
from zkcoord.errors import StateError, UsageError
from zkcoord.migrate import status
from zkcoord.zk.modes import _with_mode, check_mode, parse_request
from zkcoord.migrate.status import NEXT, Phase, encode, tp_rows
from zkcoord.migrate.verify import Behind, compare


def facts(partition, legacy, kafka=None, start=0, end=100, **kwargs):
    return PartitionFacts("g", "t", partition, legacy, kafka_offset=kafka, log_start=start, log_end=end, **kwargs)


def test_verify_compares_each_partition_by_the_rule_table():
    plan = plan_group("g", [
        facts(0, "40", kafka=40),            # equal: fine
        facts(1, "40", kafka=55),            # Kafka ahead: ZooKeeper behind
        facts(2, "40", kafka=39),            # behind by one
        facts(3, "40"),                      # Kafka has nothing: behind
        facts(4, "500", kafka=100),          # beyond the log end, Kafka at the end (apply --force): fine
        facts(5, "500"),                     # beyond the log end, nothing in Kafka: behind
        facts(6, "5", kafka=20, start=20),   # below the log start, clamped by apply: fine
        facts(7, "abc"),                     # not compared
        PartitionFacts("g", "t", 8, "3", topic_exists=True, partition_exists=False),
    ], kafka_only={("t", 9): 12})             # only Kafka has an offset: ZooKeeper behind
    found = compare(plan)
    assert found.checked == 8
    assert found.behind == (Behind("t", 2, 40, 39), Behind("t", 3, 40, None), Behind("t", 5, 500, None))
    assert found.zookeeper_behind == (Behind("t", 1, 40, 55), Behind("t", 9, None, 12))
    assert [n.split(":")[0] for n in found.notes] == ["t-7", "t-8"]
    assert not found.clean
    kafka_phase = compare(plan, both_ways=False)  # ZooKeeper is no longer written: only Kafka behind counts
    assert (kafka_phase.checked, kafka_phase.behind, kafka_phase.zookeeper_behind) == (7, found.behind, ())


def test_verify_calls_equal_stores_clean():
    found = compare(plan_group("g", [facts(0, "40", kafka=40), facts(1, "5", kafka=20, start=20)]))
    assert (found.checked, found.clean) == (2, True)


def test_phases_move_only_as_the_table_says():
    assert NEXT[Phase.ZOOKEEPER] == {Phase.BACKED_UP}
    assert NEXT[Phase.DUAL] == {Phase.KAFKA, Phase.ZOOKEEPER}
    assert all(Phase.ZOOKEEPER in NEXT[p] for p in Phase if p is not Phase.ZOOKEEPER)  # rollback from anywhere


def test_advance_refuses_a_jump_and_keeps_history():
    class Store(status.MigrationStore):
        def __init__(self):
            self.written = []

        async def write(self, path, data, version):
            self.written.append((path, data, version))
            return version + 1

    import asyncio

    store = Store()
    record, version = asyncio.run(store.advance("g", None, -1, Phase.BACKED_UP, 1000, zk_root="/consumers"))
    assert (record["phase"], record["since_ms"], record["history"], version) == \
        ("backed-up", 1000, [["backed-up", 1000]], 0)
    same, _ = asyncio.run(store.advance("g", record, 0, Phase.BACKED_UP, 2000, verify={"clean": True}))
    assert (same["since_ms"], same["history"], same["verify"]) == (1000, [["backed-up", 1000]], {"clean": True})
    with pytest.raises(StateError, match="cannot go from backed-up to kafka"):
        asyncio.run(store.advance("g", record, 0, Phase.KAFKA, 3000))


def test_encoding_is_compact_and_bounded():
    assert tp_rows({("b", 1): 5, ("a", 0): 7}, {("a", 0): "m"}) == [["a", 0, 7, "m"], ["b", 1, 5, None]]
    assert encode("x", {"a": [1, 2]}) == b'{"a":[1,2]}'
    with pytest.raises(StateError, match="over ZooKeeper's limit"):
        encode("the archive of group 'g'", {"a": "x" * 1_000_001})


def test_mode_requests_and_records():
    assert parse_request("g", b'{"os":"dual","id":"1"}') == "dual"
    assert parse_request("g", b'{"os":"elsewhere"}') is None
    assert parse_request("g", b"not json") is None
    assert check_mode("kafka") == "kafka"
    with pytest.raises(UsageError, match="not one of zookeeper, dual, kafka"):
        check_mode("both")
    assert _with_mode("g", None, "dual") == {"v": 1, "s": "Empty", "g": 0, "os": "dual"}
    stable = {"v": 1, "s": "Stable", "g": 2, "os": "zookeeper", "pt": "consumer", "pn": "range", "l": "m",
              "m": [{"id": "m", "c": "c", "h": "/h", "st": 10000, "rt": 30000, "p": [["range", ""]]}]}
    assert _with_mode("g", stable, "kafka") == dict(stable, os="kafka")
    with pytest.raises(StateError):
        _with_mode("g", {"v": 7}, "kafka")  # never writes a corrupt record back
