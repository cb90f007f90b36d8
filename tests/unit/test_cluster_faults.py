"""The pure parts of :mod:`tests.support.cluster_faults`: Java's
``String.hashCode`` and the ``__consumer_offsets`` partition of a group
(whose leader is the group's coordinator in Kafka). The integration test
checks the partition against FindCoordinator on real brokers."""

from __future__ import annotations

import pytest

from tests.support.cluster_faults import java_string_hash, offsets_partition


@pytest.mark.parametrize("text, expected", [
    ("", 0),
    ("a", 97),
    ("group", 98629247),
    ("polygenelubricants", -(1 << 31)),  # Integer.MIN_VALUE
    ("é", 233),  # one UTF-16 unit
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # a surrogate pair: two units
    ("hello", 99162322),
    ("Hello World", -862545276),  # wraps past 2**31: negative, as Java's int
])
def test_java_string_hash(text, expected):
    assert java_string_hash(text) == expected


def test_offsets_partition_as_kafka_computes_it():
    assert offsets_partition("group") == 98629247 % 10
    assert offsets_partition("polygenelubricants") == 0  # Utils.abs(Integer.MIN_VALUE) == 0
    assert offsets_partition("Hello World") == 862545276 % 10  # Utils.abs of a negative hash
    assert offsets_partition("group", partitions=50) == 98629247 % 50
    assert all(0 <= offsets_partition(f"g-{i}") < 10 for i in range(500))
