"""zkcoord.kafka.offsets without a network: a scripted admin client stands in
for kafka-python's, to pin retries and the translation of Kafka's errors."""

from __future__ import annotations

import types

import kafka.errors as Errors
import pytest
from kafka import TopicPartition
from kafka.cluster import ClusterMetadata
from kafka.structs import OffsetAndMetadata, OffsetAndTimestamp

from zkcoord.errors import AuthorizationError, NotFoundError, ServiceUnavailableError, ZkcoordError
from zkcoord.kafka.offsets import KafkaGroup, KafkaOffsets, LogRange


class ScriptedAdmin:
    """Answers each method from a list: an exception is raised, anything else
    returned. Its ``_manager.cluster`` is kafka-python's own metadata, where
    the client's group coordinators are cached (and forgotten before a retry)."""

    def __init__(self, **script) -> None:
        self.script = {name: list(answers) for name, answers in script.items()}
        self.calls: list[tuple[str, tuple]] = []
        self._manager = types.SimpleNamespace(cluster=ClusterMetadata())

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, args))
            answer = self.script[name].pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer(*args) if callable(answer) else answer
        return call


def offsets_with(admin, timeout_ms: int = 2000) -> KafkaOffsets:
    kafka = KafkaOffsets("k1:9092,k2:9092", request_timeout_ms=timeout_ms)
    kafka._admin = admin  # as start() would, without a cluster
    return kafka


def test_retriable_errors_are_retried_until_an_answer():
    admin = ScriptedAdmin(list_group_offsets=[
        Errors.CoordinatorNotAvailableError("starting"), Errors.CoordinatorLoadInProgressError("loading"),
        {"g": {TopicPartition("t", 0): OffsetAndMetadata(5, "", None),
               TopicPartition("t", 1): OffsetAndMetadata(-1, "", None)}},
    ])
    assert offsets_with(admin).committed_offsets(["g"]) == {"g": {("t", 0): 5}}  # -1 means none
    assert [name for name, _ in admin.calls] == ["list_group_offsets"] * 3


def test_retriable_errors_past_the_deadline_name_the_servers():
    admin = ScriptedAdmin(list_groups=[Errors.KafkaConnectionError("refused")] * 50)
    with pytest.raises(ServiceUnavailableError) as info:
        offsets_with(admin, timeout_ms=1000).list_groups()
    assert str(info.value).startswith("Kafka at k1:9092,k2:9092 did not let us list the consumer groups within 1 s")
    assert "check that the brokers are up and reachable" in str(info.value)


@pytest.mark.parametrize("error, kind, text", [
    (Errors.GroupAuthorizationFailedError("g"), AuthorizationError, "refused to let us list the consumer groups: "
                                                                    "not authorized ([Error 30] "
                                                                    "GroupAuthorizationFailedError: g) for PLAINTEXT"),
    (Errors.UnknownTopicOrPartitionError("t-9"), NotFoundError, "cannot list the consumer groups: Kafka at "
                                                                "k1:9092,k2:9092 does not know a topic or partition"),
    (Errors.IllegalArgumentError("bad"), ZkcoordError, "Kafka at k1:9092,k2:9092 failed to list the consumer groups"),
])
def test_other_errors_are_translated_at_once(error, kind, text):
    admin = ScriptedAdmin(list_groups=[error])
    with pytest.raises(kind) as info:
        offsets_with(admin).list_groups()
    assert type(info.value) is kind and text in str(info.value)
    assert len(admin.calls) == 1


def test_partition_counts_treat_unknown_topics_as_missing_and_retry_leaderless_ones():
    leaderless = [{"name": "t", "error_code": 5, "partitions": []}]
    described = [{"name": "t", "error_code": 0, "partitions": [{}, {}, {}]},
                 {"name": "gone", "error_code": 3, "partitions": []},
                 {"name": "bad name", "error_code": 17, "partitions": []}]
    admin = ScriptedAdmin(describe_topics=[leaderless, described])
    assert offsets_with(admin).partition_counts(["t", "gone", "bad name", "t"]) == {
        "t": 3, "gone": None, "bad name": None}
    denied = ScriptedAdmin(describe_topics=[[{"name": "t", "error_code": 29, "partitions": []}]])
    with pytest.raises(AuthorizationError, match="not authorized .*topic 't'.* for PLAINTEXT"):
        offsets_with(denied).partition_counts(["t"])


def test_log_ranges_pair_earliest_and_latest():
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    admin = ScriptedAdmin(list_partition_offsets=[
        {tp0: OffsetAndTimestamp(0, -1, 0), tp1: OffsetAndTimestamp(20, -1, 0)},
        {tp0: OffsetAndTimestamp(50, -1, 0), tp1: OffsetAndTimestamp(50, -1, 0)},
    ])
    assert offsets_with(admin).log_ranges([("t", 1), ("t", 0)]) == {
        ("t", 0): LogRange(0, 50), ("t", 1): LogRange(20, 50)}


def test_group_states_and_their_errors():
    admin = ScriptedAdmin(describe_groups=[
        {"g": {"error": "[Error 14] CoordinatorLoadInProgressError: ", "group_state": "", "members": []}},
        {"g": {"error": None, "group_state": "Stable", "protocol_type": "consumer",
               "members": [{"member_id": "m2", "client_id": "c", "client_host": "/10.0.0.2"}, {}]},
         "h": {"error": None, "group_state": "Dead", "members": [], "protocol_type": ""}},
    ])
    assert offsets_with(admin).groups(["h", "g"]) == {
        "g": KafkaGroup("Stable", 2, "consumer", (("", "", ""), ("m2", "c", "/10.0.0.2"))),
        "h": KafkaGroup("Dead", 0, "")}
    odd = ScriptedAdmin(describe_groups=[{"g": {"error": "something odd", "group_state": "", "members": []}}])
    with pytest.raises(ZkcoordError, match="failed to describe group\\(s\\) 'g': KafkaError: group 'g': something odd"):
        offsets_with(odd).groups(["g"])


def test_commit_reports_refused_partitions():
    admin = ScriptedAdmin(alter_group_offsets=[
        {TopicPartition("t", 0): Errors.NoError, TopicPartition("t", 1): Errors.UnknownMemberIdError}])
    with pytest.raises(ZkcoordError) as info:
        offsets_with(admin).commit_offsets("g", {("t", 0): 5, ("t", 1): 6})
    assert str(info.value) == ("Kafka at k1:9092,k2:9092 refused offsets of group 'g': t-1 UnknownMemberIdError "
                               "(a group with active members accepts no commits from outside)")
    (name, (group, request)), = admin.calls
    assert (name, group, {tp: oam.offset for tp, oam in request.items()}) == (
        "alter_group_offsets", "g", {TopicPartition("t", 0): 5, TopicPartition("t", 1): 6})
