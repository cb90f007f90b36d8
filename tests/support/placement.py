"""Group names that FindCoordinator sends to a chosen daemon, for tests.

A lookup of a group nobody owns names
:func:`zkcoord.core.placement.choose_node` of the live daemons (rendezvous
hashing of the group id) and writes nothing; the daemon that gets the
group's first group request contends. A test about one daemon's groups
(its kill, its SIGTERM) so needs group ids that hash to that daemon, and,
for what happens after a daemon is gone, to the one that should take over.
:func:`placed_name` draws unique names until each placement holds: the
hashing is fixed (SHA-256), so a name placed here is placed so in every
daemon.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from zkcoord.core.placement import choose_node

MAX_DRAWS = 10_000  # one in n draws fits a placement over n daemons; this never runs out in practice


def placed_name(make: Callable[[str], str], prefix: str, *placements: tuple[Iterable[int], int]) -> str:
    """A name ``make(prefix)`` for which every ``(live node ids, node id)``
    of ``placements`` holds: ``choose_node(name, live) == node``.

    ``placed_name(unique_name, "g", ([1, 2, 3], 1), ([2, 3], 2))``: a group
    that lookups send to daemon 1 while daemons 1 to 3 live, and to daemon 2
    once daemon 1 is gone.
    """
    wanted = [(tuple(live), node) for live, node in placements]
    for _ in range(MAX_DRAWS):
        name = make(prefix)
        if all(choose_node(name, live) == node for live, node in wanted):
            return name
    raise AssertionError(f"no name {prefix}-... placed as {wanted} in {MAX_DRAWS} draws")
