"""A kafka-python admin client's cached group coordinators
(zkcoord/kafka/admin_client.py): forgotten before each retry, so a call
follows the group's coordinator when it moves. Without a broker: kafka-python's
own ``ClusterMetadata`` holds the cache, and a scripted admin client answers
as a broker does to a request sent to the wrong coordinator. The end to end
case, a coordinator broker killed under a forwarder, is
``tests/faults/test_fault_coordinator_moves.py``."""

from __future__ import annotations

import types

import kafka.errors as Errors
import pytest
from kafka.cluster import ClusterMetadata
from kafka.protocol.metadata import CoordinatorType

from zkcoord.errors import ServiceUnavailableError
from zkcoord.kafka.admin_client import forget_coordinators
from zkcoord.kafka.forwarder import KafkaGroupOffsets

T0 = ("t", 0)


def coordinator_answer(node_id: int):
    """What FindCoordinator v0-v3 answers, as ``ClusterMetadata.add_coordinator`` reads it."""
    return types.SimpleNamespace(error_code=0, error_message=None, node_id=node_id, host="127.0.0.1",
                                 port=9000 + node_id)


class MovedCoordinatorAdmin:
    """Looks the coordinator up only when the cache has none (as
    kafka-python 3.0's ``_find_coordinator_ids`` does); the broker it finds
    is ``now``; a request sent to another broker gets NOT_COORDINATOR for
    every partition, as Kafka answers it."""

    def __init__(self, cached: int, now: int) -> None:
        self.cluster = ClusterMetadata()
        self._manager = types.SimpleNamespace(cluster=self.cluster)
        self.cluster.add_coordinator(coordinator_answer(cached), CoordinatorType.GROUP, "g", synthesize_node_id=False)
        self.now = now
        self.refusing = False  # every broker answers NOT_COORDINATOR (a partition with no leader, say)
        self.sent_to: list[int] = []
        self.lookups = 0

    def alter_group_offsets(self, group, request):
        node = self.cluster.get_coordinator(group)
        if node is None:
            self.lookups += 1
            node = self.cluster.add_coordinator(coordinator_answer(self.now), CoordinatorType.GROUP, group,
                                                synthesize_node_id=False)
        self.sent_to.append(node)
        error = Errors.NoError if node == self.now and not self.refusing else Errors.NotCoordinatorError
        return {tp: error for tp in request}


def offsets_with(admin) -> KafkaGroupOffsets:
    kafka = KafkaGroupOffsets("k1:9092", request_timeout_ms=2_000)
    kafka._admin = admin  # as start() would, without a cluster
    return kafka


def test_a_commit_follows_its_groups_coordinator_when_it_moved():
    """The cache says broker 2; the group's coordinator is broker 0 now.
    The first try goes to 2 and gets NOT_COORDINATOR; the retry looks the
    coordinator up again and is stored by 0 (without forgetting, every try
    until the deadline went to 2)."""
    admin = MovedCoordinatorAdmin(cached=2, now=0)
    assert offsets_with(admin).commit_with_metadata("g", {T0: (5, "")}) == {}
    assert admin.sent_to == [2, 0] and admin.lookups == 1


def test_a_coordinator_that_never_answers_still_ends_at_the_deadline():
    """Forgetting is not a loop of its own: a group whose every lookup
    finds a broker refusing it ends with ServiceUnavailableError."""
    admin = MovedCoordinatorAdmin(cached=2, now=0)
    admin.refusing = True
    with pytest.raises(ServiceUnavailableError, match="NotCoordinator"):
        offsets_with(admin).commit_with_metadata("g", {T0: (5, "")})
    assert admin.lookups >= 2


def test_forget_coordinators_empties_kafka_pythons_own_cache():
    """What the function touches is where kafka-python 3.0 keeps the cache:
    an upgrade that moves it fails here, not in a fault run."""
    admin = MovedCoordinatorAdmin(cached=2, now=0)
    assert admin.cluster.get_coordinator("g") == 2
    forget_coordinators(admin)
    assert admin.cluster.get_coordinator("g") is None
