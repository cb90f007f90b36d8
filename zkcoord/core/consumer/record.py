"""What a consumer group stores in ZooKeeper, and reading it back.

A consumer group is stored as one small group record (the state znode,
``/coordinators/<group>/state``) and one record per member
(``/coordinators/<group>/members/<member>``), so that a step of one member
writes that member's record only, and a group of 1,000 members over 10,000
partitions never needs a znode over ZooKeeper's 1 MB limit. The records are
what Kafka's coordinator writes to ``__consumer_offsets`` for the same
group (``ConsumerGroupMetadata``, ``...TargetAssignmentMetadata``,
``...RegularExpression``; per member ``...MemberMetadata``,
``...TargetAssignmentMember``, ``...CurrentMemberAssignment``), grouped by
znode. Compact JSON, short keys, absent values left out::

    group:  {"v": 1, "t": "consumer", "os": "zookeeper", "ge": 7, "ae": 7, "at": 1795..., "mh": -123...,
             "rx": {"orders-.*": {"t": ["orders-eu"], "ver": 3, "ts": 1795...}},
             "ho": {"<member id>": "<legacy consumer id>"}}
    member: {"v": 1, "id": "<member id>", "e": 7, "pe": 6, "s": 0, "i": "<instance id>", "r": "<rack>",
             "rt": 300000, "c": "<client id>", "h": "/10.0.0.5", "tn": ["orders"], "rx": "<regex>",
             "sa": "uniform", "a": {"<topic id>": [[0, 7], [1, 7]]}, "pr": {...},
             "tg": {"<topic id>": [0, 1]}, "te": 7, "cl": {"st": 45000, "p": [["range", "<b64>"]]}}

A member record whose JSON would be over :data:`FOLD_OVER_BYTES` (a member
holding thousands of partitions: the first member of a group over 100,000
partitions holds them all until others join) is written with runs
of consecutive partitions folded (:func:`compact_member_record`): in ``a``
and ``pr`` an entry ``[p, e, n]`` stands for partitions ``p`` to
``p + n - 1``, each at epoch ``e``; in ``tg`` an entry ``[p, n]`` for
partitions ``p`` to ``p + n - 1``. Reading gives back the same partitions
in the same order; a record that fits is written as before.

Since version 3 of the group record (2 is a packed classic state's
header), the target assignment is not in the member records: it is one
record of its own (``/coordinators/<group>/target``,
:func:`to_target_record`), written only when the target changes, so that a
new target for 1,000 members over 100,000 partitions is one write of a few
hundred KB instead of 1,000 member records, and a member's reconciliation
step writes that member's record alone::

    target: {"v": 1, "ae": 7, "n": 1000, "z": "<base64 of zlib of {member id: {topic id: [partitions]}}>"}

The partitions keep their order (Kafka's record order, which answers
follow), with runs of consecutive ones folded as above. A version 1 group
record (an earlier zkcoord: each member record holds its ``tg`` and ``te``) is
still read; the owner that loads it writes it again in version 3 at once
(``targets_in_members``), and a zkcoord that reads only version 1 refuses a
version 3 record (it would take the missing targets for empty ones).

``te`` is the assignment epoch a member's target was written at. ``ho`` is
only there while the group is in a live handover from legacy ZooKeeper
consumers (the classic group record's ``ho``: :mod:`zkcoord.core.handover`). A target
computed for many members may need several multi-ops; the group record,
which holds the target's epoch (``ae``), is written last. A new owner that
finds a target record (version 1: a member target) newer than ``ae`` (a
write cut in the middle) moves the group epoch on, so that a fresh target is computed; members' current
assignments are always whole (each is written with its member), and no
partition is ever given while another member holds it, so such a cut loses
no safety.

:func:`record_problem` checks a decoded record the way
:func:`zkcoord.core.group_record.record_problem` checks a classic one.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from zkcoord.core.consumer.model import (
    EMPTY_CURRENT, EMPTY_TARGET, ClassicMetadata, ConsumerGroup, ConsumerMember, Current, MemberState,
    ResolvedRegex, Target,
)
from zkcoord.core.frozenmap import FrozenMap
from zkcoord.core.legacy_values import INT32_MAX
from zkcoord.core.membership import OFFSET_STORAGES
from zkcoord.errors import StateError

__all__ = ["KIND_NAME", "RECORD_VERSION", "MEMBERS_KEY", "TARGET_KEY", "to_group_record", "to_member_record",
           "to_target_record", "from_records", "record_problem", "member_problem", "target_problem",
           "target_topic_ids", "compact_member_record"]

KIND_NAME = "consumer"
RECORD_VERSION = 3  # 3: the target in a record of its own (TARGET_KEY); 1: in each member record
RECORD_VERSIONS = (1, 3)  # what this zkcoord reads (2 is a packed classic state's header: zkcoord.core.packed_record)
TARGET_VERSION = 1
MEMBERS_KEY = "members"  # in a loaded record: the member records read beside it
TARGET_KEY = "target"  # in a loaded record: the target record read beside it (absent: none stored)
_INT32_MIN = -(2**31)
_INT64 = (-(2**63), 2**63 - 1)
MAX_RUN = 2**24  # the longest run of partitions one folded entry may stand for
FOLD_OVER_BYTES = 16_384  # a member record larger than this is written with its runs of partitions folded


def _int(value: object, low: int = _INT32_MIN, high: int = INT32_MAX) -> bool:
    return type(value) is int and low <= value <= high  # noqa: E721


# -- writing ----------------------------------------------------------------------------------

def to_group_record(group: ConsumerGroup) -> dict[str, Any]:
    record: dict[str, Any] = {"v": RECORD_VERSION, "t": KIND_NAME, "os": group.offset_storage,
                              "ge": group.group_epoch, "ae": group.assignment_epoch}
    if group.assignment_timestamp_ms:
        record["at"] = group.assignment_timestamp_ms
    if group.metadata_hash:
        record["mh"] = group.metadata_hash
    if group.resolved_regexes:
        record["rx"] = {regex: {"t": sorted(r.topics), "ver": r.version, "ts": r.timestamp_ms}
                        for regex, r in group.resolved_regexes.items()}
    if group.handover_ids is not None:
        record["ho"] = dict(group.handover_ids)
    return record


def _current(current: Current) -> dict[str, list[list[int]]]:
    return {t: [[p, e] for p, e in partitions.items()] for t, partitions in current.items()}


def to_target_record(group: ConsumerGroup) -> dict[str, Any]:
    """The group's target assignment as one record (the module's format):
    every member's target, in its order, folded and compressed."""
    targets = {m: {t: _fold(list(p)) for t, p in target.items() if p} for m, target in group.targets.items()
               if target}
    packed = json.dumps(targets, separators=(",", ":"), ensure_ascii=False).encode()
    return {"v": TARGET_VERSION, "ae": group.assignment_epoch, "n": len(targets),
            "z": base64.b64encode(zlib.compress(packed, 6)).decode()}


