"""The offset commits' multi-ops as bytes (zkcoord.zk.jute) against kazoo's own
encoding of the same ops, and the reading of a multi's answer."""

from __future__ import annotations

import struct

from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError, RuntimeInconsistency
from kazoo.protocol.serialization import CheckVersion, Create, Delete, MultiHeader, SetData, Transaction
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from zkcoord.zk.jute import EncodedMulti, MultiRefused, OpCodec


def _kazoo(*ops) -> bytes:
    return bytes(Transaction(list(ops)).serialize())


def test_each_op_is_the_bytes_kazoo_writes():
    codec = OpCodec()
    ops = [codec.set_data("/consumers/g/offsets/t/0", b"42"),
           codec.create("/consumers/g/offsets/t/1", b"7"),
           codec.delete("/consumers/g/offsets-metadata/t/0"),
           codec.check("/coordinators/g/owner/x__lock__0000000001", 0)]
    expected = _kazoo(SetData("/consumers/g/offsets/t/0", b"42", -1),
                      Create("/consumers/g/offsets/t/1", b"7", OPEN_ACL_UNSAFE, 0),
                      Delete("/consumers/g/offsets-metadata/t/0", -1),
                      CheckVersion("/coordinators/g/owner/x__lock__0000000001", 0))
    assert EncodedMulti(ops).serialize() == expected


def test_chroot_acl_unicode_and_empty_values_as_kazoo_writes_them():
    acl = [make_digest_acl("zkcoord", "secret", all=True)]
    codec = OpCodec("/chroot/x", acl)
    ops = [codec.create("/consumers/gr\u00fcn/offsets/t/0", b""), codec.set_data("/consumers/g/offsets/t/0", b"")]
    expected = _kazoo(Create("/chroot/x/consumers/gr\u00fcn/offsets/t/0", b"", acl, 0),
                      SetData("/chroot/x/consumers/g/offsets/t/0", b"", -1))
    assert EncodedMulti(ops).serialize() == expected
    assert OpCodec("/").path("/a") == OpCodec(None).path("/a")


def _answer(*results: tuple[int, int]) -> bytes:
    """A multi's answer: per op (type, err); type -1 is an error result."""
    out = b""
    for op_type, err in results:
        out += MultiHeader(op_type, False, err).serialize()
        if op_type == -1:
            out += struct.pack("!i", err)
        elif op_type == 5:
            out += b"\0" * 68  # a stat
    return out + MultiHeader(-1, True, -1).serialize()


def test_an_applied_multi_reads_as_nothing_refused():
    assert EncodedMulti.deserialize(_answer((13, 0), (5, 0), (5, 0)), 0) == []


def test_a_refused_multi_names_the_op_that_refused():
    # ops before the culprit are rolled back (0), those after it inconsistent (-2)
    refused = EncodedMulti.deserialize(_answer((-1, 0), (-1, NoNodeError.code), (-1, -2)), 0)
    assert len(refused) == 1 and refused[0].index == 1 and isinstance(refused[0].error, NoNodeError)
    first = EncodedMulti.deserialize(_answer((-1, BadVersionError.code), (-1, -2)), 0)[0]
    assert first.index == 0 and isinstance(first.error, BadVersionError)
    (exists,) = EncodedMulti.deserialize(b"xx" + _answer((-1, 0), (-1, 0), (-1, NodeExistsError.code)), 2)
    assert exists.index == 2


def test_a_refusal_nobody_can_be_blamed_for():
    (unknown,) = EncodedMulti.deserialize(_answer((-1, 0), (-1, -2)), 0)
    assert unknown.index == -1 and isinstance(unknown.error, RuntimeInconsistency)
    (odd,) = EncodedMulti.deserialize(_answer((-1, -999)), 0)  # a code kazoo does not know
    assert odd == MultiRefused(0, odd.error) and "-999" in str(odd.error)
