"""The pure rules of issue 16: legacy values, state-record validation, int32 generations."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_group_support import GROUP_ID, Harness, stable_harness

from zkcoord.core.group import GroupConfig, from_record, load_group, to_record
from zkcoord.core.group_record import record_problem
from zkcoord.core.legacy_values import Unparsable, partition_number, read_legacy_value
from zkcoord.core.migration import parse_legacy_offset
from zkcoord.core.rebalance import MAX_GENERATION, following_generation, generation_reserved
from zkcoord.errors import StateError

CFG = GroupConfig()


# -- legacy values -----------------------------------------------------------------------------
@pytest.mark.parametrize("raw, expected", [
    (b"42", 42), (" 7\n", 7), (b"-1", -1), (b"0", 0), (str(2**63 - 1).encode(), 2**63 - 1),
    (b"-2", -2), (b"-5", -5), (str(-2**63).encode(), -2**63),  # Kafka stores and fetches any int64
    (b"000000000000000000000000000042", 42),
])
def test_offsets_that_are_read(raw, expected):
    assert read_legacy_value(raw) == expected


@pytest.mark.parametrize("raw, reason", [
    (None, "no data"), (b"", "empty"), (b"  \n", "empty"), (b"\xff\xfe", "not UTF-8"),
    (b"12abc", "not a decimal number"), (b"+5", "not a decimal number"), ("٣".encode(), "not a decimal number"),
    (str(-2**63 - 1).encode(), "out of range: below -2^63 (int64)"),
    (b"-" + b"9" * 30, "out of range: below -2^63 (int64)"),
    (str(2**63).encode(), "out of range: more than 2^63-1 (int64)"),
    (str(2**70).encode(), "out of range: more than 2^63-1 (int64)"),
    (b"9" * 5000, "too long: 5000 bytes (an offset is at most 19 digits)"),
])
def test_values_that_are_not_offsets_say_why(raw, reason):
    assert read_legacy_value(raw) == Unparsable(reason)
    assert parse_legacy_offset(raw if raw is None else raw.decode("utf-8", "replace")) is None


@given(st.one_of(st.integers(-2**66, 2**66).map(str), st.integers(0, 10**20).map(lambda n: f"{n:020d}"),
                 st.text(alphabet="0123456789", max_size=25), st.text(alphabet="0123456789-+ \n\t٣²a", max_size=25),
                 st.text(max_size=25)))
def test_text_reads_as_its_bytes_do(text):
    """A value as text (what the adapters pass, where plain digits take a short path) reads as the same
    value as bytes (always the whole path), the int or that it is not one."""
    found, expected = read_legacy_value(text), read_legacy_value(text.encode())
    if isinstance(expected, int):
        assert found == expected
    else:
        assert isinstance(found, Unparsable)


@pytest.mark.parametrize("name, expected", [
    ("0", 0), ("2147483647", 2**31 - 1), ("2147483648", None), ("9" * 5000, None), ("-1", None), ("x", None),
    ("٣", None), ("", None),
])
def test_partition_names(name, expected):
    assert partition_number(name) == expected


# -- state records -------------------------------------------------------------------------------
def valid() -> dict:
    return json.loads(json.dumps(to_record(stable_harness(2).group)))


@pytest.mark.parametrize("mutate, problem", [
    (lambda r: r.update(m=5), "members 'm' is a number, not a list"),
    (lambda r: r.update(v=3), "unsupported record version 3"),
    (lambda r: r.update(v=2), "a packed record's header (version 2)"),
    (lambda r: r.pop("v"), "the record has no version ('v')"),
    (lambda r: r.update(v=True), "unsupported record version True"),
    (lambda r: r.update(s="Sleeping"), "state 's' is 'Sleeping'"),
    (lambda r: r.pop("g"), "generation 'g' is None"),
    (lambda r: r.update(g=2**31), "generation 'g' is 2147483648, not a whole number from 0 to 2147483647"),
    (lambda r: r.update(g=-1), "generation 'g' is -1"),
    (lambda r: r.update(g=1.5), "generation 'g' is 1.5"),
    (lambda r: r.update(gr=2**40), "reserved generation 'gr' is 1099511627776"),
    (lambda r: r.update(os="mysql"), "offset storage 'os' is 'mysql'"),
    (lambda r: r.update(l=7), "leader 'l' is a number, not a string"),
    (lambda r: r["m"].append(5), "member 2 is a number, not an object"),
    (lambda r: r["m"][0].pop("id"), "member 0 has no member id ('id')"),
    (lambda r: r["m"][0].update(st="soon"), "session timeout 'st' is 'soon'"),
    (lambda r: r["m"][0].update(st=2**31), "session timeout 'st' is 2147483648"),
    (lambda r: r["m"][0].update(rt=-(2**31) - 1), "rebalance timeout 'rt' is -2147483649"),
    (lambda r: r["m"][0].update(p=[["range"]]), "protocol ['range'] is not a [name, metadata] pair"),
    (lambda r: r["m"][0].update(a="!!"), "assignment 'a' is not valid base64"),
    (lambda r: r["m"].append(dict(r["m"][0])), "appears twice"),
])
def test_record_problems_are_named_and_from_record_refuses_them(mutate, problem):
    record = valid()
    assert record_problem(record) is None
    mutate(record)
    assert problem in record_problem(record)
    with pytest.raises(StateError, match="not a valid group record"):
        from_record(GROUP_ID, record)


def test_every_record_zkcoord_writes_is_valid():
    h = stable_harness(3, instance_ids=True)
    assert record_problem(json.loads(json.dumps(to_record(h.group)))) is None
    h.join("j", "m1")  # PreparingRebalance with a reservation
    assert all(record_problem(json.loads(json.dumps(r))) is None for r in h.records)


# -- generations at the int32 top -------------------------------------------------------------
def test_generation_rule():
    assert [following_generation(g) for g in (0, 1, MAX_GENERATION - 1, MAX_GENERATION)] == \
        [1, 2, MAX_GENERATION, 1]
    assert generation_reserved(MAX_GENERATION, MAX_GENERATION)
    assert not generation_reserved(1, MAX_GENERATION)  # a wrapped number is never taken as reserved
    assert generation_reserved(100, 100) and generation_reserved(1, 100) and not generation_reserved(101, 100)


def loaded(record: dict, now: int = 500_000) -> Harness:
    out = load_group(from_record(GROUP_ID, record), now, CFG)
    return Harness(group=out.group, now=now, timers={t.key: t.deadline_ms for t in out.timers})


def rebalance(h: Harness, tag: str) -> int:
    """The leader rejoins (a rebalance), the follower too, both sync: the new generation."""
    h.join(f"l{tag}", "m1")
    h.join(f"f{tag}", "m2")
    generation = h.payload(f"f{tag}").generation_id
    assert h.payload(f"l{tag}").generation_id == generation
    h.sync(f"sf{tag}", "m2", generation=generation)
    h.sync(f"sl{tag}", "m1", generation=generation, assignments={"m1": b"a", "m2": b"b"})
    assert h.group.state.value == "Stable" and h.records[-1]["g"] == generation
    return generation


def test_generations_wrap_at_int32_with_a_fresh_reservation_and_never_pass_it():
    record = to_record(stable_harness(2).group)
    record.update(g=MAX_GENERATION - 2, gr=MAX_GENERATION - 1)
    h = loaded(record)
    # Taken over: the next generation follows the loaded reservation; the new block stops at int32.
    assert rebalance(h, "1") == MAX_GENERATION
    assert h.records[-1].get("gr", h.records[-1]["g"]) == MAX_GENERATION  # absent: equal to g
    # The next one wraps to 1, writing a reservation of 1..100 as the rebalance starts.
    written = len(h.records)
    assert rebalance(h, "2") == 1
    assert h.records[written]["gr"] == 100 and h.records[written]["g"] == MAX_GENERATION
    assert rebalance(h, "3") == 2
    for rec in h.records:
        assert record_problem(json.loads(json.dumps(rec))) is None
        assert 0 <= rec["g"] <= MAX_GENERATION and 0 <= rec.get("gr", 0) <= MAX_GENERATION


def test_a_new_owner_starts_after_a_wrapped_reservation():
    record = to_record(stable_harness(2).group)
    record.update(g=MAX_GENERATION, gr=100)  # the old owner wrapped and may have handed out 1..100
    h = loaded(record)
    assert h.group.generation_id == MAX_GENERATION
    assert rebalance(h, "1") == 101
    assert h.records[-1]["gr"] == 200
