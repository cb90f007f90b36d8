"""The consumer's settings and error translation; no servers needed."""

from __future__ import annotations

import socket

import kafka.errors as kerr
import pytest
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from zkcoord.client import CommitFailedError, Consumer, ConsumerConfig, ConsumerTimeoutError, FencedInstanceError
from zkcoord.client.errors import translate
from zkcoord.config import build_config
from zkcoord.errors import ConfigError, ServiceUnavailableError, UsageError

REQUIRED = dict(coordinators="zkc-1:9301,zkc-2:9302", bootstrap_servers="kafka-1:9092", group_id="billing")


def test_defaults_are_kafkas():
    config = ConsumerConfig(**REQUIRED)
    assert config.daemon_addresses == (("zkc-1", 9301), ("zkc-2", 9302))
    options = config.kafka_options()
    assert options["bootstrap_servers"] == ["kafka-1:9092"]
    assert (options["session_timeout_ms"], options["heartbeat_interval_ms"], options["max_poll_interval_ms"]) == \
        (45_000, 3_000, 300_000)
    assert (options["enable_auto_commit"], options["auto_commit_interval_ms"], options["auto_offset_reset"]) == \
        (True, 5_000, "latest")
    assert options["group_instance_id"] is None
    assert options["partition_assignment_strategy"] == (RangePartitionAssignor,)
    assert config.effective_rebalance_timeout_ms == 300_000
    assert ConsumerConfig(**REQUIRED, rebalance_timeout_ms=60_000).effective_rebalance_timeout_ms == 60_000


def test_environment_and_text_values():
    environ = {"ZKCOORD_COORDINATORS": "a:1", "ZKCOORD_BOOTSTRAP_SERVERS": "b:2", "ZKCOORD_GROUP_ID": "g",
               "ZKCOORD_SESSION_TIMEOUT_MS": "10000", "ZKCOORD_ENABLE_AUTO_COMMIT": "no",
               "ZKCOORD_ASSIGNMENT_STRATEGY": "roundrobin, range", "ZKCOORD_ZOOKEEPER": "ignored:2181"}
    config = build_config({"client_id": "worker-1"}, cls=ConsumerConfig, environ=environ)
    assert (config.coordinators, config.bootstrap_servers, config.group_id, config.client_id) == \
        ("a:1", "b:2", "g", "worker-1")
    assert (config.session_timeout_ms, config.enable_auto_commit) == (10_000, False)
    assert config.kafka_options()["partition_assignment_strategy"] == \
        (RoundRobinPartitionAssignor, RangePartitionAssignor)
    assert ConsumerConfig(**REQUIRED, assignment_strategy="cooperative-sticky").kafka_options()[
        "partition_assignment_strategy"] == (CooperativeStickyAssignor,)


@pytest.mark.parametrize("changes, message", [
    (dict(coordinators=""), "coordinators (--coordinators, ZKCOORD_COORDINATORS) is required"),
    (dict(coordinators="zkc-1"), "coordinators='zkc-1' is not HOST:PORT"),
    (dict(bootstrap_servers=""), "bootstrap_servers (--bootstrap-servers, ZKCOORD_BOOTSTRAP_SERVERS) is required"),
    (dict(group_id=""), "group_id (--group, ZKCOORD_GROUP_ID) is required"),
    (dict(group_id="x" * 250), "is not a valid group id"),
    (dict(group_instance_id="has space"), "group_instance_id='has space' must be"),
    (dict(heartbeat_interval_ms=45_000), "heartbeat_interval_ms=45000 must be lower than session_timeout_ms=45000"),
    (dict(assignment_strategy="fair"), "assignment_strategy fair unknown"),
    (dict(assignment_strategy="range,cooperative-sticky"), "cannot mix cooperative-sticky with eager"),
    (dict(auto_offset_reset="smallest"), "auto_offset_reset='smallest' must be one of earliest, latest, none"),
    (dict(enable_auto_commit="maybe"), "enable_auto_commit='maybe' must be true or false"),
    (dict(max_poll_records=0), "max_poll_records=0 must be at least 1"),
    (dict(group_protocol="modern"), "group_protocol='modern' must be classic or consumer (Kafka's group.protocol)"),
    (dict(group_remote_assignor="range"), "group_remote_assignor='range' cannot be set when group_protocol=classic"),
    (dict(group_protocol="consumer", session_timeout_ms=10_000, heartbeat_interval_ms=1_000),
     "session_timeout_ms, heartbeat_interval_ms cannot be set when group_protocol=consumer (as in Kafka): the "
     "coordinator decides session_timeout_ms: the daemons' group_consumer_session_timeout_ms; "
     "heartbeat_interval_ms: the daemons' group_consumer_heartbeat_interval_ms"),
    (dict(group_protocol="consumer", assignment_strategy="roundrobin"),
     "assignment_strategy: group_remote_assignor, among the daemons' group_consumer_assignors"),
])
def test_invalid_settings_name_the_problem(changes, message):
    with pytest.raises(ConfigError) as caught:
        ConsumerConfig(**{**REQUIRED, **changes})
    assert message in str(caught.value)


def test_the_consumer_protocol_settings():
    config = ConsumerConfig(**REQUIRED, group_protocol="Consumer", group_remote_assignor=" uniform ")
    assert (config.group_protocol, config.group_remote_assignor, config.consumer_protocol) == (
        "consumer", "uniform", True)
    assert ConsumerConfig(**REQUIRED).group_protocol == "classic"
    environ = {"ZKCOORD_COORDINATORS": "a:1", "ZKCOORD_BOOTSTRAP_SERVERS": "b:2", "ZKCOORD_GROUP_ID": "g",
               "ZKCOORD_GROUP_PROTOCOL": "consumer", "ZKCOORD_GROUP_REMOTE_ASSIGNOR": "range"}
    config = build_config({}, cls=ConsumerConfig, environ=environ)
    assert (config.group_protocol, config.group_remote_assignor) == ("consumer", "range")


def test_kafka_errors_are_translated():
    failed = translate(kerr.CommitFailedError("gone"), "commit")
    assert isinstance(failed, CommitFailedError) and failed.retriable and "call poll() to rejoin" in str(failed)
    assert isinstance(translate(kerr.RebalanceInProgressError(), "commit"), CommitFailedError)
    assert isinstance(translate(kerr.KafkaTimeoutError(), "committed"), ConsumerTimeoutError)
    assert isinstance(translate(kerr.KafkaConfigurationError("x"), "start"), ConfigError)
    assert isinstance(translate(kerr.IllegalStateError("x"), "assign"), UsageError)
    assert isinstance(translate(kerr.StaleMemberEpochError(), "commit"), CommitFailedError)
    unreleased = translate(kerr.UnreleasedInstanceIdError("i-1"), "poll")
    assert isinstance(unreleased, FencedInstanceError) and "still held by a member that did not leave" in str(unreleased)
    assert translate(RuntimeError("bug"), "poll") is None


def test_a_consumer_must_be_started():
    with pytest.raises(UsageError, match="call start"):
        Consumer(ConsumerConfig(**REQUIRED)).poll()


def test_no_broker_is_service_unavailable():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    consumer = Consumer(ConsumerConfig(**{**REQUIRED, "bootstrap_servers": f"127.0.0.1:{port}"},
                                       bootstrap_timeout_ms=1_000))
    with pytest.raises(ServiceUnavailableError, match=f"no Kafka broker at 127.0.0.1:{port} answered within 1000 ms"):
        consumer.start()
