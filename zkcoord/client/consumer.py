"""The thin consumer: :class:`Consumer`, a facade over kafka-python's
``KafkaConsumer`` whose group coordinator is a zkcoord daemon.

Owns the consumer's public API, the translation of kafka-python's
exceptions (:mod:`zkcoord.client.errors`) and the bridge that runs a
:class:`RebalanceListener`. Fetching, offset resets, the group protocol,
heartbeats and assignors are kafka-python's; how group requests reach the
daemons is :mod:`zkcoord.client.network`.

Threads. One application thread uses a Consumer. kafka-python runs its
network I/O, the heartbeats and the max-poll-interval check on a background
thread of its own, so slow processing between two ``poll()`` calls does not
expire the session (only ``max_poll_interval_ms`` without ``poll()`` makes
the consumer leave the group). Listener callbacks run on a helper thread
while the ``poll()`` or ``close()`` that triggered them waits; they may call
``commit()``, ``committed()``, ``position()`` and ``seek()``. With the
consumer protocol (:mod:`zkcoord.client.consumer_protocol`) they run on the
thread of that ``poll()`` or ``close()`` itself, with the same freedom.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener, ConsumerRebalanceListener
from kafka.future import Future as KafkaFuture
from kafka.structs import MemberState, OffsetAndMetadata, TopicPartition

from zkcoord.client.config import ConsumerConfig
from zkcoord.client.coordinator import ZkcoordKafkaConsumer
from zkcoord.client.errors import ConsumerTimeoutError, translate
from zkcoord.client.network import client_factory
from zkcoord.errors import ServiceUnavailableError, UsageError
from zkcoord.kafka.login import check_login

log = logging.getLogger(__name__)

Offsets = Mapping[TopicPartition, "int | tuple[int, str] | OffsetAndMetadata"]
DAEMON_LOGIN_CHECK_S = 5.0  # how long start() waits for a daemon to take the login before leaving it to poll()
_STATES = {MemberState.STABLE: "stable", MemberState.REBALANCING: "rebalancing", MemberState.UNJOINED: "unjoined"}


class RebalanceListener:
    """Override the callbacks you need; each gets a frozenset of partitions.

    * ``on_revoked``: before a rebalance (and on ``close()``) for what this
      member gives up; the last chance to ``commit()`` them.
    * ``on_assigned``: after a rebalance, what this member now owns (under
      cooperative-sticky: only what it gained).
    * ``on_lost``: the member was dropped from the group (session expired,
      max poll interval exceeded, fenced); the partitions may already belong
      to another member, so committing them would fail. By default it calls
      ``on_revoked``, as Kafka's Java listener does.
    """

    def on_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        pass

    def on_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        pass

    def on_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.on_revoked(partitions)


@dataclass(frozen=True)
class Membership:
    """This consumer's place in its group: ``state`` is ``stable``,
    ``rebalancing`` or ``unjoined``; generation -1 before the first join."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    state: str


