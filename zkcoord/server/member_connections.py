"""Which connection each group member last spoke on.

Owns the map (group id, member id) -> connection id that the daemon's opt-in
``member_disconnect_grace_ms`` needs: when a connection closes, the members
whose last request came over it are the ones to expire early. A member seen
on another connection since (it reconnected) is not among them.

Kafka keeps no such map (a closed connection means nothing to its group
coordinator); this module exists only when the setting is on. It is on the
request path, so :meth:`MemberConnections.seen` costs one dict lookup when
the pair is unchanged, which is every heartbeat but the first on a
connection. Nothing here reads the clock or touches a group.
"""

from __future__ import annotations

Pair = tuple[str, str]  # (group id, member id)


class MemberConnections:
    """``seen(group, member, connection)`` on requests; ``closed(connection)``
    returns the pairs whose last connection that was, and forgets them."""

    __slots__ = ("_last", "_spoken")

    def __init__(self) -> None:
        self._last: dict[Pair, int] = {}  # pair -> the connection it last spoke on
        self._spoken: dict[int, set[Pair]] = {}  # connection -> pairs it ever spoke for

    def __len__(self) -> int:
        return len(self._last)

    def seen(self, group_id: str, member_id: str, connection_id: int) -> None:
        pair = (group_id, member_id)
        if self._last.get(pair) == connection_id:
            return
        self._last[pair] = connection_id
        spoken = self._spoken.get(connection_id)
        if spoken is None:
            self._spoken[connection_id] = {pair}
        else:
            spoken.add(pair)

    def forget(self, group_id: str, member_id: str) -> None:
        """The member left (LeaveGroup): nothing to expire when its connection closes."""
        self._last.pop((group_id, member_id), None)

    def closed(self, connection_id: int) -> list[Pair]:
        """The pairs that last spoke on ``connection_id``, in a stable order."""
        gone = []
        for pair in self._spoken.pop(connection_id, ()):
            if self._last.get(pair) == connection_id:
                del self._last[pair]
                gone.append(pair)
        return sorted(gone)
