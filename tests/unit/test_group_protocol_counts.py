"""A classic group's protocol counts (Kafka's ``supportedProtocols``) are
carried from group value to group value as members join, rejoin with other
protocols, leave, expire and are replaced (static members): whatever the
sequence, the carried counts are those of a fresh count over the members,
so a JoinGroup decides as it did when it counted every member itself."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from test_group_support import Harness

PROTOCOLS = [(("range", b"r"),), (("range", b"r"), ("roundrobin", b"rr")), (("roundrobin", b"rr"),),
             (("range", b"other metadata"),)]

_step = st.one_of(
    st.tuples(st.just("join"), st.integers(0, 7), st.sampled_from(range(len(PROTOCOLS))), st.booleans()),
    st.tuples(st.just("rejoin"), st.integers(0, 7), st.sampled_from(range(len(PROTOCOLS)))),
    st.tuples(st.just("leave"), st.integers(0, 7)),
    st.tuples(st.just("advance"), st.integers(1, 40_000)),
    st.tuples(st.just("sync"), st.integers(0, 7)),
)


def recount(group) -> Counter:
    return +Counter(name for m in group.members.values() for name, _ in m.protocols)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(_step, max_size=40))
def test_carried_counts_equal_a_fresh_count(steps):
    h = Harness()
    tokens = iter(range(10**6))
    for step in steps:
        members = sorted(h.group.members)
        kind = step[0]
        if kind == "join":
            _, n, protocols, static = step
            h.join(next(tokens), new_member_id=f"m{n}-{next(tokens)}", instance_id=f"i{n}" if static else None,
                   protocols=PROTOCOLS[protocols])
        elif kind == "rejoin" and members:
            member = h.group.members[members[step[1] % len(members)]]
            h.join(next(tokens), member.member_id, instance_id=member.group_instance_id,
                   protocols=PROTOCOLS[step[2]])
        elif kind == "leave" and members:
            member = h.group.members[members[step[1] % len(members)]]
            h.leave(next(tokens), (member.member_id, member.group_instance_id))
        elif kind == "advance":
            h.advance(h.now + step[1])
        elif kind == "sync" and members:
            member = h.group.members[members[step[1] % len(members)]]
            h.sync(next(tokens), member.member_id, instance_id=member.group_instance_id,
                   assignments={m: b"a" for m in members} if member.member_id == h.group.leader_id else None)
        cached = h.group.counts_cache
        assert cached is None or +cached == recount(h.group), (step, cached, recount(h.group))
        assert +h.group.protocol_counts() == recount(h.group)  # and from here on carried
