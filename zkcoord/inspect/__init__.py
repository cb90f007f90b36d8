"""Inspection: what ``zkcoord groups`` and ``zkcoord describe`` show.

What kafka-consumer-groups shows of a group (offsets, members, state), plus
what only zkcoord knows: the owner daemon, the generation, the offset
storage mode, both stores side by side during dual-commit, the migration
phase, and the legacy groups under ``/consumers``. It reads ZooKeeper
directly, so it works with every daemon down (and says so).

Modules, from pure to I/O:

* :mod:`~zkcoord.inspect.model`: the report values and their JSON schema
  (a documented, versioned contract).
* :mod:`~zkcoord.inspect.views`: pure rules from gathered facts to views.
* :mod:`~zkcoord.inspect.legacy_rebalance`: pure rules of a group's legacy
  rebalance (legacy consumers and zkcoord's members in a handover).
* :mod:`~zkcoord.zk.group_reads`: the ZooKeeper reads.
* :mod:`~zkcoord.inspect.live`: DescribeGroups to a group's owner daemon.
* :mod:`~zkcoord.inspect.gather`: :class:`Inspector`, which asks ZooKeeper,
  the owners and Kafka in that order and builds the reports.

Rendering (tables, ``--watch``) lives in :mod:`zkcoord.cli.inspect_cmd`.
"""

from zkcoord.inspect.gather import Inspector, select
from zkcoord.inspect.model import DESCRIBE_SCHEMA, GROUPS_SCHEMA, DescribeReport, GroupsReport

__all__ = ["Inspector", "select", "DescribeReport", "GroupsReport", "DESCRIBE_SCHEMA", "GROUPS_SCHEMA"]
