"""A member given a partition back starts from the partition's committed
offset, not from an OffsetFetch answer kept from an earlier generation
(``zkcoord/client/coordinator.py``, fix 5).

kafka-python 3.0.12 keeps each OffsetFetch's future in a map keyed by the
set of partitions asked for, so that a caller whose timeout ran out (a
``poll()`` during a slow fetch, a ``committed()`` with a short timeout)
finds the same request on its next try. Only a caller that sees the future
done removes it; when every caller gave up, the finished answer stays, and
the next fetch of the same set, however much later, returns it without
asking. Kafka's Java consumer reuses a pending fetch only for the same
partitions *and the same generation* (``PendingCommittedOffsetRequest``).

Found while looking into the stale-position fault test: A owns the
partition and commits 10; B joins and takes it; A gives up on an OffsetFetch
of it (answer 10, kept); B commits 20 and leaves; A, given the partition
back, resumed at 10 before the fix.
"""

from __future__ import annotations

import pytest

from tests.integration.test_client_support import ThreadDaemons, config, create_topic, eventually, poll_all, produce, start_member
from zkcoord.client import TopicPartition
from zkcoord.client.errors import ConsumerTimeoutError

pytestmark = pytest.mark.integration


def gave_up(consumer, tp) -> bool:
    """Ask for the committed offset with a 1 ms timeout (as a short ``poll()``
    can): whether the call gave up before the answer came."""
    try:
        consumer.committed(tp, timeout_ms=1)
    except ConsumerTimeoutError:
        return True
    return False


def test_a_partition_given_back_starts_at_its_committed_offset_not_at_an_abandoned_fetch(services, zk_hosts,
                                                                                         unique_name):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [0], 30)  # committed offsets within the log: no reset to the earliest
    tp = TopicPartition(topic, 0)
    with ThreadDaemons(zk_hosts, 1) as daemons:
        cfg = config(daemons.addresses, bootstrap, group, max_poll_records=1)
        a = start_member("z-a", cfg, [topic])
        a.commit_in_listener = False  # only the commits below move the committed offset
        b = None
        seen = []  # records A polls, and from where

        def poll(*members):
            def step():
                for member in members:
                    seen.extend((member.name, r.offset) for r in member.consumer.poll(timeout_ms=100))
            return step

        try:
            eventually(lambda: a.consumer.assignment() == {tp}, "A owns the partition", step=poll(a))
            a.consumer.commit({tp: 10})
            b = start_member("a-b", cfg, [topic])  # sorts first: the range assignor gives it the partition
            b.commit_in_listener = False
            eventually(lambda: b.consumer.assignment() == {tp} and not a.consumer.assignment(),
                       "B owns the partition", step=poll(a, b))
            fetches = a.consumer._kafka._coordinator._offset_fetch_futures

            def answer_kept() -> bool:
                # A consumer that owns nothing fetches nothing else, so the kept answer stays.
                if not gave_up(a.consumer, tp):
                    return False
                eventually(lambda: all(f.is_done for f in list(fetches.values())), "the OffsetFetch answered")
                return bool(fetches)

            eventually(answer_kept, "an OffsetFetch A (not its owner now) gave up on kept with its answer (10)")
            b.consumer.commit({tp: 20})
            b.consumer.close()
            b = None
            seen.clear()
            eventually(lambda: a.consumer.assignment() == {tp} and seen, "A polls the partition again",
                       step=poll(a))
            assert seen[0] == ("z-a", 20)
        finally:
            if b is not None:
                b.consumer.close()
            a.consumer.close()
