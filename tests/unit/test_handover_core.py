"""The handover core's pieces with exact outcomes: legacy registrations read
and written as Kafka 1.1.1 does, zkcoord's consumer ids, the legacy range
assignment (Kafka's own example, Java's string order, whitelists and
blacklists), the plan's decisions case by case, and the retry schedule.
The properties over generated groups are in test_handover_properties.py."""

from __future__ import annotations

import doctest
import json

import pytest

from zkcoord.core.handover import decision, legacy_range, registration, retries
from zkcoord.core.handover.legacy_range import assignment_of, clean_regex, range_assignment, threads_per_topic
from zkcoord.core.handover.decision import Claim, Member, Owner, Release, View, plan
from zkcoord.core.handover.registration import (
    LegacyRegistration, Pattern, Wildcard, encode_registration, is_zkcoord_consumer_id, parse_registration,
    split_thread_id, thread_id, zkcoord_consumer_id,
)
from zkcoord.core.handover.retries import Attempts, RetrySchedule, needs_nudge
from zkcoord.errors import ConfigError, StateError, UsageError

# What Kafka 1.1.1's ZookeeperConsumerConnector wrote in the sandbox (Jackson, ordered map).
LEGACY_STATIC = b'{"version":1,"subscription":{"orders":1},"pattern":"static","timestamp":"1795315596682"}'
LEGACY_WHITELIST = b'{"version":1,"subscription":{"orders.*":2},"pattern":"white_list","timestamp":"1"}'


@pytest.mark.parametrize("module", [registration, legacy_range, decision, retries])
def test_docstring_examples(module):
    failures, _ = doctest.testmod(module)
    assert failures == 0


# -- registrations -----------------------------------------------------------------------------

def test_a_static_registration_reads_as_kafka_reads_it():
    reg = parse_registration("g_m1", LEGACY_STATIC)
    assert (reg.static_topics, reg.wildcard, reg.pattern_text, reg.version, reg.timestamp) == (
        {"orders": 1}, None, "static", 1, "1795315596682")


def test_a_whitelist_registration_reads_as_its_regex_and_streams():
    reg = parse_registration("g_m2", LEGACY_WHITELIST)
    assert reg.wildcard == Wildcard(Pattern.WHITE_LIST, "orders.*", 2) and reg.static_topics == {}


@pytest.mark.parametrize("data, topics", [
    (b'{"pattern":"something","subscription":{"a":1}}', {"a": 1}),  # an unknown pattern: a static count
    (b'{"pattern":"white_list","subscription":{}}', {}),  # an empty wildcard: static, no topics
    (b'{"subscription":{"a":3},"pattern":"static"}', {"a": 3}),  # no version, no timestamp: not read
])
def test_what_kafka_reads_as_static(data, topics):
    reg = parse_registration("c", data)
    assert reg.wildcard is None and reg.static_topics == topics


@pytest.mark.parametrize("data, why", [
    (None, "no data"),
    (b"*4*orders.*", "not JSON"),  # Kafka 0.8.0's form
    (b"\xff", "not JSON"),
    (b"[1]", "not a JSON object"),
    (b'{"subscription":{"a":1}}', 'no "pattern" string'),
    (b'{"pattern":"static"}', 'no "subscription" object'),
    (b'{"pattern":"static","subscription":{"a":"1"}}', "not a whole number of streams"),
    (b'{"pattern":"static","subscription":{"a":true}}', "not a whole number of streams"),
    (b'{"pattern":"static","subscription":{"a":1.5}}', "not a whole number of streams"),
    (b'{"pattern":"static","subscription":{"a":2147483648}}', "not a whole number of streams"),
    (b'{"pattern":"static","subscription":{"a":0}}', "0 streams"),
    (b'{"pattern":"black_list","subscription":{"a":1,"b":1}}', "has 2 entries"),
])
def test_what_no_legacy_consumer_can_read_is_a_state_error_naming_the_znode(data, why):
    with pytest.raises(StateError, match=r"/consumers/g/ids/c cannot be read .*" + why.replace("(", r"\(")):
        parse_registration("c", data, "/consumers/g/ids/c")


