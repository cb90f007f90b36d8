"""The packed form of a large classic group record (zkcoord.core.packed_record)
and how the store chooses it (zkcoord.zk.state_store.encode_group_state):
round trips (examples and properties), the one-znode JSON kept for every
record that fits it (byte for byte what earlier versions wrote), and every
way a packed state can be damaged or incomplete named as a StateError."""

from __future__ import annotations

import base64
import json
import lzma
import os
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zkcoord.core import groups
from zkcoord.core.group_record import record_problem
from zkcoord.core.packed_record import (
    MAGIC, PACKED_VERSION, header_problem, is_packed, member_count, pack, part_names, unpack,
)
from zkcoord.errors import StateError, StateTooLargeError
from zkcoord.zk.packed_state import decode_state, unpack_state
from zkcoord.zk.state_store import encode_group_state, encode_state


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def member(i: int, metadata: bytes, assignment: bytes | None = None, **extra) -> dict:
    rec = {"id": f"consumer-{i}-{i:08x}", "c": f"consumer-{i}", "h": "/10.0.0.5", "st": 45000, "rt": 300000,
           "p": [["range", b64(metadata)]], **extra}
    if assignment is not None:
        rec["a"] = b64(assignment)
    return rec


def record(members: list[dict], **extra) -> dict:
    rec = {"v": 1, "s": "Stable", "g": 7, "gr": 106, "os": "zookeeper", "pt": "consumer", "pn": "range",
           "l": members[0]["id"] if members else None, "m": members, **extra}
    return {k: v for k, v in rec.items() if v is not None}


SUBSCRIPTION = b"\x00\x03" + b"orders" * 20  # the same for every member, as a group's members mostly send


def big_record(n: int = 200, random_bytes: int = 0) -> dict:
    return record([member(i, SUBSCRIPTION + os.urandom(random_bytes), os.urandom(random_bytes) + bytes([i % 256]) * 40)
                   for i in range(n)])


# -- round trips -----------------------------------------------------------------------------------

@pytest.mark.parametrize("part_bytes", [1, 7, 1000, 10**6])
def test_pack_then_unpack_gives_the_record_back(part_bytes):
    rec = big_record(50, random_bytes=30)
    packed = pack(rec, "tok", part_bytes)
    assert unpack(packed.header, packed.parts) == rec
    assert all(0 < len(p) <= part_bytes for p in packed.parts)
    assert part_names(packed.header) == [f"tok-{i}" for i in range(len(packed.parts))]
    body = b"".join(packed.parts)
    assert packed.header["mz"] == {"c": "xz", "t": "tok", "n": len(packed.parts), "b": len(body),
                                   "crc": zlib.crc32(body)}


def test_the_header_holds_every_key_but_the_members_and_reads_without_its_parts():
    rec = big_record(3) | {"ho": {"consumer-0-00000000": "legacy-1"}}
    packed = pack(rec, "t0", 100)
    header = packed.header
    assert is_packed(header) and header["v"] == PACKED_VERSION and "m" not in header
    assert {k: header[k] for k in ("s", "g", "gr", "os", "pt", "pn", "l", "ho")} == {
        k: rec[k] for k in ("s", "g", "gr", "os", "pt", "pn", "l", "ho")}
    assert member_count(header) == 3 == member_count(rec)
    assert header_problem(header) is None
    assert json.loads(json.dumps(header)) == header  # plain JSON, as the state znode holds it


def test_identical_metadata_is_stored_once():
    rec = record([member(i, SUBSCRIPTION, bytes([i])) for i in range(100)])
    raw = lzma.decompress(b"".join(pack(rec, "t", 10**6).parts))
    assert raw.startswith(MAGIC) and raw.count(SUBSCRIPTION) == 1
    assert unpack(*_parts(pack(rec, "t", 10**6))) == rec


def _parts(packed):
    return packed.header, packed.parts


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_member = st.fixed_dictionaries(
    {"id": _text.filter(bool), "c": _text, "h": _text, "st": st.integers(0, 2**31 - 1),
     "rt": st.integers(-(2**31), 2**31 - 1),
     "p": st.lists(st.tuples(_text, st.binary(max_size=40)).map(lambda p: [p[0], b64(p[1])]), max_size=3)},
    optional={"static": st.booleans(), "a": st.binary(max_size=60).map(b64)}).map(
    lambda m: {**{k: v for k, v in m.items() if k != "static"}, **({"i": "i-" + m["id"]} if m.get("static") else {})})


