"""Group ids as znode names (zkcoord.zk.paths.group_name / group_id_of):
every id Kafka accepts has a name, names of ids that were valid znode names
never change, and no two ids share a name."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zkcoord.zk import paths

EMOJI = "orders-\U0001F642"


@pytest.mark.parametrize("group", ["payments", "a.b-c_d", "grüppe", "50%", "%", "%x%%", "x" * 249, "ab__lock__1"])
def test_ids_that_are_znode_names_keep_their_name(group):
    assert paths.group_name(group) == group
    assert paths.state(group) == f"/coordinators/{group}/state"
    assert paths.OffsetPaths().offsets_dir(group) == f"/consumers/{group}/offsets"


@pytest.mark.parametrize("group, name", [
    ("", "%%"), (".", "%%."), ("..", "%%.."), ("a/b", "%%a%2Fb"), ("/", "%%%2F"),
    (EMOJI, "%%orders-%F0%9F%99%82"), ("tab\there", "%%tab%09here"), ("priv\ue000", "%%priv%EE%80%80"),
    ("%%x", "%%%25%25x"), ("%%", "%%%25%25"), ("%%a%2Fb", "%%%25%25a%252Fb"),
])
def test_other_ids_are_encoded(group, name):
    assert paths.group_name(group) == name
    assert paths.group_id_of(name) == group
    paths.component(name, "encoded name")  # ZooKeeper takes it


@pytest.mark.parametrize("name", ["%%%41", "%%a/b", "%%%2f", "%%%FF", "%%\U0001F642", "%%%"])
def test_names_no_id_has_are_skipped(name):
    assert paths.group_id_of(name) is None
    assert paths.group_ids([name, "g"]) == ["g"]


def test_listings_decode():
    names = [paths.group_name(g) for g in ["b", EMOJI, "", "a/b"]]
    assert paths.group_ids(names) == sorted(["b", EMOJI, "", "a/b"])


@settings(max_examples=2000)
@given(st.text())
def test_every_id_round_trips_through_a_valid_znode_name(group):
    name = paths.group_name(group)
    paths.component(name, "group znode name")
    assert paths.group_id_of(name) == group


@settings(max_examples=2000)
@given(st.text(), st.text())
def test_no_two_ids_share_a_name(a, b):
    if a != b:
        assert paths.group_name(a) != paths.group_name(b)


@settings(max_examples=2000)
@given(st.text(alphabet=st.sampled_from("%%2F5aA/.\U0001F642"), max_size=8))
def test_names_that_look_encoded_are_not_confused(text):
    # ids made of the encoding's own characters: each decodes back to itself only
    name = paths.group_name(text)
    assert paths.group_id_of(name) == text
    decoded = paths.group_id_of(text)
    assert decoded is None or paths.group_name(decoded) == text
