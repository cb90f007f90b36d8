"""The ZooKeeper adapters: everything zkcoord stores in ZooKeeper.

* :mod:`~zkcoord.zk.paths` - every znode path, and name validation
* :mod:`~zkcoord.zk.aio` - kazoo results as asyncio futures, async retry
* :mod:`~zkcoord.zk.connection` - the daemon's session and its events
* :mod:`~zkcoord.zk.nodes` - daemon registration and address lookup
* :mod:`~zkcoord.zk.ownership` - per-group owner election and fences
* :mod:`~zkcoord.zk.state_store` - the fenced, versioned group state
* :mod:`~zkcoord.zk.packed_state` - a state read whole, with the parts of a packed one
* :mod:`~zkcoord.zk.offsets` - legacy offsets, batched multi-op commits
* :mod:`~zkcoord.zk.topics` - partition counts from Kafka's registration
* :mod:`~zkcoord.zk.layout` - the layout version and its migrations

Every coroutine here runs on the caller's event loop and never blocks it;
kazoo's threads only hand results over (``aio.post``). Callbacks given to
these modules run on the loop thread unless said otherwise.
"""
