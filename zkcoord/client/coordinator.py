"""kafka-python's ``KafkaConsumer`` and ``ConsumerCoordinator`` with the
fixes the thin consumer needs; everything else is inherited unchanged.

kafka-python 3.0.12 (and its main branch as of this writing) keeps the
JoinGroup -> SyncGroup task across ``poll()`` calls when a poll's timeout
runs out during a rebalance, so that the next poll waits for the same task
instead of sending a second JoinGroup. Two ways of losing that task follow,
both seen with members polling every 100 ms:

1. When the task has *finished* by the next poll, ``join_group_async`` sees
   ``self._join_task.is_done``, starts a new JoinGroup and throws the
   finished join (and its assignment) away. A leader that rejoins a Stable
   group starts a new rebalance, so the group rebalances forever.
2. When the leader rejoined because partition metadata changed, the
   assignment it computes makes its metadata snapshots equal again, so
   ``need_rejoin()`` turns False while the join is still unfinished: the
   next polls never call ``ensure_active_group`` and the member stays
   REBALANCING, without heartbeats, until the group drops it.

:class:`ZkcoordCoordinator` completes a finished join (with the steps the
base class runs after a join it waited for), and reports a rejoin as needed
until the started one completed.

A third fix is about positions. Under the eager protocol kafka-python
3.0.12 keeps the assignment, with each partition's fetch position, across
JoinGroup (``on_revoked`` is only a notification), and the next assignment
keeps the state of every partition it shares with the old one. A member
that misses a generation during the rebalance (it was stopped, or its
JoinGroup/SyncGroup failed with UNKNOWN_MEMBER_ID and it joined again as a
new member) meanwhile had its partitions consumed and committed further by
another member; given one of them back, it resumed from its own stale
position and committed it, moving the group's committed offset backwards
(found by ``tests/faults``). Kafka's Java consumer clears an eager member's
assignment right after revoking it (``ConsumerCoordinator.onJoinPrepare``),
so after every eager rebalance positions come from the committed offsets;
:class:`ZkcoordCoordinator` does the same (fix 3).

A fourth fix is about how soon a member rejoins. kafka-python learns that
the group is rebalancing on its I/O thread (a heartbeat answered
REBALANCE_IN_PROGRESS, a commit or SyncGroup failing, the leader's metadata
changing) and only records it; the application thread, which sends the
JoinGroup from its ``poll()``, meanwhile waits for a fetch answer (up to
``fetch_max_wait_ms`` at the broker), the end of its poll timeout or the
next heartbeat deadline, or sleeps ``retry_backoff_ms`` when it has nothing
to fetch. Every member of a rebalance thus rejoined up to about one heartbeat
interval late, and the group waits for its last member. :class:`ZkcoordFetcher`
ends that wait as soon as the coordinator asks for a rejoin
(:meth:`ZkcoordCoordinator.rejoin_wakeup`), so ``poll()`` goes on to
rejoin at once; records, positions and everything else are unchanged.

A fifth fix is about committed offsets. kafka-python 3.0.12 keeps each
OffsetFetch's future in a map keyed by the set of partitions asked for, so a
caller whose timeout ran out (a short ``poll()``, ``committed()`` with a
small timeout) finds the same request again on its next try; only a caller
that sees the future done removes it. When every caller gave up, the finished
answer stays, and the next fetch of the same partitions returns it without
asking, however much later: a member given those partitions back after
another member committed further resumed from the old offset and committed
it, rewinding the group. Java's consumer reuses a pending fetch only for the
same partitions in the same generation (``PendingCommittedOffsetRequest``);
:class:`ZkcoordCoordinator` forgets the kept fetches when the generation
(or member id) changed since they were sent (fix 5).

Beyond the fixes, a member learns of a rebalance sooner through the daemon's
rebalance notice (:mod:`zkcoord.client.notice`) when the consumer is built
with ``rebalance_notice=True`` (the thin consumer's default): a thread keeps
a held heartbeat in flight on a connection of its own and calls
``request_rejoin`` when it is answered REBALANCE_IN_PROGRESS, so fix 4 wakes
the application thread one round trip after the rebalance starts instead of
at the member's next heartbeat.

How it is installed. ``KafkaConsumer`` constructs its coordinator and
fetcher itself; :class:`ZkcoordKafkaConsumer` replaces both right after
construction (before any request of theirs) and detaches the replaced
coordinator from the metadata listeners. kafka-python's metrics are off:
both coordinators would register the same metric names, and the facade does
not expose them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from kafka import KafkaConsumer
from kafka import errors as Errors
from kafka.consumer.fetcher import Fetcher
from kafka.coordinator.assignors.abstract import RebalanceProtocol
from kafka.coordinator.consumer import ConsumerCoordinator
from kafka.future import Future
from kafka.protocol.consumer import UNKNOWN_MEMBER_ID
from kafka.structs import MemberState
from kafka.util import WeakMethod

from zkcoord.client.consumer_protocol import ConsumerProtocolCoordinator, ConsumerProtocolSubscription
from zkcoord.client.notice import RebalanceNotice

log = logging.getLogger(__name__)


class ZkcoordCoordinator(ConsumerCoordinator):
    """``ConsumerCoordinator`` that never loses a started join and wakes the
    application thread when a rejoin is needed."""

    def __init__(self, *args, **kwargs):
        self._rejoin_waiters: set[Future] = set()
        self._notice: RebalanceNotice | None = None
        self._offset_fetch_generation: tuple[int, str] | None = None
        super().__init__(*args, **kwargs)

    # -- the rebalance notice ------------------------------------------------------------
    def start_notice(self, consumer_config: dict, daemon_options: dict | None = None) -> RebalanceNotice:
        if self._notice is None:
            self._notice = RebalanceNotice(self, consumer_config, daemon_options)
            self._notice.start()
        return self._notice

    async def _on_join_complete_async(self, generation, member_id, protocol, member_assignment_bytes):
        if self._notice is not None:
            self._notice.poke()  # Stable in a new generation: hold a heartbeat for it
        await super()._on_join_complete_async(generation, member_id, protocol, member_assignment_bytes)

    def close(self, autocommit=True, timeout_ms=None):
        if self._notice is not None:
            self._notice.close()
        super().close(autocommit=autocommit, timeout_ms=timeout_ms)

    # -- fix 4: a rejoin starts at once --------------------------------------------------
    @contextlib.contextmanager
    def rejoin_wakeup(self) -> Iterator[Future | None]:
        """For the application thread's waits between two joins: None if
        this member has to (re)join now, else a future that resolves, on the
        I/O thread, as soon as it has to."""
        future = Future()
        with self._lock:
            self._rejoin_waiters.add(future)
        try:
            # Registered first, then checked: a request in between resolves it.
            yield None if self.need_rejoin() else future
        finally:
            with self._lock:
                self._rejoin_waiters.discard(future)

    def _wake_rejoin_waiters(self) -> None:
        if not self._rejoin_waiters:
            return
        with self._lock:
            waiters = list(self._rejoin_waiters)
        for future in waiters:
            with contextlib.suppress(RuntimeError, ReferenceError):  # the I/O loop is closing
                self._net.call_soon_threadsafe(lambda f=future: f.is_done or f.success(None))

    def request_rejoin(self):
        super().request_rejoin()
        self._wake_rejoin_waiters()

    def reset_generation(self, member_id=UNKNOWN_MEMBER_ID):
        super().reset_generation(member_id)
        self._wake_rejoin_waiters()

    def _handle_metadata_update(self, cluster):
        super()._handle_metadata_update(cluster)
        if self._rejoin_waiters and self.need_rejoin():  # the leader saw the partitions change
            self._wake_rejoin_waiters()

    # -- fixes 1 and 2 ---------------------------------------------------------------------

    def need_rejoin(self):
        if super().need_rejoin():
            return True
        # A join started (on_join_prepare ran) must be completed (fix 2).
        return self.rejoining and self._subscription.partitions_auto_assigned()

    async def join_group_async(self, timeout_ms=None):
        task = self._join_task
        if task is not None and task.is_done and task.succeeded() and self.rejoining:
            self._join_task = None
            log.debug("group %s: completing the join that finished between two polls", self.group_id)
            return await self._complete_join(task.value)
        return await super().join_group_async(timeout_ms)

    # -- fix 3 -----------------------------------------------------------------------------
    async def _on_join_prepare_async(self, generation, member_id, timeout_ms=None):
        try:
            await super()._on_join_prepare_async(generation, member_id, timeout_ms=timeout_ms)
        finally:
            # Eager: what was revoked is gone; positions come from the committed offsets (fix 3).
            if self._rebalance_protocol == RebalanceProtocol.EAGER and self._subscription.partitions_auto_assigned():
                self._subscription.assign_from_subscribed([])

    async def _complete_join(self, assignment_bytes) -> bool:
        # The same steps as the tail of BaseCoordinator.join_group_async.
        with self._lock:
            self.rejoining = False
            self.rejoin_needed = False
            self.state = MemberState.STABLE
            self._enable_heartbeat()
        await self._on_join_complete_async(self._generation.generation_id, self._generation.member_id,
                                           self._generation.protocol, assignment_bytes)
        return True


    # -- fix 5 -----------------------------------------------------------------------------
    async def fetch_committed_offsets_async(self, partitions, timeout_ms=None):
        generation = (self._generation.generation_id, self._generation.member_id)
        if generation != self._offset_fetch_generation:
            # Answers kept from another generation may be stale (fix 5): ask again.
            self._offset_fetch_futures.clear()
            self._offset_fetch_generation = generation
        return await super().fetch_committed_offsets_async(partitions, timeout_ms=timeout_ms)


class ZkcoordFetcher(Fetcher):
    """kafka-python's ``Fetcher`` whose wait for records also ends when the
    coordinator needs a rejoin (fix 4)."""

    def __init__(self, client, subscriptions, *, coordinator: ZkcoordCoordinator, **configs):
        super().__init__(client, subscriptions, **configs)
        self._coordinator = coordinator

    def fetch_records(self, max_records=None, update_offsets=True, timeout_ms=None):
        """``Fetcher.fetch_records`` of kafka-python 3.0.12 (drain what is
        buffered, send the next fetches, wait for an answer up to
        ``timeout_ms``), with two changes: the wait also ends when a rejoin
        is needed, and when nothing is in flight (``idle``) it waits here
        for up to ``retry_backoff_ms``, as long as ``KafkaConsumer`` would
        sleep, instead of returning ``idle`` for the caller to sleep
        through a rejoin request."""
        records, partial = self.fetched_records(max_records, update_offsets=update_offsets)
        if not partial:
            self.send_fetches()
        if records:
            return records, False
        waited_on = list(self._fetch_futures)
        if self._reset_task is not None and not self._reset_task.is_done:
            waited_on.append(self._reset_task)
        if timeout_ms is not None and timeout_ms <= 0:
            # No wait; the caller does not sleep either.
            if waited_on:
                return self._wait(records, waited_on, max_records, update_offsets, timeout_ms)
            return records, True
        if not waited_on:
            backoff_ms = self.config["retry_backoff_ms"]
            timeout_ms = backoff_ms if timeout_ms is None else min(timeout_ms, backoff_ms)
        with self._coordinator.rejoin_wakeup() as rejoin:
            if rejoin is None:
                return records, False  # back to poll(), which rejoins
            return self._wait(records, waited_on + [rejoin], max_records, update_offsets, timeout_ms)

    def _wait(self, records, waited_on, max_records, update_offsets, timeout_ms):
        wakeup = Future()

        def wake(_):
            if not wakeup.is_done:
                wakeup.success(None)

        for future in waited_on:
            future.add_both(wake)
        try:
            self._net.run(self._manager.wait_for, wakeup, timeout_ms)
        except Errors.KafkaTimeoutError:
            pass
        records, _ = self.fetched_records(max_records, update_offsets=update_offsets)
        return records, False


class ZkcoordKafkaConsumer(KafkaConsumer):
    """``KafkaConsumer`` whose coordinator is a :class:`ZkcoordCoordinator`
    (``group_protocol="consumer"``: a
    :class:`~zkcoord.client.consumer_protocol.ConsumerProtocolCoordinator`,
    with ``server_assignor`` and ``rebalance_timeout_ms``) and whose fetcher
    a :class:`ZkcoordFetcher`. Takes ``KafkaConsumer``'s keyword options;
    ``daemon_options``: the daemons' own login settings (kafka-python's
    names) when they differ from the brokers', for the rebalance notice's
    connection (classic protocol only: the consumer protocol has nothing to hold)."""

    def __init__(self, *, rebalance_notice: bool = False, daemon_options: dict | None = None,
                 group_protocol: str = "classic", server_assignor: str | None = None,
                 rebalance_timeout_ms: int | None = None, **configs):
        try:
            super().__init__(**configs, metrics_enabled=False)
        except BaseException:
            # kafka-python starts its I/O thread before it bootstraps.
            client = getattr(self, "_client", None)
            if client is not None:
                client.close()
            raise
        replaced = self._coordinator
        self._cluster.remove_listener(WeakMethod(replaced._handle_metadata_update))
        if group_protocol == "consumer":
            self._subscription = ConsumerProtocolSubscription(self.config["auto_offset_reset"])
            self._coordinator = ConsumerProtocolCoordinator(
                self._client, self._subscription, metrics=None, assignors=self.config["partition_assignment_strategy"],
                server_assignor=server_assignor, rebalance_timeout_ms=rebalance_timeout_ms, **self.config)
        else:
            self._coordinator = ZkcoordCoordinator(
                self._client, self._subscription, metrics=None,
                assignors=self.config["partition_assignment_strategy"], **self.config)
        self._fetcher = ZkcoordFetcher(self._client, self._subscription, coordinator=self._coordinator,
                                       metrics=None, **self.config)
        if rebalance_notice and group_protocol == "classic":
            self._coordinator.start_notice(self.config, daemon_options)

    def unsubscribe(self):
        """kafka-python's, except that a consumer-protocol member revokes and
        leaves before its subscription is dropped (Kafka's ``unsubscribe``)."""
        if not isinstance(self._coordinator, ConsumerProtocolCoordinator):
            return super().unsubscribe()
        self._coordinator.maybe_auto_commit_offsets_now()
        try:
            if self._subscription.partitions_auto_assigned():
                self._coordinator.leave_group()
        finally:
            self._subscription.unsubscribe()
            self._cluster.need_all_topic_metadata = False
            self._cluster.set_topics([])
            self._iterator = None
