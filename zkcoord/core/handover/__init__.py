"""Live handover of a consumer group from legacy ZooKeeper consumers
(Kafka 0.8.1-1.1's ``ZookeeperConsumerConnector``) to zkcoord's members,
inside the same group (issue 26). Pure: the adapters are in
:mod:`zkcoord.zk.handover`; how it works is in ``docs/handover.md``.

* :mod:`.registration`: the ``/consumers/<group>/ids/<id>`` JSON, zkcoord's consumer ids;
* :mod:`.legacy_range`: the legacy range assignment, topic filters included;
* :mod:`.decision`: the decision (register, revoke, release, claim, wait) as data;
* :mod:`.retries`: ``rebalance.max.retries`` / ``rebalance.backoff.ms`` as a schedule.
"""

from zkcoord.core.handover.decision import Claim, Member, Owner, Plan, Release, View, plan
from zkcoord.core.handover.legacy_range import TopicPartition, range_assignment
from zkcoord.core.handover.registration import (
    LegacyRegistration, Pattern, encode_registration, parse_registration, thread_id, zkcoord_consumer_id,
)
from zkcoord.core.handover.retries import Attempts, RetrySchedule

__all__ = ["TopicPartition", "range_assignment", "Claim", "Member", "Owner", "Plan", "Release", "View", "plan",
           "LegacyRegistration", "Pattern", "encode_registration", "parse_registration", "thread_id",
           "zkcoord_consumer_id", "Attempts", "RetrySchedule"]