def test_our_registration_has_the_form_kafka_1_1_writes():
    assert encode_registration({"orders": 1}, 1795315596682) == LEGACY_STATIC
    two = encode_registration({"b": 2, "a": 1}, 5)
    assert two == b'{"version":1,"subscription":{"a":1,"b":2},"pattern":"static","timestamp":"5"}'
    assert parse_registration("x", two) == LegacyRegistration.static("x", {"a": 1, "b": 2}, 5)


def test_strings_are_escaped_as_jackson_escapes_them():
    data = encode_registration({'q"\\\n\x01é': 1}, 0)
    assert b'"q\\"\\\\\\n\\u0001\xc3\xa9":1' in data
    assert json.loads(data)["subscription"] == {'q"\\\n\x01é': 1}


@pytest.mark.parametrize("topics, ts", [({"a": 0}, 1), ({"a": True}, 1), ({"a": 1}, -1), ({"a": 1}, 1.0)])
def test_bad_registrations_are_refused_before_anything_is_written(topics, ts):
    with pytest.raises(UsageError):
        encode_registration(topics, ts)


def test_zkcoord_consumer_ids_sort_by_when_the_member_joined():
    early = zkcoord_consumer_id("g", 999, "ffffffff")
    late = zkcoord_consumer_id("g", 1000, "00000000")
    assert early == "g_zkcoord-0000000000999-ffffffff"
    assert sorted([thread_id(late, 0), thread_id(early, 0)]) == [thread_id(early, 0), thread_id(late, 0)]
    assert is_zkcoord_consumer_id(early) and not is_zkcoord_consumer_id("g_host-1795315596682-0a1b2c3d")


@pytest.mark.parametrize("args", [("", 1, "00000000"), ("a/b", 1, "00000000"), ("g", -1, "00000000"),
                                  ("g", 10**13, "00000000"), ("g", 1, "0000000"), ("g", 1, "ABCDEF01")])
def test_bad_consumer_id_parts_are_usage_errors(args):
    with pytest.raises(UsageError):
        zkcoord_consumer_id(*args)


def test_thread_ids_split_at_the_last_dash():
    assert split_thread_id("g_h-1-2-10") == ("g_h-1-2", 10)
    assert [split_thread_id(t) for t in ("x", "-1", "a-", "a-b", "a-١")] == [None] * 5
    with pytest.raises(UsageError):
        thread_id("c", -1)


# -- the range assignment -------------------------------------------------------------------------

def static(cid: str, **topics: int) -> LegacyRegistration:
    return LegacyRegistration.static(cid, topics)


def test_thread_ids_sort_as_java_strings_so_ten_comes_before_two():
    result = range_assignment([static("c", t=11)], {"t": tuple(range(11))})
    order = ["c-0", "c-1", "c-10", "c-2", "c-3", "c-4", "c-5", "c-6", "c-7", "c-8", "c-9"]
    assert [result[("t", p)] for p in range(11)] == order


def test_threads_of_consumers_whose_ids_share_a_prefix_interleave_as_strings():
    regs = [static("a", t=2), static("a-0", t=1)]
    assert threads_per_topic(regs, ["t"]) == {"t": ["a-0", "a-0-0", "a-1"]}


def test_partitions_are_cut_per_topic_and_sorted_as_numbers():
    regs = [static("c1", a=1, b=1), static("c2", b=1)]
    result = range_assignment(regs, {"a": (2, 0, 1), "b": (10, 9, 1)})
    assert result == {("a", 0): "c1-0", ("a", 1): "c1-0", ("a", 2): "c1-0",
                      ("b", 1): "c1-0", ("b", 9): "c1-0", ("b", 10): "c2-0"}
    assert assignment_of(result, "c2") == {"c2-0": frozenset({("b", 10)})}


