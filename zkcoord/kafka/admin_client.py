"""What zkcoord does to a kafka-python admin client beyond its public API.

This module owns every reach into kafka-python 3.0's private parts that is
not a request of its own (those stay with their callers in
:mod:`zkcoord.kafka.offsets`): closing a client quietly, resetting its
connections for an abort, and forgetting the group coordinators it cached.
An upgrade of kafka-python that moves what they touch fails
``tests/unit/test_admin_client.py`` (the cache in ``ClusterMetadata``) and
``tests/faults/test_fault_coordinator_moves.py`` (a real client's path to
it), ``tests/unit/test_forward_abort.py`` (the resets).

Why forgetting is needed: kafka-python's admin client looks a group's
coordinator up once (``_find_coordinator_ids``) and keeps the answer in
``ClusterMetadata._coordinators`` for the client's life; nothing drops an
entry. When the group's ``__consumer_offsets`` partition moves to another
broker (its leader killed, a reassignment, a preferred-leader election),
every later call goes on to the old broker: connection refused while it is
down, NOT_COORDINATOR once it is back, until the caller's deadline, call
after call. Kafka's own clients mark the coordinator unknown and look it up
again on NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost connection or a
time-out; :func:`forget_coordinators` is how a caller does the same before
it retries.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["close_quietly", "reset_and_close", "forget_coordinators"]

log = logging.getLogger(__name__)


def forget_coordinators(admin: Any) -> None:
    """Drop every coordinator ``admin`` cached: the next call asks
    FindCoordinator again (one small request per call that needs one)."""
    admin._manager.cluster._coordinators.clear()


def close_quietly(admin: Any) -> None:
    try:
        admin.close()
    except Exception:  # closing must not hide the error that made us close
        log.debug("closing the Kafka admin client failed", exc_info=True)


def reset_and_close(admin: Any, reason: str) -> None:
    """Reset every connection of a kafka-python admin client, then close it.

    The resets run on kafka-python's I/O thread (``manager.run``), between two
    of its own steps, so no request is half-way through being written: each
    connection is closed *with an error* (its transport aborted: its write
    buffer dropped, its socket closed, which with ``SO_LINGER`` 0 resets it and
    drops what the kernel holds; a plain close would first flush the buffer),
    its pending requests failed; then the connection manager is closed, and a
    closed manager discards any connection it would still open before anything
    is sent on it. ``admin.close()`` then stops the I/O thread and fails the
    waiting callers."""
    import kafka.errors as Errors

    error = Errors.KafkaConnectionError(f"connections aborted: {reason}")

    def reset_all() -> None:
        manager = admin._manager  # kafka-python 3.0's KafkaConnectionManager
        for conn in list(manager._conns.values()):
            conn.close(error)
        manager.close()

    try:
        admin._manager.run(reset_all)
    except Exception:  # the I/O thread already stopped or failed: admin.close() below still closes what is left
        log.debug("resetting the Kafka connections on the client's I/O thread failed", exc_info=True)
    close_quietly(admin)