@settings(max_examples=100, deadline=None)
@given(members=st.lists(_member, min_size=1, max_size=12, unique_by=lambda m: m["id"]),
       part_bytes=st.integers(1, 300), generation=st.integers(0, 2**31 - 1),
       state=st.sampled_from(["Empty", "PreparingRebalance", "CompletingRebalance", "Stable"]),
       token=st.from_regex(r"\A[0-9A-Za-z_]{1,40}\Z"))
def test_round_trip_property(members, part_bytes, generation, state, token):
    rec = {"v": 1, "s": state, "g": generation, "os": "dual", "pt": "consumer", "m": members}
    assert record_problem(rec) is None
    packed = pack(rec, token, part_bytes)
    assert header_problem(packed.header) is None
    assert all(len(p) <= part_bytes for p in packed.parts)
    assert unpack(packed.header, list(packed.parts)) == rec
    assert groups.from_record("g", unpack_state("g", packed.header, list(packed.parts))) == \
        groups.from_record("g", rec)


# -- the store's choice: the one-znode JSON whenever it fits ---------------------------------------------

def test_a_record_that_fits_is_stored_as_earlier_versions_stored_it():
    rec = big_record(5)
    stored = encode_group_state("g", rec, max_state_bytes=1_000_000)
    assert stored.parts == () and stored.data == encode_state("g", rec)
    assert stored.data == json.dumps(rec, separators=(",", ":"), ensure_ascii=False).encode()
    assert decode_state("g", "/coordinators/g/state", stored.data) == rec


def test_a_state_written_by_an_earlier_version_still_loads():
    # The bytes a zkcoord before the packed format wrote (format 1, one znode).
    data = (b'{"v":1,"s":"Stable","g":7,"os":"zookeeper","pt":"consumer","pn":"range","l":"m-1",'
            b'"m":[{"id":"m-1","c":"c","h":"/h","st":10000,"rt":300000,"p":[["range","AAE="]],"a":"AAI="}]}')
    rec = decode_state("g", "/coordinators/g/state", data)
    group = groups.from_record("g", rec)
    assert (group.generation_id, list(group.members), group.members["m-1"].assignment) == (7, ["m-1"], b"\x00\x02")


def test_a_record_over_the_znode_limit_is_packed_in_parts_of_at_most_that_size():
    rec = big_record(300, random_bytes=20)
    plain = len(json.dumps(rec, separators=(",", ":")))
    stored = encode_group_state("g", rec, max_state_bytes=4096, token="abc")
    assert plain > 4096 and len(stored.parts) > 1
    assert all(len(data) <= 4096 for _, data in stored.parts) and len(stored.data) <= 4096
    header = json.loads(stored.data)
    assert [name for name, _ in stored.parts] == part_names(header) == [f"abc-{i}" for i in range(len(stored.parts))]
    assert unpack_state("g", header, [data for _, data in stored.parts]) == rec
    assert stored.total_bytes < plain / 2


def test_too_large_even_packed_names_both_sizes_and_writes_nothing():
    rec = big_record(100, random_bytes=200)  # incompressible
    with pytest.raises(StateTooLargeError, match=r"bytes as one JSON znode and \d+ bytes packed .* over the limit "
                                                  r"of 10000 bytes \(--max-group-state-bytes\)"):
        encode_group_state("g", rec, max_state_bytes=2048, max_group_state_bytes=10_000)


def test_only_a_classic_record_is_packed():
    consumer = {"v": 1, "t": "consumer", "ge": 1, "ae": 1, "rx": {"x" * 5000: {"t": [], "ver": 1, "ts": 1}}}
    with pytest.raises(StateTooLargeError, match="over the limit of 1024 bytes"):
        encode_group_state("g", consumer, max_state_bytes=1024)


# -- damaged or partial states ------------------------------------------------------------------------------

@pytest.fixture
def packed():
    return pack(big_record(40, random_bytes=20), "tok", 500)


