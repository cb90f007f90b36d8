"""Reading what ZooKeeper holds about groups, for inspection (``zkcoord
describe``, ``zkcoord groups``). Reads only.

This module owns the read side of every znode inspection looks at: the
registered daemons (``/zkcoord/nodes``), a group's state record (a consumer
group's with its member records, ``/coordinators/<group>/members/*``, as
the daemon loads them: :mod:`zkcoord.zk.group_records`), its election (the
lowest contender's node id), its migration record, the legacy layout under
the offsets root (offsets, old consumers' ``ids`` and ``owners``) and, for
a consumer group, Kafka's registrations (``/brokers/topics/<topic>``) of
the topics its members subscribe to: member records name topics by id, and
these name the ids. It never writes and needs no daemon: with every daemon
down it reads the same znodes.

Rules:

1. Reads are pipelined (every read of one round issued at once, one loop
   hop per round) and each group's read is one idempotent step under the
   connection's retry, so a connection loss re-reads the group.
2. A znode that vanishes between listing and reading is simply absent.
3. A state znode that is not a record (a consumer group's member record
   that is not one included), or a migration record that is not JSON, is
   reported in the facts (``record_error`` / ``migration_error``), never
   raised: the other groups are still shown.
4. A topic registration that is missing, unreadable or without an id
   simply names nothing (a chrooted zkcoord sees no ``/brokers/topics``;
   inspection then asks Kafka, when it may).
5. A group with registrations under ``<root>/<group>/ids`` (legacy
   consumers, or zkcoord's members during a handover) is read as the legacy
   consumers read it (:meth:`zkcoord.zk.handover.LegacyRebalanceZk.read`,
   without watches), for ``describe`` only: ``groups`` tells legacy
   consumers from zkcoord's members by the ids it lists anyway. An
   unreadable registration is in the reading's ``problems``; a read that
   fails otherwise (a znode this login may not read) is ``legacy_rebalance_error``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat

from zkcoord.core.consumer.record import KIND_NAME as CONSUMER_KIND, MEMBERS_KEY
from zkcoord.core.groups import KIND_KEY, record_problem
from zkcoord.core.legacy_values import partition_number
from zkcoord.errors import ServiceUnavailableError, StateError, ZkcoordError
from zkcoord.zk import aio, election, paths
from zkcoord.zk.group_records import with_consumer_records
from zkcoord.zk.handover import LegacyRebalanceZk, Reading
from zkcoord.zk.multi_read import GET_DATA, read_many
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.legacy import TopicPartition
from zkcoord.zk.nodes import NodeInfo, read_nodes
from zkcoord.zk.packed_state import needs_parts, read_state
from zkcoord.zk.state_store import decode_state
from zkcoord.zk.topics import parse_topic

__all__ = ["ZkFacts", "read_daemons", "read_group", "list_zkcoord_groups", "list_legacy_groups", "consumer_topic_names"]

_IDS, _OWNERS = "ids", "owners"  # old ZooKeeper consumers: registrations and partition owners


@dataclass(frozen=True)
class ZkFacts:
    """What ZooKeeper holds about one group (raw, as read)."""

    group: str
    record: Mapping | None = None  # the decoded state record
    record_error: str | None = None  # the state znode exists but is not a record
    owner_node_id: int | None = None  # node id in the lowest contender
    owner_error: str | None = None  # the lowest contender holds no node id (zkcoord.zk.election)
    legacy: bool = False  # <root>/<group> exists
    zk_offsets: Mapping[TopicPartition, str | None] = field(default_factory=dict)  # raw znode text
    legacy_ids: tuple[str, ...] = ()
    legacy_owners: Mapping[TopicPartition, str] = field(default_factory=dict)  # thread ids
    migration: Mapping | None = None
    migration_error: str | None = None
    # a consumer group's topics, by name, as Kafka registers them in this ZooKeeper: name -> topic id
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    legacy_rebalance: Reading | None = None  # rule 5: read when legacy_ids has registrations (describe)
    legacy_rebalance_error: str | None = None  # rule 5: why it could not be read

    @property
    def is_consumer_group(self) -> bool:
        """The stored record is a KIP-848 consumer group's."""
        return self.record is not None and self.record.get(KIND_KEY) == CONSUMER_KIND


def _raise_unexpected(*outcomes: Any) -> None:
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, NoNodeError):
            raise outcome


def _children(outcome: Any) -> list[str]:
    return [] if isinstance(outcome, NoNodeError) else list(outcome)


async def read_daemons(conn: ZkConnection) -> dict[int, NodeInfo]:
    """Every registered daemon by node id (unreadable registrations left out)."""
    return await conn.retry("list the zkcoord daemons", read_nodes, conn.client)


