"""The persisted form of a group, and taking a group over after fail-over.

This module owns the record a daemon writes to ZooKeeper for a group
(:func:`to_record` / :func:`from_record`) and :func:`load_group`, which turns
a record read by a new owner into a live group with fresh timers.

Record format (version 1), JSON with short keys, bytes in base64::

    {"v": 1, "s": "Stable", "g": 7, "gr": 106, "pt": "consumer", "pn": "range",
     "l": "<leader id>", "os": "zookeeper",
     "m": [{"id": "<member id>", "i": "<instance id>", "c": "<client id>",
            "h": "<client host>", "st": 10000, "rt": 300000,
            "p": [["range", "<b64 metadata>"]], "a": "<b64 assignment>"}]}

A record whose JSON would be over ``--max-state-bytes`` is stored packed
(:mod:`zkcoord.core.packed_record`, version 2: a header in the state znode,
the members compressed in parts); reading it back gives this record.

``gr`` is the last generation number reserved (absent: equal to ``g``):
the owner may hand out generations up to it without writing, so a new owner
starts after it. Generations wrap from 2^31 - 1 to 1 (int32, as on the
wire; :func:`~zkcoord.core.rebalance.following_generation`), so ``gr`` is
below ``g`` while a group's first block after the wrap is reserved but not
yet used. Absent / empty values are left out. Like Kafka's group metadata record, a
member keeps only the metadata of the selected protocol (all its protocols
only if it does not support the selected one, or none is selected yet), and
assignments are written only for a Stable group: in CompletingRebalance they
are the previous generation's and would be thrown away on load anyway. The
record never holds in-memory state (parked requests, deadlines).

:func:`record_problem` is the one check of a decoded record, used wherever
one is read (the daemon's load, ``describe``, ``groups``, ``migrate``):
types, known version and state, and every number the wire carries as an
int32 (generations, timeouts) within int32, so a corrupt znode is reported
for its group and never breaks an answer or a listing of the others.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from zkcoord.core.group_states import GroupState
from zkcoord.core.legacy_values import INT32_MAX
from zkcoord.core.membership import OFFSET_STORAGES, Group, GroupConfig, Member
from zkcoord.core.messages import JOIN_KEY, Outcome
from zkcoord.core.rebalance import Draft, prepare_rebalance, schedule_session, try_complete_join
from zkcoord.errors import StateError

__all__ = ["RECORD_VERSION", "record_problem", "to_record", "from_record", "load_group"]

RECORD_VERSION = 1
PACKED_VERSION = 2  # zkcoord.core.packed_record: the format of a record too large for one znode
S = GroupState


INT32_MIN = -(2**31)
_STATES = tuple(s.value for s in GroupState)


def _int(value: object, low: int, high: int = INT32_MAX) -> bool:
    return type(value) is int and low <= value <= high  # noqa: E721 (a bool is not a number here)


def _b64_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return f"is {_kind(value)}, not base64 text"
    try:
        _unb64(value)
    except (binascii.Error, ValueError):
        return "is not valid base64"
    return None


_JSON_KINDS = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
               bool: "a boolean", type(None): "null"}


def _kind(value: object) -> str:
    """The JSON kind of a decoded value, for messages."""
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _optional_str(record: Mapping[str, Any], key: str, what: str) -> str | None:
    if key in record and not isinstance(record[key], str):
        return f"{what} {key!r} is {_kind(record[key])}, not a string"
    return None


def _member_problem(index: int, rec: object) -> str | None:
    where = f"member {index}"
    if not isinstance(rec, dict):
        return f"{where} is {_kind(rec)}, not an object"
    if not isinstance(rec.get("id"), str) or not rec["id"]:
        return f"{where} has no member id ('id')"
    where = f"member {rec['id']!r}"
    for key in ("i", "c", "h"):
        if (problem := _optional_str(rec, key, where)) is not None:
            return problem
    if not _int(rec.get("st"), 0):
        return f"{where}: session timeout 'st' is {rec.get('st')!r}, not a whole number from 0 to {INT32_MAX}"
    if not _int(rec.get("rt"), INT32_MIN):
        return f"{where}: rebalance timeout 'rt' is {rec.get('rt')!r}, not a 32-bit whole number"
    protocols = rec.get("p", [])
    if not isinstance(protocols, list):
        return f"{where}: protocols 'p' is {_kind(protocols)}, not a list"
    for entry in protocols:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
            return f"{where}: protocol {entry!r} is not a [name, metadata] pair"
        if (problem := _b64_problem(entry[1])) is not None:
            return f"{where}: metadata of protocol {entry[0]!r} {problem}"
    if "a" in rec and (problem := _b64_problem(rec["a"])) is not None:
        return f"{where}: assignment 'a' {problem}"
    return None


def record_problem(record: object) -> str | None:
    """What is wrong with a decoded state record, or None if it is a valid
    version-1 record that :func:`from_record` can rebuild.

    >>> record_problem({"v": 1, "s": "Empty", "g": 3, "os": "zookeeper"}) is None
    True
    >>> record_problem({"v": 1, "s": "Empty", "g": 3, "m": 5})
    "members 'm' is a number, not a list"
    >>> record_problem({"v": 1, "s": "Stable", "g": 2**31})
    "generation 'g' is 2147483648, not a whole number from 0 to 2147483647"
    >>> record_problem({"v": 2, "s": "Stable", "g": 1})
    'unsupported record version 2 (this zkcoord reads version 1; a newer zkcoord wrote it?)'
    """
    if not isinstance(record, dict):
        return f"the record is {_kind(record)}, not an object"
    if record.get("v") != RECORD_VERSION or type(record.get("v")) is not int:  # noqa: E721
        if record.get("v") == PACKED_VERSION and type(record["v"]) is int:  # noqa: E721
            return "it is a packed record's header (version 2): its members are in its parts, read it whole"
        if "v" not in record:
            return "the record has no version ('v')"
        return (f"unsupported record version {record['v']!r} (this zkcoord reads version {RECORD_VERSION}; "
                "a newer zkcoord wrote it?)")
    if record.get("s") not in _STATES:
        return f"state 's' is {record.get('s')!r}, not one of {', '.join(_STATES)}"
    if not _int(record.get("g"), 0):
        return f"generation 'g' is {record.get('g')!r}, not a whole number from 0 to {INT32_MAX}"
    if "gr" in record and not _int(record["gr"], 0):
        return f"reserved generation 'gr' is {record['gr']!r}, not a whole number from 0 to {INT32_MAX}"
    if "os" in record and record["os"] not in OFFSET_STORAGES:
        return f"offset storage 'os' is {record['os']!r}, not one of {', '.join(OFFSET_STORAGES)}"
    if "ho" in record and (not isinstance(record["ho"], dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in record["ho"].items())):
        return f"handover ids 'ho' is {record['ho']!r}, not an object of member id -> legacy consumer id"
    for key, what in (("pt", "protocol type"), ("pn", "protocol name"), ("l", "leader")):
        if (problem := _optional_str(record, key, what)) is not None:
            return problem
    members = record.get("m", [])
    if not isinstance(members, list):
        return f"members 'm' is {_kind(members)}, not a list"
    ids = set()
    for index, member in enumerate(members):
        if (problem := _member_problem(index, member)) is not None:
            return problem
        if member["id"] in ids:
            return f"member {member['id']!r} appears twice"
        ids.add(member["id"])
    return None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _member_record(member: Member, protocol_name: str | None, stable: bool) -> dict[str, Any]:
    protocols = member.protocols
    if protocol_name is not None and protocol_name in member.protocol_names():
        protocols = ((protocol_name, member.metadata(protocol_name)),)
    rec: dict[str, Any] = {
        "id": member.member_id,
        "c": member.client_id,
        "h": member.client_host,
        "st": member.session_timeout_ms,
        "rt": member.rebalance_timeout_ms,
        "p": [[name, _b64(meta)] for name, meta in protocols],
    }
    if member.group_instance_id is not None:
        rec["i"] = member.group_instance_id
    if stable and member.assignment:
        rec["a"] = _b64(member.assignment)
    return rec


def to_record(group: Group) -> dict[str, Any]:
    """The persisted part of ``group`` as a compact JSON-ready dict."""
    stable = group.state is S.STABLE
    rec: dict[str, Any] = {
        "v": RECORD_VERSION,
        "s": group.state.value,
        "g": group.generation_id,
        "os": group.offset_storage,
    }
    if group.generation_reserved != group.generation_id:  # below it once the block wrapped
        rec["gr"] = group.generation_reserved
    if group.protocol_type is not None:
        rec["pt"] = group.protocol_type
    if group.protocol_name is not None:
        rec["pn"] = group.protocol_name
    if group.leader_id is not None:
        rec["l"] = group.leader_id
    if group.members:
        rec["m"] = [_member_record(m, group.protocol_name, stable) for m in group.members.values()]
    if group.handover_ids is not None:
        rec["ho"] = dict(group.handover_ids)
    return rec


def _member_from_record(rec: Mapping[str, Any], protocol_type: str) -> Member:
    return Member(
        member_id=str(rec["id"]),
        group_instance_id=rec.get("i"),
        client_id=str(rec.get("c", "")),
        client_host=str(rec.get("h", "")),
        session_timeout_ms=int(rec["st"]),
        rebalance_timeout_ms=int(rec["rt"]),
        protocol_type=protocol_type,
        protocols=tuple((str(name), _unb64(meta)) for name, meta in rec.get("p", ())),
        assignment=_unb64(rec["a"]) if "a" in rec else b"",
    )


def from_record(group_id: str, record: Mapping[str, Any]) -> Group:
    """Rebuild the persisted part of a group; in-memory state starts empty.

    Raises :class:`StateError` if the record is not a version-1 group record.
    """
    problem = record_problem(record)
    if problem is not None:
        raise StateError(f"stored record of group {group_id!r} is not a valid group record ({problem}); "
                         "inspect the group's znode, then repair or delete it")
    try:
        protocol_type = record.get("pt")
        members = [_member_from_record(m, protocol_type or "") for m in record.get("m", ())]
        generation = record["g"]
        return Group(
            group_id=group_id,
            state=GroupState(record["s"]),
            protocol_type=protocol_type,
            protocol_name=record.get("pn"),
            generation_id=generation,
            generation_reserved=record.get("gr", generation),
            leader_id=record.get("l"),
            members={m.member_id: m for m in members},
            static_members={m.group_instance_id: m.member_id
                            for m in members if m.group_instance_id is not None},
            offset_storage=record.get("os", "zookeeper"),
            handover_ids=dict(record["ho"]) if "ho" in record else None,
        )
    except (KeyError, TypeError, ValueError, binascii.Error, AttributeError) as exc:
        raise StateError(
            f"stored record of group {group_id!r} is not a valid group record ({exc}); "
            "inspect the group's znode, then repair or delete it"
        ) from exc
    except StateError as exc:
        raise StateError(
            f"stored record of group {group_id!r} is inconsistent ({exc}); "
            "inspect the group's znode, then repair or delete it"
        ) from exc


def _persisted_only(group: Group) -> Group:
    return Group(
        group_id=group.group_id, state=group.state, protocol_type=group.protocol_type,
        protocol_name=group.protocol_name, generation_id=group.generation_id,
        leader_id=group.leader_id, members=group.members, static_members=group.static_members,
        offset_storage=group.offset_storage, generation_reserved=group.generation_reserved,
        generation_floor=group.generation_reserved if group.generation_reserved != group.generation_id else 0,
        handover_ids=group.handover_ids,
    )


def load_group(record_group: Group, now_ms: int, config: GroupConfig) -> Outcome:
    """Take over a group read from ZooKeeper after its previous owner died
    (Kafka's ``onGroupLoaded``, extended to the states our records can hold).

    Every member gets a fresh session deadline: members that are alive keep
    heartbeating to the new owner; the others expire as usual. The previous
    owner may have handed out every generation up to the stored reservation
    (``gr``) without writing, so the next generation here is above it
    (``generation_floor``); a member holding such a generation gets
    ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID and rejoins. By loaded state:

    * Empty (or Dead): nothing to arm; it stays as it is.
    * Stable (the last assignment was stored): stays Stable, so the members
      carry on with their generation; heartbeats succeed. A rebalance the
      previous owner had started but not ended is forgotten: its members'
      newer generation is refused and they rejoin, getting the stored
      generation back (no partition changed hands in between, since a
      generation's assignment is only handed out once stored). If the group is
      larger than ``max_group_size`` it rebalances, as Kafka does.
    * CompletingRebalance (the previous owner created the generation, on a
      fresh reservation or as earlier zkcoord versions always did, but died
      before the leader's assignment was stored): the assignment is lost, so
      the members must rejoin: -> PreparingRebalance with the join deadline
      one rebalance timeout away. Heartbeats and SyncGroups of the new
      generation get REBALANCE_IN_PROGRESS, those of older generations
      ILLEGAL_GENERATION; both make the client rejoin, and the next
      generation number is never reused.
    * PreparingRebalance (written when a rebalance starts that needs a new
      reservation): stays, with a fresh join deadline.

    Persist: only when a rebalance starts here, to reserve generations above
    the floor (:func:`~zkcoord.core.rebalance.reserve_generation`); otherwise
    the stored record stays valid for a further fail-over.
    """
    w = Draft.of(_persisted_only(record_group), now_ms, config)
    if w.state in (S.EMPTY, S.DEAD):
        return w.outcome()
    if w.state is S.COMPLETING_REBALANCE or len(w.members) > config.max_group_size:
        prepare_rebalance(w)
    elif w.state is S.PREPARING_REBALANCE:
        w.join_deadline_ms = now_ms + w.rebalance_timeout_ms
        w.schedule(JOIN_KEY, w.join_deadline_ms)
        try_complete_join(w)
    for mid in w.members:
        schedule_session(w, mid)
    return w.outcome()
