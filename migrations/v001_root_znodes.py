"""Layout version 1: the znodes every other part of zkcoord writes under.

Creates, where missing (all persistent, empty data)::

    /zkcoord                 zkcoord's root
    /zkcoord/nodes           one ephemeral child per live daemon
    /zkcoord/node-id-seq     its version allocates node ids (1001, 1002, ...)
    /zkcoord/migrations      one child per group that `zkcoord migrate` moves
    /coordinators            one child per consumer group

A ZooKeeper where zkcoord ran before layout versions existed has some of
them already; they are kept as they are (``node-id-seq`` keeps its version,
so allocated node ids are not handed out twice).
"""

VERSION = 1
DESCRIPTION = "create zkcoord's root znodes"

# Spelled out rather than taken from zkcoord.zk.paths: a migration describes
# the layout of its own version, whatever the paths module says later.
ZNODES = ("/zkcoord", "/zkcoord/nodes", "/zkcoord/node-id-seq", "/zkcoord/migrations", "/coordinators")


def up(client, tx):
    """Add a create to ``tx`` for each of :data:`ZNODES` that does not exist
    (parents come first, so one multi-op creates them in order)."""
    for path in ZNODES:
        if client.exists(path) is None:
            tx.create(path, b"")