async def list_zkcoord_groups(conn: ZkConnection) -> list[str]:
    """Every group with a state znode, sorted."""
    async def inner() -> list[str]:
        client = conn.client
        try:
            names = await aio.call(client.get_children_async, paths.COORDINATORS)
        except NoNodeError:
            return []
        groups = paths.group_ids(names)  # znode names decoded; names that are no group's left out
        stats = await aio.gather(asyncio.get_running_loop(), [client.exists_async(paths.state(g)) for g in groups])
        _raise_unexpected(*stats)
        return sorted(g for g, stat in zip(groups, stats) if isinstance(stat, ZnodeStat))
    return await conn.retry("list the zkcoord groups", inner)


async def list_legacy_groups(conn: ZkConnection, offsets: paths.OffsetPaths) -> list[str]:
    """Every group under the legacy offsets root, sorted."""
    async def inner() -> list[str]:
        try:
            return paths.group_ids(await aio.call(conn.client.get_children_async, offsets.root))
        except NoNodeError:
            return []
    return await conn.retry(f"list the groups under {offsets.root}", inner)


async def unknown_groups(conn: ZkConnection, offsets: paths.OffsetPaths, groups: list[str]) -> set[str]:
    """Those of ``groups`` ZooKeeper holds nothing of: no coordinator
    directory (election, state), no offsets directory in the legacy layout,
    no migration record. Names that cannot be a znode are left out (the
    caller's own checks answer them). Three reads per group, in multiRead
    requests (:func:`~zkcoord.zk.bulk_reads.read_many`)."""
    valid = []
    for group in groups:
        try:
            valid.append((group, (paths.coordinator(group), offsets.offsets_dir(group), paths.migration(group))))
        except ZkcoordError:
            continue

    async def inner() -> set[str]:
        found = await read_many(conn, [(GET_DATA, path) for _, where in valid for path in where])
        _raise_unexpected(*found)
        return {group for i, (group, _) in enumerate(valid)
                if all(isinstance(outcome, NoNodeError) for outcome in found[3 * i:3 * i + 3])}
    return await conn.retry(f"look up {len(valid)} group(s)", inner) if valid else set()


async def read_group(conn: ZkConnection, offsets: paths.OffsetPaths, group: str, *,
                     with_offsets: bool = True) -> ZkFacts:
    """Everything ZooKeeper holds about ``group`` (``with_offsets=False``: no
    offsets and partition owners, for the groups listing)."""
    paths.state(group)  # UsageError for a name that cannot be a znode, before any I/O
    offsets.group(group)
    facts = await conn.retry(f"read group {group!r}", _inner_read_group, conn, offsets, group, with_offsets)
    if not (with_offsets and facts.legacy_ids):
        return facts
    try:  # rule 5
        reading = await LegacyRebalanceZk(conn, offsets.root).read(group)
    except ServiceUnavailableError:
        raise
    except ZkcoordError as exc:
        return dataclasses.replace(facts, legacy_rebalance_error=f"the legacy rebalance under "
                                                                  f"{offsets.ids_dir(group)} cannot be read: {exc}")
    return dataclasses.replace(facts, legacy_rebalance=reading)


async def _inner_read_group(conn: ZkConnection, offsets: paths.OffsetPaths, group: str,
                            with_offsets: bool) -> ZkFacts:
    client = conn.client
    loop = asyncio.get_running_loop()
    state, listed_contenders, legacy, ids, migration = await aio.gather(loop, [
        client.get_async(paths.state(group)),
        client.get_children_async(paths.owner_dir(group)),
        client.exists_async(offsets.group(group)),
        client.get_children_async(f"{offsets.group(group)}/{_IDS}"),
        client.get_async(paths.migration(group)),
    ])
    _raise_unexpected(state, listed_contenders, legacy, ids, migration)
    record, record_error = _record(group, state)
    if record is not None and needs_parts(record):  # a packed state: its members are in its parts
        try:
            record = (await read_state(conn, group))[0]
        except StateError as exc:
            record, record_error = None, str(exc)
    topic_ids: dict[str, str] = {}
    if record is not None and record.get(KIND_KEY) == CONSUMER_KIND:
        record, record_error = await _with_members(conn, group, record)
        if record is not None and with_offsets:
            topic_ids = await _topic_ids(conn, consumer_topic_names(record))
    migration_record, migration_error = _migration(group, migration)
    zk_offsets: dict[TopicPartition, str | None] = {}
    owners: dict[TopicPartition, str] = {}
    if with_offsets:
        raw = await _topic_partitions(client, offsets.offsets_dir(group))
        zk_offsets = {tp: _text(v) for tp, v in raw.items()}
        if record is None and isinstance(legacy, ZnodeStat):
            raw_owners = await _topic_partitions(client, f"{offsets.group(group)}/{_OWNERS}")
            owners = {tp: _text(v) or "" for tp, v in raw_owners.items()}
    owner, owner_error = await _owner(client, group, _children(listed_contenders))
    return ZkFacts(group, record=record, record_error=record_error, owner_node_id=owner, owner_error=owner_error,
                   legacy=isinstance(legacy, ZnodeStat), zk_offsets=zk_offsets,
                   legacy_ids=tuple(sorted(_children(ids))), legacy_owners=owners,
                   migration=migration_record, migration_error=migration_error, topic_ids=topic_ids)


