"""Kafka's own Java tools (:mod:`tests.support.java_tools`) against the test services.

ConsoleProducer writes keyed records (nulls, tabs and non-ASCII included);
ConsoleConsumer reads them all back in a group; ``kafka-consumer-groups
--describe`` shows the group's committed offsets at the log end;
ConsumerPerformance reads the topic again. A transactional
ProducerPerformance run writes "0".."N-1"; a background ConsoleConsumer
member reads them ``read_committed``, shows up in ``--describe --members``,
and commits what it read when stopped with SIGTERM.

Every tool is a JVM start (1-2 s here), so the two integration tests run
nine between them. The parsers are also checked on output captured from
Kafka 3.9.2, without a JVM.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
from kafka.admin import NewTopic

from tests.support import java_tools as jt

pytestmark = pytest.mark.integration


def _create_topic(admin, name: str, partitions: int) -> str:
    admin.create_topics([NewTopic(name, partitions, 1)], wait_for_metadata=True)
    return name


def test_produce_consume_and_describe(services, admin, unique_name, java_tools_available):
    bootstrap = services.bootstrap_servers
    topic = _create_topic(admin, unique_name("jt-orders"), 3)
    group, perf_group = unique_name("jt-group"), unique_name("jt-perf")
    records = [(f"key-{i}", f"value {i} ü\t{i}") for i in range(120)] + [(None, "null key"), ("null value", None)]

    assert jt.produce(bootstrap, topic, records) == len(records)

    consumed = jt.consume(bootstrap, topic, group=group, max_messages=len(records))
    assert Counter((r.key, r.value) for r in consumed) == Counter(records)
    per_partition = Counter(r.partition for r in consumed)
    for partition, count in per_partition.items():
        offsets = sorted(r.offset for r in consumed if r.partition == partition)
        assert offsets == list(range(count)), f"partition {partition} offsets {offsets}"
    assert all(r.timestamp_type == "CreateTime" and r.timestamp_ms > 0 for r in consumed)

    rows = jt.describe_group_offsets(bootstrap, group)
    assert {(r.group, r.topic) for r in rows} == {(group, topic)}
    assert sorted(r.partition for r in rows) == [0, 1, 2]
    for row in rows:
        assert row.current_offset == row.log_end_offset == per_partition[row.partition], row
        assert row.lag == 0 and row.consumer_id is None, row  # the consumer left on exit
    assert sum(r.log_end_offset for r in rows) == len(records)

    perf = jt.consumer_performance(bootstrap, topic, len(records), group=perf_group,
                                   consumer_properties={"max.poll.records": 50}, timeout_ms=20_000)
    assert perf.messages_consumed == len(records) and perf.warnings == ()
    assert perf.messages_per_sec > 0 and perf.mb_consumed > 0

    assert {group, perf_group} <= set(jt.list_groups(bootstrap))


def test_transactional_run_and_background_member(services, admin, unique_name, java_tools_available):
    bootstrap = services.bootstrap_servers
    topic = _create_topic(admin, unique_name("jt-tx"), 1)
    group, count = unique_name("jt-tx-group"), 200

    summary = jt.transactional_produce(bootstrap, topic, count, unique_name("jt-txid"), transaction_duration_ms=50)
    assert summary.records_sent == count and summary.records_per_sec > 0
    assert 0 <= summary.p50_ms <= summary.p95_ms <= summary.p99_ms <= summary.p999_ms <= summary.max_latency_ms

    with jt.ConsoleConsumerProcess(bootstrap, topic, group=group, client_id="jt-member",
                                   isolation_level="read_committed") as member:
        got = member.wait_for_records(count)
        assert sorted(int(r.value) for r in got) == list(range(count))
        members = jt.describe_group_members(bootstrap, group)
        assert [(m.client_id, m.partitions, m.assignment) for m in members] == [("jt-member", 1, "(0)")]
        assert member.stop() == 143  # SIGTERM: shutdown hook, commit, leave the group
    assert len(member.records()) == count and member.unparsed_lines() == []

    (row,) = jt.describe_group_offsets(bootstrap, group)
    last = max(r.offset for r in member.records())
    # Commit markers sit between the records, so the position is past the last record, not at `count`.
    assert row.current_offset is not None and row.current_offset > last, row
    assert row.consumer_id is None, row


# ------------------------------------------------- parsers, on captured output
def test_parsers_on_captured_output():
    summary = jt.parse_producer_performance(
        "2000 records sent, 400.0 records/sec (0.04 MB/sec), 5.1 ms avg latency, 90.00 ms max latency.\n"
        "2000 records sent, 4415.011038 records/sec (0.42 MB/sec), 232.67 ms avg latency, 296.00 ms max "
        "latency, 235 ms 50th, 282 ms 95th, 293 ms 99th, 295 ms 99.9th.\n")
    assert (summary.records_sent, summary.records_per_sec, summary.mb_per_sec) == (2000, 4415.011038, 0.42)
    assert (summary.avg_latency_ms, summary.max_latency_ms) == (232.67, 296.0)
    assert (summary.p50_ms, summary.p95_ms, summary.p99_ms, summary.p999_ms) == (235, 282, 293, 295)
    failed = jt.parse_producer_performance(
        "0 records sent, 0.000000 records/sec (0.00 MB/sec), NaN ms avg latency, 0.00 ms max latency, "
        "0 ms 50th, 0 ms 95th, 0 ms 99th, 0 ms 99.9th.")
    assert failed.records_sent == 0 and math.isnan(failed.avg_latency_ms)

    perf = jt.parse_consumer_performance(
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
        "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
        "WARNING: Exiting before consuming the expected number of messages: timeout (2000 ms) exceeded. "
        "You can use the --timeout option to increase the timeout.\n"
        "2026-11-25 02:47:11:019, 2026-11-25 02:47:13:680, 0.0000, 0.0000, 1, 0.3758, 553, 2108, 0.0000, 0.4744\n")
    assert (perf.messages_consumed, perf.rebalance_time_ms, perf.fetch_time_ms) == (1, 553, 2108)
    assert perf.start_time == "2026-11-25 02:47:11:019" and len(perf.warnings) == 1

    rows = jt.parse_group_offsets(
        "\nGROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             "
        "CONSUMER-ID                             HOST            CLIENT-ID\n"
        "gs6             bg4             0          50              50              0               "
        "m1-60d35d2c-8ff1-4d44-ad7a-0eecb2e2e0bd /127.0.0.1      m1\n"
        "gs6             s1              0          -               53              -               "
        "-               -               -\n")
    assert rows[0] == jt.GroupOffsetRow("gs6", "bg4", 0, 50, 50, 0, "m1-60d35d2c-8ff1-4d44-ad7a-0eecb2e2e0bd",
                                        "/127.0.0.1", "m1")
    assert rows[1] == jt.GroupOffsetRow("gs6", "s1", 0, None, 53, None, None, None, None)
    with pytest.raises(jt.JavaToolError, match="does not exist"):
        jt.parse_group_offsets("\nError: Consumer group 'nosuch' does not exist.\n")

    members = jt.parse_group_members(
        "\nGROUP           CONSUMER-ID                             HOST            CLIENT-ID       #PARTITIONS     "
        "ASSIGNMENT\ngs6             m2-f656fa6b-b7a2-4755-ba08-665eb7c0bc95 /127.0.0.1      m2              1    "
        "           (0)\n")
    assert members == [jt.GroupMemberRow("gs6", "m2-f656fa6b-b7a2-4755-ba08-665eb7c0bc95", "/127.0.0.1", "m2", 1,
                                         "(0)")]

    assert jt.parse_group_list("g1\ncp-2\n") == ["g1", "cp-2"]
    assert jt.parse_group_list("GROUP                     STATE               \ng1                        Empty\n") \
        == ["g1"]

    record = jt.parse_console_record(f"CreateTime:1795574755361\tPartition:2\tOffset:7\t{jt.NULL_MARKER}\ta\tb")
    assert record == jt.ConsumedRecord(2, 7, None, "a\tb", 1795574755361, "CreateTime")
    with pytest.raises(ValueError):
        jt.parse_console_record("Processed a total of 4 messages")
    with pytest.raises(ValueError, match="line breaks"):
        jt.produce("127.0.0.1:1", "t", [("k", "two\nlines")])
