"""zkcoord.core.peer_probe: whom a daemon probes, and when refusals prove the probed daemon dead."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zkcoord.core.peer_probe import REFUSAL_SPAN_S, REFUSALS, Outcome, Peer, PeerProbe, probe_target

A = Peer(2, "127.0.0.1", 9300, 1_700_000_000_000, 41)
A_AGAIN = Peer(2, "127.0.0.1", 9301, 1_700_000_009_000, 42)  # node 2 registered again (restarted)


def refusals(probe: PeerProbe, peer: Peer, times: list[float]) -> list[bool]:
    return [probe.observe(peer, Outcome.REFUSED, t) for t in times]


def test_the_next_live_node_id_is_probed_and_the_highest_probes_the_lowest():
    assert probe_target(1, [1, 2, 3]) == 2
    assert probe_target(3, [3, 1, 2]) == 1
    assert probe_target(7, [1, 3]) == 1  # not live itself (registering again): still probes one
    assert probe_target(1, [1]) is None
    assert probe_target(1, []) is None


@given(st.sets(st.integers(0, 2**31 - 1), min_size=2, max_size=40))
def test_every_live_daemon_is_probed_by_exactly_one_other(live):
    probed = [probe_target(n, live) for n in live]
    assert sorted(probed) == sorted(live)
    assert all(target != n for n, target in zip(live, probed))


def test_refusals_in_a_row_over_the_span_give_one_verdict():
    probe = PeerProbe()
    times = [i * 0.25 for i in range(8)]
    verdicts = refusals(probe, A, times)
    first = verdicts.index(True)
    assert times[first] >= REFUSAL_SPAN_S and first + 1 >= REFUSALS
    assert verdicts.count(True) == 1  # once per registration


def test_enough_refusals_too_quickly_wait_for_the_span():
    probe = PeerProbe(refusals=3, span_s=1.0)
    assert refusals(probe, A, [0.0, 0.1, 0.2, 0.3]) == [False] * 4
    assert probe.observe(A, Outcome.REFUSED, 1.0) is True


@pytest.mark.parametrize("other", [Outcome.ACCEPTED, Outcome.NO_ANSWER])
def test_an_accepted_or_unanswered_probe_starts_the_count_again(other):
    probe = PeerProbe(refusals=3, span_s=1.0)
    assert refusals(probe, A, [0.0, 0.5, 0.9]) == [False] * 3
    assert probe.observe(A, other, 1.0) is False
    assert probe.refused == 0
    assert refusals(probe, A, [1.1, 1.6, 2.0]) == [False] * 3  # 0.9 s from the first of the new count
    assert probe.observe(A, Outcome.REFUSED, 2.1) is True


def test_only_refusals_count_a_paused_or_partitioned_daemon_is_never_judged():
    probe = PeerProbe()
    for i in range(1000):
        outcome = Outcome.ACCEPTED if i % 2 else Outcome.NO_ANSWER
        assert probe.observe(A, outcome, i * 0.25) is False


def test_a_daemon_registered_again_is_a_new_peer_counted_from_zero():
    probe = PeerProbe(refusals=3, span_s=1.0)
    assert refusals(probe, A, [0.0, 0.5, 1.0]) == [False, False, True]
    assert refusals(probe, A, [1.5, 2.0]) == [False, False]  # its verdict was given
    assert refusals(probe, A_AGAIN, [2.5, 3.0, 3.4]) == [False, False, False]
    assert probe.observe(A_AGAIN, Outcome.REFUSED, 3.5) is True


def test_forgetting_registrations_no_longer_live_keeps_the_others_verdicts():
    probe = PeerProbe(refusals=1, span_s=0.0)
    assert probe.observe(A, Outcome.REFUSED, 0.0) is True
    probe.forget([A])
    assert probe.observe(A, Outcome.REFUSED, 1.0) is False  # still live: still judged
    probe.forget([A_AGAIN])
    assert probe.observe(A, Outcome.REFUSED, 2.0) is True  # a registration judged before, seen again


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="refusals must be at least 1"):
        PeerProbe(refusals=0)
    with pytest.raises(ValueError, match="span_s not negative"):
        PeerProbe(span_s=-1)

