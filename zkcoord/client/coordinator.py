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

How it is installed. ``KafkaConsumer`` constructs its coordinator itself;
:class:`ZkcoordKafkaConsumer` replaces it right after construction (before
any group request) and detaches the replaced one from the metadata
listeners. kafka-python's metrics are off: both coordinators would register
the same metric names, and the facade does not expose them.
"""

from __future__ import annotations

import logging

from kafka import KafkaConsumer
from kafka.coordinator.assignors.abstract import RebalanceProtocol
from kafka.coordinator.consumer import ConsumerCoordinator
from kafka.structs import MemberState
from kafka.util import WeakMethod

log = logging.getLogger(__name__)


class ZkcoordCoordinator(ConsumerCoordinator):
    """``ConsumerCoordinator`` that never loses a started join."""

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


class ZkcoordKafkaConsumer(KafkaConsumer):
    """``KafkaConsumer`` whose coordinator is a :class:`ZkcoordCoordinator`.
    Takes ``KafkaConsumer``'s keyword options."""

    def __init__(self, **configs):
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
        self._coordinator = ZkcoordCoordinator(
            self._client, self._subscription, metrics=None,
            assignors=self.config["partition_assignment_strategy"], **self.config)