def _targets_from(rec: Mapping[str, Any]) -> dict[str, Target]:
    """member id -> target of a target record (checked by :func:`target_problem`)."""
    return {m: FrozenMap((t, _partitions(p)) for t, p in target.items() if p) or EMPTY_TARGET
            for m, target in _unpacked(rec).items()}


def target_topic_ids(rec: Mapping[str, Any]) -> set[str]:
    """The topic ids a (valid) target record assigns."""
    return {topic_id for target in _unpacked(rec).values() for topic_id in target}


def _unpacked(rec: Mapping[str, Any]) -> Any:
    return json.loads(zlib.decompress(base64.b64decode(rec["z"], validate=True)).decode())


def to_member_record(member: ConsumerMember, target: Target | None = None, target_epoch: int = 0) -> dict[str, Any]:
    """A member's record; ``target`` given: with its target and the target's
    epoch, as version 1 wrote it (the group's target is a record of its own
    since version 3: :func:`to_target_record`)."""
    record: dict[str, Any] = {"v": 1, "id": member.member_id, "e": member.member_epoch,
                              "pe": member.previous_member_epoch, "s": member.state.value,
                              "rt": member.rebalance_timeout_ms, "c": member.client_id, "h": member.client_host}
    optional = (("i", member.instance_id), ("r", member.rack_id), ("rx", member.subscribed_topic_regex or None),
                ("sa", member.server_assignor))
    record.update({k: v for k, v in optional if v is not None})
    if member.subscribed_topic_names:
        record["tn"] = list(member.subscribed_topic_names)
    if member.assigned:
        record["a"] = _current(member.assigned)
    if member.pending_revocation:
        record["pr"] = _current(member.pending_revocation)
    if target is not None:
        if target:
            record["tg"] = {t: list(p) for t, p in target.items()}
        record["te"] = target_epoch
    if member.classic is not None:
        record["cl"] = {"st": member.classic.session_timeout_ms,
                        "p": [[name, base64.b64encode(meta).decode()] for name, meta in member.classic.protocols]}
    return record