def test_more_threads_than_partitions_leaves_the_last_threads_idle():
    result = range_assignment([static("a", t=1), static("b", t=1), static("c", t=1)], {"t": (0, 1)})
    assert result == {("t", 0): "a-0", ("t", 1): "b-0"}


def test_a_subscribed_topic_without_registration_has_no_partitions():
    assert range_assignment([static("a", gone=1)], {}) == {}


def test_whitelists_and_blacklists_pick_from_every_registered_topic():
    topics = {"orders": (0, 1), "orders-eu": (0,), "payments": (0,), "__consumer_offsets": (0,)}
    white = LegacyRegistration.filtered("w", Pattern.WHITE_LIST, " 'orders.*' ", 1)
    black = LegacyRegistration.filtered("b", Pattern.BLACK_LIST, "orders.*", 1)
    result = range_assignment([white, black], topics)
    assert result == {("orders", 0): "w-0", ("orders", 1): "w-0", ("orders-eu", 0): "w-0", ("payments", 0): "b-0"}
    everything = LegacyRegistration.filtered("all", Pattern.WHITE_LIST, ".*", 1)
    assert ("__consumer_offsets", 0) in range_assignment([everything], topics, exclude_internal_topics=False)
    assert ("__consumer_offsets", 0) not in range_assignment([everything], topics)


def test_a_whitelist_registered_by_kafka_1_1_with_a_backslash_matches_as_kafka_reads_it_back():
    # Kafka 1.0.1-1.1.x escape the regex (JSONEscapeString) and Jackson escapes it again: what Kafka 1.1.1
    # wrote for Whitelist("orders\..*"); read back, the backslash is doubled and "orders.eu" does not match
    # (Kafka's own RangeAssignor gives it nothing either; checked against the 1.1.1 jar).
    data = rb'{"version":1,"subscription":{"orders\\\\..*":1},"pattern":"white_list","timestamp":"1"}'
    reg = parse_registration("w", data)
    assert reg.wildcard.regex == r"orders\\..*"
    assert range_assignment([reg], {"orders.eu": (0,), r"orders\x": (0,)}) == {(r"orders\x", 0): "w-0"}


def test_the_regex_is_cleaned_as_kafka_cleans_it():
    assert clean_regex(' "a, b ,c"\t') == "a|b|c"
    assert clean_regex("''x''") == "x"


@pytest.mark.parametrize("regex", [r"\p{Alpha}+", r"\Qa.b\E", "[a-z&&[^b]]", r"a\z", "(?<n>a)", "(", "a{2,1}"])
def test_a_regex_zkcoord_cannot_evaluate_as_java_does_is_refused(regex):
    reg = LegacyRegistration.filtered("w", Pattern.WHITE_LIST, regex, 1)
    with pytest.raises(StateError, match="consumer 'w' subscribes with the white_list regex .* zkcoord cannot"):
        range_assignment([reg], {"t": (0,)})


# -- the plan --------------------------------------------------------------------------------------

Z1, Z2 = "g_zkcoord-0000000000001-00000001", "g_zkcoord-0000000000002-00000002"


def view(*, legacy=("g_a",), members=(Z1,), registered=(Z1,), owners=None, quiesced=(), partitions=4,
         member_topics=None):
    regs = {cid: static(cid, t=1) for cid in legacy}
    mems = {cid: Member(cid, member_topics or {"t": 1}) for cid in members}
    regs.update({cid: static(cid, t=1) for cid in registered})
    return View(regs, {"t": tuple(range(partitions))}, owners or {}, mems, frozenset(registered),
                frozenset(quiesced))


def test_a_new_member_registers_first_and_gets_nothing_until_registered():
    result = plan(view(registered=()))
    assert result.register == (Z1,) and result.claim == () and result.assignment == {Z1: frozenset()}
    assert not result.settled


