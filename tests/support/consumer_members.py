"""KIP-848 members for tests: ConsumerGroupHeartbeat on the wire, as a
client does it, one request at a time, and what each member holds.

A :class:`ConsumerMember` keeps its member id and epoch and the partitions
it owns (by topic id, Kafka's text form). :meth:`heartbeat` reports what it
owns and takes the coordinator's answer the way Kafka's consumer does: an
assignment replaces what it owns at once (revoked partitions are released,
new ones taken), and the next heartbeat says so. A member can be held back
(not heartbeating) to play a slow revocation. NOT_COORDINATOR and friends
make it look the coordinator up again (tests/support/wire.py).

:func:`no_partition_twice` is the invariant the tests check after every
step: no partition is owned by two members at once.
"""

from __future__ import annotations

import uuid

from tests.support.wire import coordinator_client
from zkcoord.schemas import ConsumerGroupHeartbeatRequest
from zkcoord.topic_ids import topic_id_text, topic_id_uuid

NOT_READY = frozenset({14, 15, 16})  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def new_member_id() -> str:
    return topic_id_text(uuid.uuid4()).replace("-", "A")


class ConsumerMember:
    def __init__(self, addresses, group: str, topics: list[str], *, instance_id: str | None = None,
                 rebalance_timeout_ms: int = 30_000, assignor: str | None = None, client_id: str = "kip848-test"):
        self.addresses, self.group, self.topics = addresses, group, topics
        self.instance_id, self.rebalance_timeout_ms, self.assignor = instance_id, rebalance_timeout_ms, assignor
        self.client_id = client_id
        self.member_id = new_member_id()
        self.epoch = 0
        self.owned: dict[str, frozenset[int]] = {}
        self.errors: list[int] = []
        self._client = None

    async def _connection(self):
        if self._client is None:
            self._client = await coordinator_client(self.addresses, self.group, client_id=self.client_id)
        return self._client

    async def heartbeat(self, version: int = 1):
        """One heartbeat; returns the response (after following the
        coordinator when it moved: the request is sent again)."""
        while True:
            request = ConsumerGroupHeartbeatRequest(
                version=version, group_id=self.group, member_id=self.member_id, member_epoch=self.epoch,
                instance_id=self.instance_id, rack_id=None,
                rebalance_timeout_ms=self.rebalance_timeout_ms if self.epoch == 0 else -1,
                subscribed_topic_names=list(self.topics) if self.epoch == 0 else None,
                server_assignor=self.assignor if self.epoch == 0 else None,
                topic_partitions=[ConsumerGroupHeartbeatRequest.TopicPartitions(
                    topic_id=topic_id_uuid(t), partitions=sorted(p)) for t, p in self.owned.items()])
            try:
                client = await self._connection()
                response = await client.call(request)
            except (ConnectionError, OSError):
                await self.close()
                continue
            if response.error_code in NOT_READY:
                await self.close()
                continue
            self.errors.append(response.error_code)
            if response.error_code == 0:
                self.epoch = response.member_epoch
                if response.assignment is not None:
                    self.owned = {topic_id_text(t.topic_id): frozenset(t.partitions)
                                  for t in response.assignment.topic_partitions if t.partitions}
            return response

    async def leave(self):
        self.epoch = -1
        response = await self.heartbeat()
        self.owned = {}
        await self.close()
        return response

    def partitions(self) -> set[tuple[str, int]]:
        return {(t, p) for t, parts in self.owned.items() for p in parts}

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


def no_partition_twice(members) -> None:
    seen: dict[tuple[str, int], str] = {}
    for member in members:
        for tp in member.partitions():
            assert tp not in seen, f"partition {tp} owned by {seen[tp]} and {member.member_id} at once"
            seen[tp] = member.member_id