def test_a_missing_part_is_named(packed):
    with pytest.raises(StateError, match=r"names \d+ part\(s\), \d+ were given"):
        unpack(packed.header, packed.parts[:-1])


def test_parts_out_of_order_or_of_another_write_do_not_add_up(packed):
    other = pack(big_record(40, random_bytes=20), "new", 500)
    mixed = (other.parts[0],) + packed.parts[1:]
    for parts in ([packed.parts[1], packed.parts[0], *packed.parts[2:]], mixed):
        with pytest.raises(StateError, match="are not the body its header names .* parts of another write, or damaged"):
            unpack(packed.header, parts)


def test_a_damaged_body_with_a_matching_header_is_named():
    body = b"not an xz stream"
    header = {"v": 2, "s": "Stable", "g": 1, "mc": 1,
              "mz": {"c": "xz", "t": "x", "n": 1, "b": len(body), "crc": zlib.crc32(body)}}
    with pytest.raises(StateError, match="not a valid xz stream"):
        unpack(header, [body])


def _forged(raw: bytes, members: int = 1):
    body = lzma.compress(raw, format=lzma.FORMAT_XZ)
    return {"v": 2, "s": "Stable", "g": 1, "mc": members,
            "mz": {"c": "xz", "t": "x", "n": 1, "b": len(body), "crc": zlib.crc32(body)}}, [body]


def _raw(listing: bytes, tail: bytes = b"") -> bytes:
    return MAGIC + bytes([len(listing)]) + listing + tail


@pytest.mark.parametrize("raw, problem", [
    (b"XXXX\x02[]", "does not start with"),
    (MAGIC + b"\x7f[]", "runs past the end"),
    (_raw(b'[{"id":"a","p":[["r",3]]}]'), "blob index 3 is not one of the body's 0 blobs"),
    (_raw(b'[{"id":"a","a":"x"}]'), "blob index 'x'"),
    (_raw(b"{}"), "not a list"),
    (_raw(b"[]", b"\x05ab"), "a blob runs past the end"),
])
def test_a_body_that_is_not_this_layout_is_named(raw, problem):
    header, parts = _forged(raw)
    with pytest.raises(StateError, match="not a valid member list"):
        try:
            unpack(header, parts)
        except StateError as exc:
            assert problem in str(exc)
            raise


def test_a_member_count_that_disagrees_is_named():
    header, parts = _forged(MAGIC + b"\x02[]", members=3)
    with pytest.raises(StateError, match="counts 3 members, its body holds 0"):
        unpack(header, parts)


@pytest.mark.parametrize("change, problem", [
    (lambda h: h["mz"].update(c="zstd"), "codec 'zstd' is not one this zkcoord reads"),
    (lambda h: h["mz"].update(t="../x"), "token 't' is '../x'"),
    (lambda h: h["mz"].update(n=0), "part count 'n' is 0"),
    (lambda h: h["mz"].update(b=-1), "body length 'b' is -1"),
    (lambda h: h["mz"].update(crc=2**32), "checksum 'crc'"),
    (lambda h: h.update(mz=[]), "body 'mz' is [], not an object"),
    (lambda h: h.update(mc="3"), "member count 'mc' is '3'"),
    (lambda h: h.update(m=[]), "holds members ('m') beside its packed body"),
])
def test_header_problems_are_named(packed, change, problem):
    header = json.loads(json.dumps(packed.header))
    change(header)
    assert problem in header_problem(header)
    data = json.dumps(header).encode()
    with pytest.raises(StateError, match="is not a valid group record"):
        decode_state("g", "/coordinators/g/state", data)


def test_a_packed_header_is_not_mistaken_for_a_group_without_members(packed):
    with pytest.raises(StateError, match="packed record's header"):
        groups.from_record("g", packed.header)


def test_a_packed_state_whose_record_is_invalid_is_named():
    rec = big_record(2)
    rec["m"][1]["id"] = rec["m"][0]["id"]  # two members with one id
    p = pack(rec, "t", 1000)
    with pytest.raises(StateError, match="is not a valid group record: member .* appears twice"):
        unpack_state("g", p.header, list(p.parts))