def test_free_partitions_of_our_ranges_are_claimed_and_held_ones_waited_for():
    owners = {("t", 2): Owner("g_a-0", ours=False)}
    result = plan(view(owners=owners))
    # g_a-0 < g_zkcoord-...-0: legacy a takes 0,1; we take 2,3
    assert result.target == {("t", 0): "g_a-0", ("t", 1): "g_a-0", ("t", 2): f"{Z1}-0", ("t", 3): f"{Z1}-0"}
    assert result.claim == (Claim(("t", 3), f"{Z1}-0"),)
    assert result.waiting == {("t", 2): "g_a-0"}
    assert result.assignment == {Z1: frozenset()}


def test_held_ranges_are_consumed_and_the_plan_settles():
    owners = {("t", 2): Owner(f"{Z1}-0", True), ("t", 3): Owner(f"{Z1}-0", True),
              ("t", 0): Owner("g_a-0", False)}
    result = plan(view(owners=owners))
    assert result.settled and result.assignment == {Z1: frozenset({("t", 2), ("t", 3)})}


def test_a_partition_leaving_our_member_is_revoked_then_released_once_quiesced():
    owners = {("t", p): Owner(f"{Z1}-0", True) for p in range(4)}  # we had everything; legacy g_a joined
    first = plan(view(owners=owners))
    assert first.revoke == {Z1: frozenset({("t", 0), ("t", 1)})} and first.release == ()
    assert first.assignment == {Z1: frozenset({("t", 2), ("t", 3)})}
    assert plan(view(owners=owners, quiesced=[(("t", 0), Z2)])).release == ()  # another member's answer
    later = plan(view(owners=owners, quiesced=[(("t", 0), Z1)]))
    assert later.release == (Release(("t", 0), f"{Z1}-0"),) and later.revoke == {Z1: frozenset({("t", 1)})}


def test_a_gone_members_partitions_are_released_at_once_and_its_registration_removed():
    owners = {("t", 3): Owner(f"{Z2}-0", True)}
    result = plan(view(legacy=(), members=(Z1,), registered=(Z1, Z2), owners=owners))
    assert result.unregister == (Z2,) and result.release == (Release(("t", 3), f"{Z2}-0"),)
    assert result.revoke == {}


def test_a_partition_moving_between_our_members_is_released_and_claimed_in_one_plan_once_quiesced():
    owners = {("t", p): Owner(f"{Z1}-0", True) for p in range(4)}
    v = view(legacy=(), members=(Z1, Z2), registered=(Z1, Z2), owners=owners,
             quiesced=[(("t", 2), Z1), (("t", 3), Z1)])
    result = plan(v)
    assert result.release == (Release(("t", 2), f"{Z1}-0"), Release(("t", 3), f"{Z1}-0"))
    assert result.claim == (Claim(("t", 2), f"{Z2}-0"), Claim(("t", 3), f"{Z2}-0"))


def test_a_registration_that_no_longer_says_what_the_member_wants_is_replaced():
    result = plan(view(member_topics={"t": 2}))
    assert result.unregister == (Z1,) and result.register == (Z1,) and result.claim == ()


def test_a_member_asking_for_fewer_streams_gives_up_its_old_threads_partitions_first():
    owners = {("t", 3): Owner(f"{Z1}-1", True)}  # held for its second stream, which it no longer asks for
    result = plan(view(legacy=(), owners=owners))
    assert result.revoke == {Z1: frozenset({("t", 3)})} and result.release == ()
    quiesced = plan(view(legacy=(), owners=owners, quiesced=[(("t", 3), Z1)]))
    assert quiesced.release == (Release(("t", 3), f"{Z1}-1"),)


