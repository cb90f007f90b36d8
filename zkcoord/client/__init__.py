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

* a second client (connection manager and cluster view of the daemons)
  injected into a ``ConsumerCoordinator`` subclass. The coordinator takes its
  client, manager and cluster view from one client and registers the
  coordinator node in the *broker* cluster view, so the lookup target, the
  registration of the answer and the client/manager used for every group
  request would all have to be overridden, and ``KafkaConsumer`` (which
  builds its coordinator itself) subclassed to install it;
* a connection manager that sends FindCoordinator to a daemon. The daemon's
  answer (node id, host, port of the owning daemon) is registered by
  kafka-python's own code as node ``coordinator-<id>``; every other group
  request already goes to that node, and Metadata/Fetch/ListOffsets only ever
  go to brokers from Metadata responses, which never list a daemon.

We took the second: :class:`~zkcoord.client.network.ZkcoordConnectionManager`
(one overridden ``send``, one cluster subclass so the daemon addresses can be
connected to), plugged in through ``KafkaConsumer``'s documented
``kafka_client`` option. Re-discovery on NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE or a dropped connection is kafka-python's (the
coordinator is marked dead, the next lookup asks the next reachable daemon)
and does not stop fetching.

We did subclass the coordinator after all, for another reason: kafka-python
3.0.12 loses a JoinGroup/SyncGroup round that finishes between two
``poll()`` calls, which makes groups polled with short timeouts rebalance
forever or stall (:mod:`zkcoord.client.coordinator` explains both bugs).
That subclass overrides two methods and touches nothing of the routing.

Ours are :class:`Consumer` (a facade with the API below, errors translated
into :mod:`zkcoord.client.errors`), :class:`ConsumerConfig` (typed settings),
the :class:`RebalanceListener` bridge (callbacks run off kafka-python's I/O
thread so they may commit), and the rebalance timeout, which kafka-python
ties to ``max_poll_interval_ms`` and the manager stamps on JoinGroup.

KIP-848's consumer group protocol (``group_protocol="consumer"``) replaces
the group membership only: kafka-python has no client of it, so
:mod:`zkcoord.client.membership` is the member's state machine (pure, after
Kafka 4.4's Java consumer) and :mod:`zkcoord.client.consumer_protocol` the
I/O around it, a ``ConsumerCoordinator`` subclass installed in place of
kafka-python's; fetching, offsets and the routing above are unchanged.

Modules: ``config`` (settings), ``network`` (where requests go),
``coordinator`` (the join fixes), ``membership``, ``member_values`` and ``consumer_protocol``
(the consumer protocol), ``consumer`` (the facade), ``errors``.

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