def _record(group: str, outcome: Any) -> tuple[dict | None, str | None]:
    if isinstance(outcome, NoNodeError):
        return None, None
    try:
        return decode_state(group, paths.state(group), outcome[0]), None
    except StateError as exc:
        return None, str(exc)


async def _with_members(conn: ZkConnection, group: str, record: dict) -> tuple[dict | None, str | None]:
    """A consumer group's record with its member records (as the daemon loads it), or what is wrong with them."""
    try:
        loaded = await with_consumer_records(conn, group, record)
    except StateError as exc:
        return None, str(exc)
    problem = record_problem(loaded)
    if problem is not None:
        return None, (f"group {group!r}: {problem}; repair it, or delete {paths.coordinator(group)} to start the "
                      "group afresh")
    return loaded, None


def consumer_topic_names(record: Mapping) -> list[str]:
    """The topics a consumer group's assignments can hold: those its members subscribe to by name, and those
    its regular expressions resolved to."""
    names = {name for member in record.get(MEMBERS_KEY, ()) for name in member.get("tn", ())}
    names |= {name for resolved in record.get("rx", {}).values() for name in resolved.get("t", ())}
    return sorted(names)


async def _topic_ids(conn: ZkConnection, names: list[str]) -> dict[str, str]:
    """name -> topic id of each of ``names`` Kafka registers in this ZooKeeper (rule 4)."""
    wanted = []
    for name in names:
        try:
            wanted.append((name, paths.broker_topic(name)))
        except ZkcoordError:
            continue  # no topic can have this name
    if not wanted:
        return {}
    outcomes = await read_many(conn, [(GET_DATA, path) for _, path in wanted])
    found = {}
    for (name, _), outcome in zip(wanted, outcomes):
        if isinstance(outcome, BaseException):
            _raise_unexpected(outcome)
            continue
        try:
            parsed = parse_topic(name, bytes(outcome))
        except StateError:
            continue
        if parsed is not None:
            found[name] = parsed[0]
    return found


def _migration(group: str, outcome: Any) -> tuple[dict | None, str | None]:
    if isinstance(outcome, NoNodeError) or not outcome[0]:
        return None, None  # none, or a data-less parent of the mode-request znode
    try:
        record = json.loads(outcome[0].decode())
    except (UnicodeDecodeError, ValueError):
        record = None
    if not isinstance(record, dict):
        return None, f"migration record {paths.migration(group)} is not a JSON object; migration phase not shown"
    return record, None


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


async def _owner(client: Any, group: str, children: list[str]) -> tuple[int | None, str | None]:
    """(node id in the lowest contender of the group's election or None, why it cannot be read or None)."""
    try:
        found = await election.lowest(client, group, children=children)
    except StateError as exc:
        return None, str(exc)
    return (None if found is None else found[0]), None


async def _topic_partitions(client: Any, base: str) -> dict[TopicPartition, bytes | None]:
    """``{(topic, partition): data}`` of a ``<base>/<topic>/<partition>`` tree."""
    loop = asyncio.get_running_loop()
    try:
        topics = sorted(await aio.call(client.get_children_async, base))
    except NoNodeError:
        return {}
    listed = await aio.gather(loop, [client.get_children_async(f"{base}/{t}") for t in topics])
    _raise_unexpected(*listed)
    names: list[tuple[str, str, int]] = []
    for topic, children in zip(topics, listed):
        names += [(topic, n, p) for n in _children(children) if (p := partition_number(n)) is not None]
    values = await aio.gather(loop, [client.get_async(f"{base}/{t}/{n}") for t, n, _ in names])
    _raise_unexpected(*values)
    return {(t, p): v[0] for (t, _, p), v in zip(names, values) if not isinstance(v, NoNodeError)}
