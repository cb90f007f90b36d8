"""The thin consumer: consume Kafka topics as a group whose coordinator is a
zkcoord daemon. It has no ZooKeeper logic of its own.

Design: reuse kafka-python 3.x, change only where group requests go.

kafka-python's ``KafkaConsumer`` already has everything a consumer needs: the
fetcher, offset resets, the group protocol (``ConsumerCoordinator``: join,
sync, heartbeats on a background thread, max poll interval, commits, the
rebalance listener, static membership) and the assignors (range, roundrobin,
sticky, cooperative-sticky). What it cannot do by itself is talk to a group
coordinator that is not a broker: it keeps one cluster view, sends
FindCoordinator to a broker and connects to the node id the answer names.

Two options were weighed:

* a second client for the coordinator side, injected into a
  ``ConsumerCoordinator`` subclass. ``KafkaConsumer`` builds its coordinator
  itself, so that needs a ``KafkaConsumer`` subclass that replaces the
  coordinator after construction (double metrics registration, a second
  metadata listener to undo) and overrides of the lookup and the send path;
* a connection manager that sends FindCoordinator to a daemon. The daemon's
  answer (node id, host, port of the owning daemon) is registered by
  kafka-python's own code as node ``coordinator-<id>``; every other group
  request already goes to that node, and Metadata/Fetch/ListOffsets only ever
  go to brokers from Metadata responses, which never list a daemon.

We took the second: :class:`~zkcoord.client.network.ZkcoordConnectionManager`
(one overridden ``send``, one cluster subclass so the daemon addresses can be
connected to), plugged in through ``KafkaConsumer``'s documented
``kafka_client`` option. Nothing of kafka-python is patched or copied.
Re-discovery on NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a dropped
connection is kafka-python's (the coordinator is marked dead, the next lookup
asks the next reachable daemon) and does not stop fetching.

Ours are :class:`Consumer` (a facade with the API below, errors translated
into :mod:`zkcoord.client.errors`), :class:`ConsumerConfig` (typed settings),
the :class:`RebalanceListener` bridge (callbacks run off kafka-python's I/O
thread so they may commit), and the rebalance timeout, which kafka-python
ties to ``max_poll_interval_ms`` and we stamp on JoinGroup when set.

Example::

    config = ConsumerConfig(coordinators="zkc-1:9301,zkc-2:9302",
                            bootstrap_servers="kafka-1:9092", group_id="billing")
    with Consumer(config) as consumer:
        consumer.subscribe(["orders"])
        while True:
            for record in consumer.poll(timeout_ms=1000):
                handle(record)
"""

from kafka.consumer.fetcher import ConsumerRecord
from kafka.structs import OffsetAndMetadata, TopicPartition

from zkcoord.client.config import ConsumerConfig
from zkcoord.client.consumer import Consumer, Membership, RebalanceListener
from zkcoord.client.errors import (
    CommitFailedError,
    ConsumerError,
    ConsumerTimeoutError,
    FencedInstanceError,
    RebalanceListenerError,
)

__all__ = [
    "Consumer", "ConsumerConfig", "RebalanceListener", "Membership", "TopicPartition",
    "OffsetAndMetadata", "ConsumerRecord", "ConsumerError", "CommitFailedError",
    "FencedInstanceError", "RebalanceListenerError", "ConsumerTimeoutError",
]
