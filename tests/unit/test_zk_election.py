"""The one reading of a group's election (zkcoord.zk.election): order and
the answer to a contender that holds no node id."""

from __future__ import annotations

import pytest

from zkcoord.errors import StateError
from zkcoord.zk import election


def test_contenders_are_ordered_by_their_sequence_as_a_number():
    names = ["b__lock__0000000010", "junk", "a__lock__0000000009", "c__lock__2147483647", "lock"]
    assert election.ordered(names) == ["a__lock__0000000009", "b__lock__0000000010", "c__lock__2147483647"]
    assert election.ordered([]) == []


@pytest.mark.parametrize("data, node_id", [(b"1", 1), (b"2147483647", 2**31 - 1), (b" 7\n", 7)])
def test_a_contender_holds_a_node_id(data, node_id):
    assert election.node_id_of("g", "/coordinators/g/owner/x__lock__0000000001", data) == node_id


@pytest.mark.parametrize("data", [b"", b"-1", b"abc", b"\xff\xfe", b"1.5"])
def test_anything_else_is_a_state_error_naming_the_znode(data):
    with pytest.raises(StateError, match="/coordinators/g/owner/x__lock__0000000001.*nobody can tell who owns"):
        election.node_id_of("g", "/coordinators/g/owner/x__lock__0000000001", data)