class Consumer:
    """A group member whose coordinator is a zkcoord daemon.

    ``start()`` (or ``with Consumer(config) as consumer:``) connects to the
    Kafka brokers; the group is joined by the first ``poll()`` after
    ``subscribe()``. ``close()`` commits (with auto commit on), calls
    ``on_revoked`` and leaves the group (a static member, with
    ``group_instance_id``, stays until its session times out, as in Kafka;
    with the consumer protocol it leaves with epoch -2, its partitions kept
    for its return).
    """

    def __init__(self, config: ConsumerConfig):
        self.config = config
        self._kafka: ZkcoordKafkaConsumer | None = None
        self._closed = False
        self._listener_threads: ThreadPoolExecutor | None = None

    # -- life cycle ----------------------------------------------------------------
    def start(self) -> "Consumer":
        """Connect to the brokers. With security settings, the brokers' login and
        the daemons' are tried first (AuthenticationError at once, not after
        kafka-python's bootstrap time-out; :mod:`zkcoord.kafka.login`)."""
        if self._kafka is not None:
            return self
        self._check_logins()
        config = self.config
        coordinator = config.coordinator_security
        daemon_options = dict(coordinator.kafka_python_options()) if coordinator is not None else None
        factory = client_factory(config.daemon_addresses, config.effective_rebalance_timeout_ms, daemon_options)
        try:
            self._kafka = ZkcoordKafkaConsumer(
                **config.kafka_options(), kafka_client=factory, rebalance_notice=config.rebalance_notice,
                daemon_options=daemon_options, group_protocol=config.group_protocol,
                server_assignor=config.group_remote_assignor or None,
                rebalance_timeout_ms=config.effective_rebalance_timeout_ms)
        except Exception as exc:
            error = translate(exc, "connecting to Kafka", self._who())
            if isinstance(error, ConsumerTimeoutError):
                error = ServiceUnavailableError(
                    f"no Kafka broker at {self.config.bootstrap_servers} answered within "
                    f"{self.config.bootstrap_timeout_ms} ms; check bootstrap_servers and that Kafka runs")
            if error is None:
                raise
            raise error from exc
        self._listener_threads = ThreadPoolExecutor(1, thread_name_prefix=f"zkcoord-listener-{self.config.client_id}")
        return self

    def _who(self) -> str:
        """The brokers' and daemons' logins, for messages (never a secret)."""
        brokers, daemons = self.config.security, self.config.daemon_security
        if brokers is None and daemons is None:
            return ""
        text = f"brokers: {brokers.describe() if brokers else 'PLAINTEXT'}"
        return text if daemons is brokers else f"{text}; daemons: {daemons.describe() if daemons else 'PLAINTEXT'}"

    def _check_logins(self) -> None:
        config = self.config
        check_login(config.bootstrap_servers, config.security, timeout_s=config.bootstrap_timeout_ms / 1000,
                    client_id=config.client_id)
        # Daemons that do not answer now may be restarting: the group lookup retries them (no error here).
        with contextlib.suppress(ServiceUnavailableError):
            check_login(config.coordinators, config.daemon_security, what="the zkcoord daemons",
                        timeout_s=min(config.bootstrap_timeout_ms / 1000, DAEMON_LOGIN_CHECK_S),
                        client_id=config.client_id)

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Commit (if auto commit is on and ``autocommit``), revoke, leave the
        group, close connections. Idempotent."""
        if self._kafka is None or self._closed:
            return
        try:  # on_revoked runs in here and may still commit: not closed yet
            with self._boundary("close"):
                self._kafka.close(autocommit=autocommit, timeout_ms=timeout_ms)
        except Exception:
            # kafka-python skips closing its connections when leaving failed.
            with contextlib.suppress(Exception):
                self._kafka._client.close()
            raise
        finally:
            self._closed = True
            self._listener_threads.shutdown(wait=False)

    def __enter__(self) -> "Consumer":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        # After an exception the last records may be unprocessed: no auto commit.
        self.close(autocommit=exc_type is None)

    # -- subscription ----------------------------------------------------------------
    def subscribe(self, topics: Iterable[str] | str = (), pattern: str | None = None,
                  listener: RebalanceListener | None = None) -> None:
        """Join the group for ``topics`` or every topic matching ``pattern``
        (a regular expression); replaces an earlier subscription."""
        kafka = self._started()
        topics = [topics] if isinstance(topics, str) else list(topics)
        bridge = None
        if listener is not None:
            # The consumer protocol calls listeners on this thread already (zkcoord.client.consumer_protocol).
            bridge = _DirectListener(listener) if self.config.consumer_protocol else _ListenerBridge(listener, self)
        with self._boundary("subscribe"):
            kafka.subscribe(topics=topics, pattern=pattern, listener=bridge)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions, without group membership;
        offsets are still committed to and fetched from zkcoord."""
        with self._boundary("assign"):
            self._started().assign([TopicPartition(*tp) for tp in partitions])

    def unsubscribe(self) -> None:
        with self._boundary("unsubscribe"):
            self._started().unsubscribe()

    def subscription(self) -> frozenset[str]:
        return frozenset(self._started().subscription() or ())

    def assignment(self) -> frozenset[TopicPartition]:
        return frozenset(self._started().assignment())

    # -- consuming ---------------------------------------------------------------------
    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list:
        """Records fetched from the brokers for this member's partitions, at
        most ``max_records`` (default ``max_poll_records``), waiting up to
        ``timeout_ms`` for some. Also joins, rejoins and auto-commits; raises
        here what failed in the background (e.g. a rebalance listener)."""
        kafka = self._started()
        with self._boundary("poll"):
            batches = kafka.poll(timeout_ms=timeout_ms, max_records=max_records)
        return [record for records in batches.values() for record in records]

    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int | None:
        """The offset of the next record this consumer will fetch."""
        with self._boundary("position"):
            return self._started().position(TopicPartition(*partition), timeout_ms=timeout_ms)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        with self._boundary("seek"):
            self._started().seek(TopicPartition(*partition), offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        with self._boundary("seek_to_beginning"):
            self._started().seek_to_beginning(*partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        with self._boundary("seek_to_end"):
            self._started().seek_to_end(*partitions)

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning records of these partitions (no rebalance)."""
        with self._boundary("pause"):
            self._started().pause(*partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        with self._boundary("resume"):
            self._started().resume(*partitions)

    def paused(self) -> frozenset[TopicPartition]:
        return frozenset(self._started().paused())

    # -- offsets -------------------------------------------------------------------------
    def commit(self, offsets: Offsets | None = None, timeout_ms: int | None = None) -> None:
        """Commit, and wait: the positions of everything consumed (``None``),
        or ``{partition: offset | (offset, metadata) | OffsetAndMetadata}``.
        The offset is the next record to read (last processed + 1)."""
        kafka = self._started()
        with self._boundary("commit"):
            kafka.commit(_offsets(offsets), timeout_ms=timeout_ms)

    def commit_async(self, offsets: Offsets | None = None,
                     callback: Callable[[dict, Exception | None], None] | None = None) -> None:
        """Commit without waiting. ``callback(offsets, error_or_None)`` runs on
        this thread during a later ``poll()``, ``commit()`` or ``commit_async()``."""
        kafka = self._started()

        def done(committed, result):
            if callback is None:
                if isinstance(result, BaseException):
                    log.warning("asynchronous commit failed: %s", result)
                return
            error = None
            if isinstance(result, BaseException):
                error = translate(result, "commit_async") or result
            callback(committed, error)

        with self._boundary("commit_async"):
            kafka.commit_async(_offsets(offsets), callback=done)

    def committed(self, partitions: TopicPartition | Iterable[TopicPartition], timeout_ms: int | None = None):
        """The committed offset of one partition (``OffsetAndMetadata`` or
        None), or ``{partition: OffsetAndMetadata}`` of those that have one."""
        kafka = self._started()
        single = isinstance(partitions, TopicPartition)
        wanted = [partitions] if single else [TopicPartition(*tp) for tp in partitions]
        found = {}
        with self._boundary("committed"):
            for tp in wanted:
                offset = kafka.committed(tp, metadata=True, timeout_ms=timeout_ms)
                if offset is not None:
                    found[tp] = offset
        return found.get(partitions) if single else found

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        with self._boundary("beginning_offsets"):
            return self._started().beginning_offsets(list(partitions))

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        with self._boundary("end_offsets"):
            return self._started().end_offsets(list(partitions))

    def partitions_for(self, topic: str) -> frozenset[int]:
        with self._boundary("partitions_for"):
            return frozenset(self._started().partitions_for_topic(topic))

    # -- the group ---------------------------------------------------------------------------
    def membership(self) -> Membership:
        meta = self._started().group_metadata()
        return Membership(meta.group_id, meta.generation_id, meta.member_id, meta.group_instance_id,
                          _STATES.get(meta.state, str(meta.state)))

    def coordinator_node_id(self) -> int | None:
        """The node id of the zkcoord daemon serving this group now, if known."""
        node = self._started()._coordinator.coordinator_id  # "coordinator-<daemon node id>"
        if isinstance(node, str) and node.startswith("coordinator-"):
            return int(node.rsplit("-", 1)[1])
        return None

    # -- internals ---------------------------------------------------------------------------
    def _started(self) -> ZkcoordKafkaConsumer:
        if self._kafka is None:
            raise UsageError("the consumer is not started: call start() or use `with Consumer(config) as c:`")
        if self._closed:
            raise UsageError("the consumer is closed; create a new one")
        return self._kafka

    @contextlib.contextmanager
    def _boundary(self, doing: str):
        try:
            yield
        except Exception as exc:
            error = translate(exc, doing, self._who())
            if error is None or error is exc:
                raise
            raise error from exc

    def _off_loop(self, func, partitions) -> KafkaFuture:
        """Run ``func(partitions)`` on the listener thread; the returned
        future resolves on kafka-python's I/O thread, which keeps running
        (heartbeats, the commits the listener makes) meanwhile."""
        future = KafkaFuture()
        net = self._kafka._net

        def work():
            try:
                func(partitions)
            except Exception as exc:  # handed to kafka-python, raised by poll()
                net.call_soon_threadsafe(lambda error=exc: future.failure(error))
            else:
                net.call_soon_threadsafe(lambda: future.success(None))

        self._listener_threads.submit(work)
        return future


class _ListenerBridge(AsyncConsumerRebalanceListener):
    """kafka-python's async listener, calling a :class:`RebalanceListener` off
    the I/O thread (a blocking call there would stop the heartbeats, and a
    ``commit()`` from there is refused by kafka-python)."""

    def __init__(self, listener: RebalanceListener, consumer: Consumer):
        self._listener = listener
        self._consumer = consumer

    async def on_partitions_revoked(self, revoked):
        await self._call("on_revoked", revoked)

    async def on_partitions_assigned(self, assigned):
        await self._call("on_assigned", assigned)

    async def on_partitions_lost(self, lost):
        await self._call("on_lost", lost)

    async def _call(self, name: str, partitions) -> None:
        method = getattr(self._listener, name, None)
        if method is None:
            return
        await self._consumer._off_loop(method, frozenset(partitions))


class _DirectListener(ConsumerRebalanceListener):
    """A :class:`RebalanceListener` as kafka-python's listener, called on the
    application's thread (the consumer protocol's ``poll()`` and ``close()``)."""

    def __init__(self, listener: RebalanceListener):
        self._listener = listener

    def on_partitions_revoked(self, revoked):
        self._call("on_revoked", revoked)

    def on_partitions_assigned(self, assigned):
        self._call("on_assigned", assigned)

    def on_partitions_lost(self, lost):
        self._call("on_lost", lost)

    def _call(self, name: str, partitions) -> None:
        method = getattr(self._listener, name, None)
        if method is not None:
            method(frozenset(partitions))


def _offsets(offsets: Offsets | None) -> dict[TopicPartition, OffsetAndMetadata] | None:
    if offsets is None:
        return None
    normalised = {}
    for tp, value in offsets.items():
        tp = TopicPartition(*tp)
        if isinstance(value, OffsetAndMetadata):
            normalised[tp] = value
        elif isinstance(value, tuple):
            offset, metadata = value
            normalised[tp] = OffsetAndMetadata(int(offset), metadata or "", -1)
        else:
            normalised[tp] = OffsetAndMetadata(int(value), "", -1)
    return normalised
