"""Classic group members that send what Kafka 3.9's Java consumer sends,
for tests of large groups.

This module owns the payloads, in the Java consumer's ConsumerProtocol
format (encoded by kafka-python's classes of the same messages): a
Subscription v3 (sorted topics, the cooperative-sticky assignor's user data
= its generation, the owned partitions, the generation, no rack) and an
Assignment v3; a leader's assignment dealt at random (``seed``): the least
compressible shape a group's stored state takes; and :class:`JavaMember`, a
:class:`tests.support.members.Member` whose JoinGroup carries such a
subscription and whose leader sends such assignments.
"""

from __future__ import annotations

import random
import struct

from kafka.protocol.consumer.group import JoinGroupRequest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from tests.support.members import REJOIN_ERRORS, E, Member

ASSIGNOR = "cooperative-sticky"

Partitions = dict[str, list[int]]


def subscription(topics: list[str], owned: Partitions, generation: int) -> bytes:
    return bytes(ConsumerProtocolSubscription(
        version=3, topics=sorted(topics), user_data=struct.pack(">i", generation),
        owned_partitions=[ConsumerProtocolSubscription.TopicPartition(topic=t, partitions=sorted(ps))
                          for t, ps in sorted(owned.items())],
        generation_id=generation, rack_id=None).encode())


def assignment(partitions: Partitions) -> bytes:
    return bytes(ConsumerProtocolAssignment(
        version=3, assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=sorted(ps))
                                        for t, ps in sorted(partitions.items())], user_data=None).encode())


def decode_assignment(data: bytes) -> Partitions:
    if not data:
        return {}
    return {tp.topic: list(tp.partitions) for tp in ConsumerProtocolAssignment.decode(data).assigned_partitions}


def deal(member_ids: list[str], topics: dict[str, int], seed: int) -> dict[str, Partitions]:
    """Every partition of ``topics`` ({name: count}) dealt to the members at random, evenly."""
    every = [(t, p) for t, n in sorted(topics.items()) for p in range(n)]
    random.Random(seed).shuffle(every)
    ordered = sorted(member_ids)
    out: dict[str, Partitions] = {m: {} for m in ordered}
    for i, (topic, partition) in enumerate(every):
        out[ordered[i % len(ordered)]].setdefault(topic, []).append(partition)
    return out


class JavaMember(Member):
    """A :class:`Member` speaking Kafka 3.9's Java consumer payloads over ``topics``."""

    def __init__(self, *args, topics: dict[str, int], seed: int = 1, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.topics = topics
        self.seed = seed
        self.owned: Partitions = {}
        self.assignment_bytes = b""

    def join_request(self) -> JoinGroupRequest:
        return JoinGroupRequest(
            version=5, group_id=self.group, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id, group_instance_id=None,
            protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                name=ASSIGNOR, metadata=subscription(list(self.topics), self.owned, self.generation))])

    async def join_and_sync(self, deadline: float) -> None:
        joined = await self.join(deadline)
        assignments = {}
        if joined.leader == self.member_id:
            for m in joined.members:  # as a Java leader does: read each subscription
                ConsumerProtocolSubscription.decode(bytes(m.metadata))
            dealt = deal([m.member_id for m in joined.members], self.topics, self.seed)
            assignments = {m: assignment(parts) for m, parts in dealt.items()}
        synced = await self.call(self.sync_request(joined.generation_id, assignments), deadline)
        code = E(synced.error_code)
        if code is E.NONE:
            self.generation = joined.generation_id
            self.assignment_bytes = bytes(synced.assignment)
            self.owned = decode_assignment(self.assignment_bytes)
            self.assignment = tuple(sorted((t, p) for t, ps in self.owned.items() for p in ps))
            self.ledger.synced.setdefault(self.generation, {})[self.member_id] = self.assignment
            self.needs_join, self.confirmed = False, False
        elif code is E.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        elif code not in REJOIN_ERRORS:
            raise AssertionError(f"{self.name}: SyncGroup answered {code.name}")
