"""KIP-848's consumer group: the group type whose assignment is computed by the
coordinator and handed to each member step by step (ConsumerGroupHeartbeat).

Modules: :mod:`.model` (the member and the group as values), :mod:`.reconcile`
(one member's next step toward its target: revoke first, then assign),
:mod:`.target` (the group's target assignment from its members and the
assignor), :mod:`.heartbeat` (the ConsumerGroupHeartbeat handler, leaving,
fencing), :mod:`.timers` (session and rebalance time-outs), :mod:`.record`
(what is stored in ZooKeeper), :mod:`.kind` (the group type the runtime asks).
They follow Kafka 4.4's ``GroupMetadataManager``, ``ConsumerGroup``,
``ConsumerGroupMember``, ``CurrentAssignmentBuilder`` and
``TargetAssignmentBuilder``, rule for rule.
"""