def test_a_member_whose_id_another_session_registered_waits_for_it_to_go():
    v = view(legacy=(), registered=())  # nobody's registration yet
    other = View({**v.registrations, Z1: static(Z1, t=1)}, v.topics, {}, v.members, frozenset())
    result = plan(other)  # the previous owner daemon's session still holds Z1's registration
    assert result.blocked == (Z1,) and result.register == () and result.claim == () and not result.settled
    stale_elsewhere = View({Z1: static(Z1, t=2)}, v.topics, {}, v.members, frozenset())
    assert plan(stale_elsewhere).register == () and plan(stale_elsewhere).unregister == ()


def test_znodes_not_ours_are_never_released_whatever_name_they_hold():
    owners = {("t", 0): Owner(f"{Z1}-0", ours=False)}  # our name, another session (an old daemon's)
    result = plan(view(owners=owners))
    assert result.release == () and result.waiting == {}  # ("t", 0) is legacy a's range: not our business


def test_legacy_holders_that_are_not_the_range_answer_are_reported():
    # roundrobin over 4 partitions, g_a and g_b: a holds 0 and 2, b holds 1 and 3; range would give a 0-1, b 2-3
    owners = {("t", p): Owner(f"g_{'ab'[p % 2]}-0", ours=False) for p in range(4)}
    result = plan(view(legacy=("g_a", "g_b"), members=(), registered=(), owners=owners))
    assert result.disagreeing == {("t", 1): "g_b-0", ("t", 2): "g_a-0"}
    agreeing = {("t", p): Owner(f"g_{'aabb'[p]}-0", ours=False) for p in range(4)}
    assert plan(view(legacy=("g_a", "g_b"), members=(), registered=(), owners=agreeing)).disagreeing == {}


def test_a_member_keyed_under_another_id_is_refused():
    v = View({}, {"t": (0,)}, {}, {"x": Member("y", {"t": 1})})
    with pytest.raises(UsageError, match="member keyed 'x' stands for consumer 'y'"):
        plan(v)


@pytest.mark.parametrize("topics", [{}, {"t": 0}])
def test_a_member_without_topics_or_streams_is_refused(topics):
    with pytest.raises(UsageError):
        Member("c", topics)


# -- retries ----------------------------------------------------------------------------------------

def test_the_schedule_backs_off_then_gives_up_after_max_retries():
    attempts = Attempts.start(RetrySchedule(), now_ms=0)  # Kafka's defaults: 4 tries, 2000 ms apart
    times = []
    now = 0
    while not attempts.gave_up:
        assert attempts.due(now)
        times.append(now)
        attempts = attempts.failed(now + 10)
        now = attempts.next_at_ms if attempts.next_at_ms is not None else now
        assert attempts.gave_up or not attempts.due(now - 1)
    assert times == [0, 2010, 4020, 6030] and attempts.failures == 4 and not attempts.due(10**9)


def test_a_released_znode_makes_the_next_attempt_due_at_once():
    attempts = Attempts.start(RetrySchedule(4, 2000), 0).failed(100)
    assert not attempts.due(500) and attempts.released(500).due(500)
    assert attempts.released(500).failed(600).failures == 2


@pytest.mark.parametrize("kwargs", [{"max_retries": 0}, {"backoff_ms": -1}, {"max_retries": True}])
def test_bad_legacy_settings_are_config_errors(kwargs):
    with pytest.raises(ConfigError, match="rebalance"):
        RetrySchedule(**kwargs)


def test_a_legacy_range_left_unowned_for_two_back_offs_needs_a_nudge():
    v = view(legacy=("g_a",), owners={("t", 2): Owner(f"{Z1}-0", True), ("t", 3): Owner(f"{Z1}-0", True),
                                      ("t", 0): Owner("g_a-0", False)})
    assert plan(v).unowned == {("t", 1)}  # g_a's range; nobody holds it (g_a mid-rebalance, or it gave up)
    schedule = RetrySchedule(backoff_ms=500)
    assert [needs_nudge(s, 2000, schedule) for s in (None, 1001, 1000)] == [False, False, True]


def test_patience_is_what_a_legacy_consumer_waits_at_least():
    assert RetrySchedule().patience_ms == 8000
