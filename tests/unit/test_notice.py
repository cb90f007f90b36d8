"""zkcoord.core.notice.hold_ms: how long the daemon may hold a heartbeat on
a notice connection, walked through a group's states with a fake clock."""

from __future__ import annotations

from tests.unit.test_group_support import stable_harness
from zkcoord.core.notice import hold_ms


def test_a_stable_member_in_the_current_generation_is_held_up_to_half_its_session():
    h = stable_harness(2)
    session = h.group.members["m1"].session_timeout_ms
    assert hold_ms(h.group, "m1", 1, 5_000) == min(5_000, session // 2)
    assert hold_ms(h.group, "m1", 1, 10 * session) == session // 2


def test_nothing_is_held_off_stable_or_for_strangers_or_when_off():
    h = stable_harness(2)
    assert hold_ms(h.group, "m1", 1, 0) == 0  # the daemon's hold is off
    assert hold_ms(h.group, "m1", 0, 5_000) == 0  # an old generation
    assert hold_ms(h.group, "nobody", 1, 5_000) == 0
    h.join("j3", new_member_id="m3")  # a new member: PreparingRebalance
    assert h.group.state.value == "PreparingRebalance"
    assert hold_ms(h.group, "m1", 1, 5_000) == 0
