"""Every znode path comes from zkcoord.zk.paths, which refuses components
that cannot be one znode name."""

from __future__ import annotations

import pytest

from zkcoord.errors import ConfigError, UsageError
from zkcoord.zk import paths
from zkcoord.zk.connection import parse_hosts


def test_layout():
    assert paths.node(7) == "/zkcoord/nodes/7"
    assert paths.LAYOUT == "/zkcoord/layout"
    assert paths.owner_dir("g1") == "/coordinators/g1/owner"
    assert paths.state("g1") == "/coordinators/g1/state"
    assert paths.contender("g1", "ab__lock__0000000003") == "/coordinators/g1/owner/ab__lock__0000000003"
    assert paths.broker_topic("orders.v2") == "/brokers/topics/orders.v2"


def test_offsets_layout_with_default_and_custom_root():
    legacy = paths.OffsetPaths()
    assert legacy.partition("g", "t", 3) == "/consumers/g/offsets/t/3"
    assert legacy.metadata("g", "t", 3) == "/consumers/g/offsets-metadata/t/3"
    kafka = paths.OffsetPaths("/kafka/consumers")
    assert kafka.topic_dir("g", "t") == "/kafka/consumers/g/offsets/t"
    # metadata never adds children under offsets/<topic>
    assert not kafka.metadata("g", "t", 0).startswith(kafka.topic_dir("g", "t") + "/")


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "/", "x\x00y", "tab\there", "\ud800", "\U0001F642", 7, None])
def test_components_that_cannot_be_a_znode_name_are_refused(bad):
    with pytest.raises(UsageError):
        paths.OffsetPaths().partition("g", bad, 0)
    with pytest.raises(UsageError):
        paths.broker_topic(bad)


@pytest.mark.parametrize("bad", [7, None, b"g"])
def test_group_ids_are_strings(bad):
    with pytest.raises(UsageError, match="group id must be a string"):
        paths.state(bad)


def test_the_message_names_what_was_wrong():
    with pytest.raises(UsageError, match=r"topic 'a/b' .* must not contain '/'"):
        paths.broker_topic("a/b")
    with pytest.raises(UsageError, match=r"topic '' .* must not be empty"):
        paths.OffsetPaths().topic_dir("g", "")


@pytest.mark.parametrize("bad", [-1, True, "3", 1.0])
def test_partitions_are_whole_numbers(bad):
    with pytest.raises(UsageError, match="partition"):
        paths.OffsetPaths().partition("g", "t", bad)


@pytest.mark.parametrize("bad", [-1, 2**31, True, "1"])
def test_node_ids_are_kafka_node_ids(bad):
    with pytest.raises(UsageError, match="node id"):
        paths.node(bad)


@pytest.mark.parametrize("bad", ["consumers", "/consumers/", "/a//b", "/"])
def test_offsets_root_must_be_an_absolute_path(bad):
    with pytest.raises(ConfigError):
        paths.OffsetPaths(bad)


def test_contender_sequence():
    assert paths.contender_sequence("0f1e__lock__0000000042") == "0000000042"
    assert paths.contender_sequence("state") is None


def test_connection_strings():
    assert parse_hosts("a:2181,b:2182/kafka/x") == ([("a", 2181), ("b", 2182)], "/kafka/x")
    assert parse_hosts("127.0.0.1:2181") == ([("127.0.0.1", 2181)], None)
    for bad in ["", "a", "a:b", "a:2181,/x", "a:2181/x//y"]:
        with pytest.raises(ConfigError):
            parse_hosts(bad)