def compact_member_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` (written by :func:`to_member_record`) with its runs of
    consecutive partitions folded (module docstring).

    >>> compact_member_record({"id": "m", "a": {"T": [[0, 3], [1, 3], [2, 3], [7, 4]]}, "tg": {"T": [0, 1, 2, 5]}})
    {'id': 'm', 'a': {'T': [[0, 3, 3], [7, 4]]}, 'tg': {'T': [[0, 3], 5]}}
    """
    out = dict(record)
    for key in ("a", "pr"):
        if key in record:
            out[key] = {t: _fold_pairs(pairs) for t, pairs in record[key].items()}
    if "tg" in record:
        out["tg"] = {t: _fold(partitions) for t, partitions in record["tg"].items()}
    return out


def _fold_pairs(pairs: list) -> list:
    out: list = []
    for p, e in pairs:
        last = out[-1] if out else None
        if last is not None and last[1] == e and p == last[0] + (last[2] if len(last) == 3 else 1):
            if len(last) == 2:
                last.append(1)
            last[2] += 1
        else:
            out.append([p, e])
    return out


def _fold(partitions: list) -> list:
    runs: list[list[int]] = []
    for p in partitions:
        if runs and p == runs[-1][0] + runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([p, 1])
    out: list = []
    for start, n in runs:
        if n == 1:
            out.append(start)
        elif n == 2 and len(f"{start}, {start + 1}") <= len(f"[{start}, 2]"):
            out += (start, start + 1)  # a run of two small numbers is shorter written out
        else:
            out.append([start, n])
    return out


# -- reading ----------------------------------------------------------------------------------

def _pairs(entries: list):
    for entry in entries:
        if len(entry) == 2:
            yield entry[0], entry[1]
        else:
            p, e, n = entry
            for i in range(n):
                yield p + i, e


def _partitions(entries: list) -> tuple[int, ...]:
    if all(type(p) is int for p in entries):  # noqa: E721 (not folded: the common case)
        return tuple(entries)
    out: list[int] = []
    for entry in entries:
        if type(entry) is int:  # noqa: E721
            out.append(entry)
        else:
            out.extend(range(entry[0], entry[0] + entry[1]))
    return tuple(out)


def _current_from(raw: Mapping[str, Any]) -> Current:
    return FrozenMap((t, FrozenMap(_pairs(pairs))) for t, pairs in raw.items() if pairs)


def _member_from(rec: Mapping[str, Any]) -> tuple[ConsumerMember, Target, int]:
    classic = None
    if "cl" in rec:
        classic = ClassicMetadata(rec["cl"]["st"], tuple((n, base64.b64decode(m)) for n, m in rec["cl"]["p"]))
    member = ConsumerMember(
        member_id=rec["id"], member_epoch=rec["e"], previous_member_epoch=rec["pe"], state=MemberState.of(rec["s"]),
        instance_id=rec.get("i"), rack_id=rec.get("r"), rebalance_timeout_ms=rec["rt"], client_id=rec["c"],
        client_host=rec["h"], subscribed_topic_names=tuple(rec.get("tn", ())),
        subscribed_topic_regex=rec.get("rx", ""), server_assignor=rec.get("sa"),
        assigned=_current_from(rec.get("a", {})) or EMPTY_CURRENT,
        pending_revocation=_current_from(rec.get("pr", {})) or EMPTY_CURRENT, classic=classic)
    target = FrozenMap((t, _partitions(p)) for t, p in rec.get("tg", {}).items() if p) or EMPTY_TARGET
    return member, target, rec.get("te", 0)


def from_records(group_id: str, record: Mapping[str, Any]) -> tuple[ConsumerGroup, bool]:
    """The group a loaded record holds (with its member records under
    :data:`MEMBERS_KEY`), and whether a target write was cut (a member's
    target newer than the group's target epoch: the module's rule)."""
    problem = record_problem(record)
    if problem is not None:
        raise StateError(f"group {group_id!r}: the consumer group record is not valid: {problem}")
    regexes = FrozenMap((regex, ResolvedRegex(frozenset(r["t"]), r["ver"], r["ts"]))
                        for regex, r in record.get("rx", {}).items())
    group = ConsumerGroup(group_id, offset_storage=record.get("os", "zookeeper"), group_epoch=record["ge"],
                          assignment_epoch=record["ae"], assignment_timestamp_ms=record.get("at", 0),
                          metadata_hash=record.get("mh", 0), resolved_regexes=regexes,
                          handover_ids=FrozenMap(record["ho"]) if "ho" in record else None)
    cut = False
    apart = record.get(TARGET_KEY)
    targets = _targets_from(apart) if apart is not None else {}
    for rec in record.get(MEMBERS_KEY, ()):
        member, target, target_epoch = _member_from(rec)
        if apart is not None:
            target = targets.get(member.member_id, EMPTY_TARGET)
        group = group.with_member(member).with_target(member.member_id, target)
        cut |= target_epoch > group.assignment_epoch
    if apart is not None:  # with a version 1 record: a rewrite cut after the member records, all rewritten
        cut |= apart["ae"] > group.assignment_epoch
    elif record["v"] == 1:
        group = replace(group, targets_in_members=True)
    else:
        cut = True  # version 3 without its target record (deleted by hand?): computed again, never taken as empty
    return group.with_assignment_epoch(group.assignment_epoch, group.assignment_timestamp_ms), cut


def _topic_partitions_problem(where: str, raw: object, with_epochs: bool) -> str | None:
    if not isinstance(raw, dict):
        return f"{where} is not an object"
    for topic, partitions in raw.items():
        if not isinstance(partitions, list):
            return f"{where}: topic {topic!r} holds {partitions!r}, not a list"
        for entry in partitions:
            if with_epochs:
                ok = (isinstance(entry, list) and len(entry) in (2, 3) and _int(entry[0], 0) and _int(entry[1])
                      and (len(entry) == 2 or _run(entry[0], entry[2])))
            else:
                ok = _int(entry, 0) or (isinstance(entry, list) and len(entry) == 2 and _int(entry[0], 0)
                                        and _run(entry[0], entry[1]))
            if not ok:
                return f"{where}: topic {topic!r} has {entry!r}, not a partition" + (" and epoch" if with_epochs else "")
    return None


def _run(start: int, length: object) -> bool:
    """Is ``length`` a folded run's (2 or more partitions, all int32)?"""
    return _int(length, 2, MAX_RUN) and start + length - 1 <= INT32_MAX


def member_problem(rec: object) -> str | None:
    """What is wrong with one member record, or None."""
    if not isinstance(rec, dict) or not isinstance(rec.get("id"), str) or not rec["id"]:
        return f"member record {str(rec)[:80]!r} has no member id ('id')"
    where = f"member {rec['id']!r}"
    for key in ("e", "pe", "s", "rt"):
        if not _int(rec.get(key)):
            return f"{where}: {key!r} is {rec.get(key)!r}, not a 32-bit whole number"
    for key in ("c", "h"):
        if not isinstance(rec.get(key), str):
            return f"{where}: {key!r} is {rec.get(key)!r}, not a string"
    for key in ("i", "r", "rx", "sa"):
        if key in rec and not isinstance(rec[key], str):
            return f"{where}: {key!r} is {rec[key]!r}, not a string"
    if not isinstance(rec.get("tn", []), list) or not all(isinstance(n, str) for n in rec.get("tn", [])):
        return f"{where}: topic names 'tn' are not a list of strings"
    for key, epochs in (("a", True), ("pr", True), ("tg", False)):
        if key in rec and (problem := _topic_partitions_problem(f"{where}: {key!r}", rec[key], epochs)):
            return problem
    if "te" in rec and not _int(rec["te"]):
        return f"{where}: target epoch 'te' is {rec['te']!r}, not a 32-bit whole number"
    if "cl" in rec:
        cl = rec["cl"]
        if not isinstance(cl, dict) or not _int(cl.get("st"), 0) or not isinstance(cl.get("p"), list):
            return f"{where}: classic metadata 'cl' is not {{'st': ms, 'p': [[name, metadata]]}}"
        try:
            for name, meta in cl["p"]:
                if not isinstance(name, str):
                    raise ValueError(name)
                base64.b64decode(meta, validate=True)
        except (ValueError, TypeError, binascii.Error):
            return f"{where}: classic protocols 'cl.p' are not [name, base64 metadata] pairs"
    return None


def record_problem(record: object) -> str | None:
    """What is wrong with a consumer group record (and the member records
    loaded with it), or None.

    >>> record_problem({"v": 1, "t": "consumer", "ge": 3, "ae": 3}) is None
    True
    >>> record_problem({"v": 1, "t": "consumer", "ge": "3", "ae": 3})
    "group epoch 'ge' is '3', not a 32-bit whole number"
    """
    if not isinstance(record, dict):
        return "the record is not an object"
    if record.get("v") not in RECORD_VERSIONS:
        return (f"unsupported record version {record.get('v')!r} (this zkcoord reads versions "
                f"{', '.join(map(str, RECORD_VERSIONS))}; a newer zkcoord wrote it?)")
    for key, what in (("ge", "group epoch"), ("ae", "target assignment epoch")):
        if not _int(record.get(key)):
            return f"{what} {key!r} is {record.get(key)!r}, not a 32-bit whole number"
    if "os" in record and record["os"] not in OFFSET_STORAGES:
        return f"offset storage 'os' is {record['os']!r}, not one of {', '.join(OFFSET_STORAGES)}"
    for key in ("at", "mh"):
        if key in record and not _int(record[key], *_INT64):
            return f"{key!r} is {record[key]!r}, not a 64-bit whole number"
    if "ho" in record and (not isinstance(record["ho"], dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in record["ho"].items())):
        return f"handover ids 'ho' is {record['ho']!r}, not an object of member id -> legacy consumer id"
    regexes = record.get("rx", {})
    if not isinstance(regexes, dict):
        return "regular expressions 'rx' are not an object"
    for regex, r in regexes.items():
        if not (isinstance(r, dict) and isinstance(r.get("t"), list) and all(isinstance(t, str) for t in r["t"])
                and _int(r.get("ver"), *_INT64) and _int(r.get("ts"), *_INT64)):
            return f"resolved regular expression {regex!r} is not {{'t': [topics], 'ver': n, 'ts': ms}}"
    seen = set()
    for rec in record.get(MEMBERS_KEY, ()):
        if (problem := member_problem(rec)) is not None:
            return problem
        if rec["id"] in seen:
            return f"member {rec['id']!r} appears twice"
        seen.add(rec["id"])
    if TARGET_KEY in record:  # beside a version 1 record: its rewrite as version 3 was cut before the group record
        return target_problem(record[TARGET_KEY])
    return None


def target_problem(rec: object) -> str | None:
    """What is wrong with a target record, or None.

    >>> target_problem({"v": 1, "ae": 3, "n": 0, "z": "eJyrrgUAAXUA+Q=="}) is None
    True
    >>> target_problem({"v": 1, "ae": 3, "n": 0, "z": "not base64"})
    "the target record's 'z' is not zlib-compressed JSON in base64 (Only base64 data is allowed)"
    """
    if not isinstance(rec, dict):
        return "the target record is not an object"
    if rec.get("v") != TARGET_VERSION:
        return (f"unsupported target record version {rec.get('v')!r} (this zkcoord reads version {TARGET_VERSION}; "
                "a newer zkcoord wrote it?)")
    if not _int(rec.get("ae")):
        return f"the target record's epoch 'ae' is {rec.get('ae')!r}, not a 32-bit whole number"
    if not isinstance(rec.get("z"), str):
        return "the target record has no packed targets 'z'"
    try:
        targets = _unpacked(rec)
    except (ValueError, TypeError, binascii.Error, zlib.error, UnicodeDecodeError) as exc:
        return f"the target record's 'z' is not zlib-compressed JSON in base64 ({exc})"
    if not isinstance(targets, dict):
        return "the target record's targets are not an object of member id -> target"
    for member_id, target in targets.items():
        if problem := _topic_partitions_problem(f"the target of member {member_id!r}", target, False):
            return problem
    if rec.get("n") != len(targets):
        return f"the target record says {rec.get('n')!r} members and holds {len(targets)}"
    return None
