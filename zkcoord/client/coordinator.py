"""kafka-python's ``KafkaConsumer`` and ``ConsumerCoordinator`` with one fix
each thin consumer needs; everything else is inherited unchanged.

The fix. In kafka-python 3.0.12 (and its main branch as of this writing),
``BaseCoordinator.join_group_async`` keeps the JoinGroup -> SyncGroup task
across ``poll()`` calls when a poll's timeout runs out during a rebalance, so
the next poll can wait for it. But when that task has *finished* by the next
poll, the check ``self._join_task.is_done`` makes it start a new JoinGroup
and throws the finished join (and its assignment) away. A leader that rejoins
a Stable group starts a new rebalance, so a group whose members poll with
short timeouts rebalances forever (seen with three members polling every
100 ms). :class:`ZkcoordCoordinator` completes a finished join instead, with
the same steps the base class runs after a join it waited for.

How it is installed. ``KafkaConsumer`` constructs its coordinator itself;
:class:`ZkcoordKafkaConsumer` replaces it right after construction (before
any group request) and detaches the replaced one from the metadata
listeners. kafka-python's metrics are off: both coordinators would register
the same metric names, and the facade does not expose them.
"""

from __future__ import annotations

import logging

from kafka import KafkaConsumer
from kafka.coordinator.consumer import ConsumerCoordinator
from kafka.structs import MemberState
from kafka.util import WeakMethod

log = logging.getLogger(__name__)


class ZkcoordCoordinator(ConsumerCoordinator):
    """``ConsumerCoordinator`` that never discards a finished join."""

    async def join_group_async(self, timeout_ms=None):
        task = self._join_task
        if task is not None and task.is_done and task.succeeded() and self.rejoining:
            self._join_task = None
            log.debug("group %s: completing the join that finished between two polls", self.group_id)
            return await self._complete_join(task.value)
        return await super().join_group_async(timeout_ms)

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
        super().__init__(**configs, metrics_enabled=False)
        replaced = self._coordinator
        self._cluster.remove_listener(WeakMethod(replaced._handle_metadata_update))
        self._coordinator = ZkcoordCoordinator(
            self._client, self._subscription, metrics=None,
            assignors=self.config["partition_assignment_strategy"], **self.config)
