"""From gathered facts to what ``describe`` and ``groups`` show. No I/O.

This module owns the rules of inspection; :mod:`zkcoord.inspect.gather`
reads ZooKeeper, the owner daemon and Kafka into the ``*Facts`` values here,
and everything below is a pure function of them (unit-tested exactly):

* **State and members** of a zkcoord group come from its owner daemon's
  DescribeGroups answer (a KIP-848 consumer group's: ConsumerGroupDescribe)
  when the owner is registered and answers (live: it sees a rebalance as it
  runs), else from the records in ZooKeeper (as last stored; a note says
  so). A classic group's generation is always the record's.
* **Type**: a record naming ``"t": "consumer"`` is a consumer group
  (:mod:`zkcoord.inspect.consumer` owns its rules: epochs, member types,
  current and target assignments, topic names); any other is classic.
  Legacy groups and groups only Kafka knows have no type (``None``).
* **Assignments** are consumer-protocol bytes (``ConsumerProtocolAssignment``,
  decoded with kafka-python's class, as the version-0 prefix every version
  starts with); another protocol type, or bytes that do not decode, leave
  the member's partitions unknown (``-``), as Kafka's tool does.
* **Current offset** by storage mode: ``zookeeper`` the legacy znode,
  ``kafka`` Kafka's committed offset, ``dual`` the larger of the two
  (:func:`zkcoord.core.migration.dual_fetch`, what a member resumes from);
  unknown (``-``) when the store it depends on was not read.
* **Rows** of the offsets view: every partition assigned to a member, plus
  every partition with a committed offset in the store(s) the mode reads;
  a partition nobody owns shows ``-`` for its consumer, host and client.
* **Legacy groups** (a node under the legacy root, no state record): their
  old ZooKeeper consumers are ``<root>/<g>/ids/<consumer id>`` and the
  partition owners ``<root>/<g>/owners/<topic>/<p>`` (a consumer thread id,
  ``<consumer id>-<thread>``); state Stable while consumers are registered,
  else Empty. Storage is ``zookeeper``.
* **Sources** say who uses a group, not where its offsets are (that is its
  storage): ``zkcoord`` it has a state record (zkcoord coordinates it);
  ``legacy`` old ZooKeeper consumers are registered under ``<root>/<g>/ids``,
  or ZooKeeper holds offsets of it under the root without a state record
  (nobody in zkcoord wrote them: a zkcoord group in ``zookeeper`` storage
  keeps its own offsets there, which is not legacy); ``kafka`` Kafka's own
  coordinator has members in it, or Kafka holds offsets of it that zkcoord
  does not write (it writes them in ``dual`` and ``kafka`` storage).
* **Kafka's view** of a group Kafka's coordinator does not have (it answers
  DescribeGroups with state Dead and no members) is absent (``None``).
* **The legacy rebalance** of a group with registrations under
  ``<root>/<group>/ids`` (legacy consumers, zkcoord's members during a
  handover) is a section of its view (:mod:`zkcoord.inspect.legacy_rebalance`
  owns its rules, "mixed" included); the owner znodes read for it also name
  the consumer of partitions no zkcoord member is assigned in the offsets view.
  Only registrations not in zkcoord's form make a group ``legacy``.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from zkcoord.core.consumer.describe import DescribedConsumerGroup
from zkcoord.core.group import GroupDescription, describe, from_record
from zkcoord.core.legacy_values import Unparsable, read_legacy_value
from zkcoord.core.legacy_values import shown as shown_value
from zkcoord.core.migration import dual_fetch, parse_legacy_offset
from zkcoord.errors import StateError
from zkcoord.inspect import consumer, legacy_rebalance
from zkcoord.zk.group_reads import ZkFacts
from zkcoord.zk.paths import OffsetPaths
from zkcoord.inspect.model import (
    Assignment, Coordinator, Daemon, GroupError, GroupSummary, GroupView, KafkaGroupInfo, MemberView, Migration,
    OffsetRow,
)

__all__ = ["TopicPartition", "ZkFacts", "LiveFacts", "KafkaFacts", "decode_assignment", "legacy_host", "in_kafka",
           "kafka_group_of", "sources", "coordinator_of", "description_of", "members_of", "wanted_partitions",
           "build_view", "not_found", "summarize", "Description", "CLASSIC_TYPE", "CONSUMER_TYPE"]

TopicPartition = tuple[str, int]
CONSUMER = "consumer"  # the consumer protocol type (classic groups), and the KIP-848 group type
CLASSIC_TYPE, CONSUMER_TYPE = "classic", "consumer"  # Kafka's group types
Description = GroupDescription | DescribedConsumerGroup
NO_MEMBERS = "Consumer group {group!r} has no active members."
CORRUPT = "Corrupt"  # the state ``groups`` lists for a group whose state znode is not a valid record


@dataclass(frozen=True)
class LiveFacts:
    """The owner daemon's DescribeGroups (or ConsumerGroupDescribe) answer, or why there is none."""

    description: Description | None = None
    error: str | None = None  # set when the owner was asked and did not answer


@dataclass(frozen=True)
class KafkaFacts:
    """What Kafka said about one group; ``asked`` is False without bootstrap servers."""

    asked: bool = False
    committed: Mapping[TopicPartition, int] | None = None  # None: not asked / not answered
    group: KafkaGroupInfo | None = None
    log_ends: Mapping[TopicPartition, int] = field(default_factory=dict)
    missing_topics: frozenset[str] = frozenset()
    topic_ids: Mapping[str, str] = field(default_factory=dict)  # name -> id, for a consumer group read as stored


# ------------------------------------------------------------ small rules
def decode_assignment(protocol_type: str | None, data: bytes) -> Assignment | None:
    """A member's partitions from consumer-protocol assignment bytes, None if unknown.

    >>> raw = ConsumerProtocolAssignment(version=0, assigned_partitions=[
    ...     ConsumerProtocolAssignment.TopicPartition(topic="b", partitions=[2, 0]),
    ...     ConsumerProtocolAssignment.TopicPartition(topic="a", partitions=[1])], user_data=None).encode()
    >>> decode_assignment("consumer", bytes(raw))
    (('a', (1,)), ('b', (0, 2)))
    >>> decode_assignment("consumer", b""), decode_assignment("connect", bytes(raw))
    ((), None)
    """
    if protocol_type != CONSUMER:
        return None
    if not data:
        return ()
    buffer = io.BytesIO(bytes(data))
    try:
        version = ConsumerProtocolAssignment.parse_header(buffer)
        decoded = ConsumerProtocolAssignment.decode(buffer, version=0, header=False)
    except (struct.error, ValueError, TypeError):
        return None
    if version < 0 or decoded.assigned_partitions is None:
        return None
    merged: dict[str, set[int]] = {}
    for entry in decoded.assigned_partitions:
        if entry.topic is None:
            return None
        merged.setdefault(entry.topic, set()).update(entry.partitions or ())
    return tuple((topic, tuple(sorted(ps))) for topic, ps in sorted(merged.items()))


def legacy_host(group: str, consumer_id: str) -> str | None:
    """The host in an old consumer's id ``<group>_<host>-<millis>-<uuid8>``.

    >>> legacy_host("g", "g_web-1.example-1700000000000-abcd1234"), legacy_host("g", "other")
    ('web-1.example', None)
    """
    prefix = f"{group}_"
    if not consumer_id.startswith(prefix):
        return None
    parts = consumer_id[len(prefix):].rsplit("-", 2)
    if len(parts) != 3 or not parts[0] or not parts[1].isdigit():
        return None
    return parts[0]


def coordinator_of(owner_node_id: int | None, daemons: Mapping[int, Daemon]) -> Coordinator | None:
    if owner_node_id is None:
        return None
    daemon = daemons.get(owner_node_id)
    if daemon is None:
        return Coordinator(owner_node_id, None, None, live=False)
    return Coordinator(owner_node_id, daemon.host, daemon.port, live=True)


def description_of(zk: ZkFacts, live: LiveFacts, topic_ids: Mapping[str, str] | None = None) -> Description | None:
    """The live description, else the stored records'; StateError if the record is corrupt.
    ``topic_ids``: names of topic ids beyond those ZooKeeper gave (a consumer group's, from Kafka)."""
    if live.description is not None:
        return live.description
    if zk.record is None:
        return None
    if zk.is_consumer_group:
        return consumer.stored_description(zk.group, zk.record, {**zk.topic_ids, **(topic_ids or {})})
    return describe(from_record(zk.group, zk.record))


def members_of(description: Description) -> tuple[MemberView, ...]:
    """The members of a described group, either type."""
    if isinstance(description, DescribedConsumerGroup):
        return consumer.members(description)
    return tuple(MemberView(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            decode_assignment(description.protocol_type, m.assignment), member_type=CLASSIC_TYPE)
                 for m in description.members)


def _legacy_members(zk: ZkFacts) -> tuple[MemberView, ...]:
    owned: dict[str, dict[str, set[int]]] = {}
    for (topic, partition), thread in zk.legacy_owners.items():
        owned.setdefault(_legacy_consumer(thread, zk.legacy_ids), {}).setdefault(topic, set()).add(partition)
    return tuple(MemberView(cid, None, "", legacy_host(zk.group, cid) or "",
                            tuple((t, tuple(sorted(ps))) for t, ps in sorted(owned.get(cid, {}).items())))
                 for cid in sorted(zk.legacy_ids))


def _legacy_consumer(thread_id: str, consumer_ids: Iterable[str]) -> str:
    base = thread_id.rsplit("-", 1)[0]
    return base if base in set(consumer_ids) else thread_id


def wanted_partitions(zk: ZkFacts, description: Description | None,
                      kafka_committed: Mapping[TopicPartition, int] | None) -> set[TopicPartition]:
    """Every partition the offsets view of this group may show (for log end lookups)."""
    found = {tp for tp, raw in zk.zk_offsets.items()} | set(kafka_committed or {}) | set(legacy_threads(zk))
    if description is not None:
        for member in members_of(description):
            found |= {(t, p) for t, ps in member.assignment or () for p in ps}
    return found


def legacy_threads(zk: ZkFacts) -> dict[TopicPartition, str]:
    """The thread id each owner znode read names: those of the legacy rebalance (groups with
    registrations) and of the legacy layout (groups without zkcoord state)."""
    read = zk.legacy_rebalance.owners if zk.legacy_rebalance is not None else {}
    return {**{tp: owner.holder for tp, owner in read.items()}, **zk.legacy_owners}


# ------------------------------------------------------------ offsets view
def _owners(members: tuple[MemberView, ...]) -> dict[TopicPartition, MemberView]:
    return {(t, p): m for m in members for t, ps in m.assignment or () for p in ps}


def offset_rows(group: str, storage: str, members: tuple[MemberView, ...], zk: ZkFacts,
                kafka: KafkaFacts, zk_root: str = "/consumers") -> tuple[tuple[OffsetRow, ...], list[str]]:
    """The offsets view's rows, sorted by topic and partition, and notes on them.

    A legacy value that is not an offset (:mod:`zkcoord.core.legacy_values`)
    shows ``-`` and a note naming its znode; the other rows are as usual."""
    notes: list[str] = []
    zk_parsed: dict[TopicPartition, int] = {}
    for tp, raw in sorted(zk.zk_offsets.items()):
        value = parse_legacy_offset(raw)
        if value is None:
            why = read_legacy_value(raw)
            reason = why.reason if isinstance(why, Unparsable) else "no committed offset"
            notes.append(f"legacy offset of {tp[0]}-{tp[1]} is unparsable: znode "
                         f"{zk_root}/{group}/offsets/{tp[0]}/{tp[1]} holds {shown_value(raw)} ({reason})")
        else:
            zk_parsed[tp] = value
    committed = dict(kafka.committed or {})
    owners = _owners(members)
    shown = set(owners)
    if storage in ("zookeeper", "dual"):
        shown |= set(zk.zk_offsets)
    if storage in ("kafka", "dual"):
        shown |= set(committed)
    threads = legacy_threads(zk)
    rows = []
    for tp in sorted(shown):
        z, k = zk_parsed.get(tp), committed.get(tp)
        current = z if storage == "zookeeper" else k if storage == "kafka" else \
            dual_fetch(z, k) if kafka.committed is not None else None  # Kafka unread: unknown
        owner = owners.get(tp)
        member_id, host, client = (owner.member_id, owner.host, owner.client_id) if owner else (None, None, None)
        if owner is None and tp in threads:  # an old consumer's (or a handover's) thread owns it
            member_id = threads[tp]  # the owning thread, as Kafka's old tools showed it
            host = legacy_host(group, member_id.rsplit("-", 1)[0])
        rows.append(OffsetRow(tp[0], tp[1], current, z, k, kafka.log_ends.get(tp), member_id, host or None,
                              client or None))
    for topic in sorted(kafka.missing_topics & {t for t, _ in shown}):
        notes.append(f"topic {topic!r} does not exist in Kafka: no log end offset")
    return tuple(rows), notes


# ------------------------------------------------------------ a whole group
def not_found(group: str, zk_root: str, bootstrap_servers: str | None) -> GroupError:
    where = f"no state at /coordinators/{group}/state, nothing under {zk_root}/{group}"
    where += f", and Kafka at {bootstrap_servers} does not know it" if bootstrap_servers else \
        "; Kafka not asked: no --bootstrap-servers"
    return GroupError(group, "not-found", f"Consumer group {group!r} does not exist ({where}); "
                                          "`zkcoord groups` lists the groups")


def _migration(zk: ZkFacts, notes: list[str]) -> Migration | None:
    if zk.migration_error:
        notes.append(zk.migration_error)
    if zk.owner_error:
        notes.append(zk.owner_error)
    if not zk.migration or "phase" not in zk.migration:
        return None
    since = zk.migration.get("since_ms")
    return Migration(str(zk.migration["phase"]), since if isinstance(since, int) else None)


def _owner_notes(coordinator: Coordinator | None, live: LiveFacts, daemons: Mapping[int, Daemon],
                 tool_node_id: int, api: str = "DescribeGroups") -> list[str]:
    stored = "showing its state as last stored in ZooKeeper"
    if coordinator is not None and coordinator.node_id == tool_node_id:
        return [f"a zkcoord migrate command holds the group's election right now; {stored}"]
    if coordinator is None:
        return [f"no daemon owns the group now (the next FindCoordinator loads it); {stored}"] if daemons else []
    if not coordinator.live:
        return [f"its owner, node {coordinator.node_id}, is not registered under /zkcoord/nodes "
                f"(stopping or lost); {stored}"]
    if live.error:
        return [f"its owner {coordinator.label()} did not answer {api} ({live.error}); {stored}"]
    return []


def in_kafka(kafka: KafkaFacts) -> bool:
    """Kafka knows the group: it has committed offsets there, or Kafka's coordinator has it."""
    return bool(kafka.committed) or kafka_group_of(kafka) is not None


def kafka_group_of(kafka: KafkaFacts) -> KafkaGroupInfo | None:
    """The group as Kafka's coordinator has it; None when it does not (DescribeGroups says Dead)."""
    group = kafka.group
    return None if group is None or (group.state == "Dead" and not group.members) else group


def sources(zk: ZkFacts, kafka_knows: bool, kafka_group: KafkaGroupInfo | None = None) -> tuple[str, ...]:
    """Who uses the group (module docstring): ``kafka_knows`` Kafka has it or
    offsets of it; ``kafka_group`` what its coordinator says (members)."""
    has_state = zk.record is not None or zk.record_error is not None
    legacy = legacy_rebalance.legacy_count(zk.legacy_ids) > 0 or (zk.legacy and not has_state)
    zkcoord_writes_kafka = zk.record is not None and zk.record.get("os", "zookeeper") != "zookeeper"
    kafka = bool(kafka_group and kafka_group.members) if zkcoord_writes_kafka else kafka_knows
    return tuple(s for s, present in (("zkcoord", has_state), ("legacy", legacy), ("kafka", kafka)) if present)


def build_view(zk: ZkFacts, live: LiveFacts, kafka: KafkaFacts, daemons: Mapping[int, Daemon], *,
               zk_root: str, bootstrap_servers: str | None, tool_node_id: int) -> GroupView | GroupError:
    """The group's view, or why it has none (not found, corrupt record)."""
    if zk.record_error is not None:
        return GroupError(zk.group, "corrupt", zk.record_error)
    found_in = sources(zk, in_kafka(kafka), kafka_group_of(kafka))
    kafka = dataclasses.replace(kafka, group=kafka_group_of(kafka))
    if not found_in:
        return not_found(zk.group, zk_root, bootstrap_servers)
    try:
        description = description_of(zk, live, kafka.topic_ids)
    except StateError as exc:
        return GroupError(zk.group, "corrupt", str(exc))
    if isinstance(description, DescribedConsumerGroup):
        built = _consumer_view(zk, live, kafka, daemons, description, found_in, tool_node_id, zk_root)
    elif zk.record is not None:
        built = _zkcoord_view(zk, live, kafka, daemons, description, found_in, bootstrap_servers, tool_node_id,
                              zk_root)
    elif zk.legacy:
        built = _legacy_view(zk, kafka, found_in, zk_root)
    else:
        built = _kafka_view(zk, kafka, found_in)
    return _with_legacy_rebalance(built, zk, zk_root)


def _with_legacy_rebalance(built: GroupView, zk: ZkFacts, zk_root: str) -> GroupView:
    """The view with its legacy rebalance section (or a note on why it could not be read)."""
    if zk.legacy_rebalance_error is not None:
        return dataclasses.replace(built, notes=built.notes + (zk.legacy_rebalance_error,))
    if zk.legacy_rebalance is None:
        return built
    zkcoord_members = len(built.members) if zk.record is not None else 0
    handover_ids = (zk.record or {}).get("ho") if isinstance(zk.record, Mapping) else None
    return dataclasses.replace(built, legacy_rebalance=legacy_rebalance.section(
        zk.legacy_rebalance, OffsetPaths(zk_root).ids_dir(zk.group), zkcoord_members,
        handover_ids if isinstance(handover_ids, Mapping) else None))


def _zkcoord_view(zk: ZkFacts, live: LiveFacts, kafka: KafkaFacts, daemons: Mapping[int, Daemon],
                  description: GroupDescription, sources: tuple[str, ...], bootstrap_servers: str | None,
                  tool_node_id: int, zk_root: str) -> GroupView:
    record = zk.record or {}
    storage = str(record.get("os", "zookeeper"))
    coordinator = coordinator_of(zk.owner_node_id, daemons)
    notes = _owner_notes(coordinator, live, daemons, tool_node_id)
    members = members_of(description)
    rows, notes = _offsets_and_notes(zk, kafka, storage, members, notes, zk_root)
    migration = _migration(zk, notes)
    return GroupView(
        zk.group, sources, description.state, "daemon" if live.description is not None else "zookeeper", storage,
        generation=int(record["g"]), protocol_type=description.protocol_type or record.get("pt"),
        assignment_strategy=description.protocol or record.get("pn") or None, coordinator=coordinator,
        migration=migration, kafka_group=kafka.group, members=members, offsets=rows, notes=tuple(notes),
        group_type=CLASSIC_TYPE)


def _offsets_and_notes(zk: ZkFacts, kafka: KafkaFacts, storage: str, members: tuple[MemberView, ...],
                       notes: list[str], zk_root: str) -> tuple[tuple[OffsetRow, ...], list[str]]:
    """The offsets view of a zkcoord group (either type), and ``notes`` with what it adds."""
    rows, row_notes = offset_rows(zk.group, storage, members, zk, kafka, zk_root)
    notes = notes + row_notes
    if storage != "zookeeper" and not kafka.asked:
        notes.append(f"the group's offsets are in Kafka too ({storage} storage); pass --bootstrap-servers "
                     "(or set ZKCOORD_BOOTSTRAP_SERVERS) to see them")
    if storage != "zookeeper" and kafka.group is not None and kafka.group.members:
        notes.append(kafka_side_warning(kafka.group))
    if not members:
        notes.append(NO_MEMBERS.format(group=zk.group))
    return rows, notes


def _consumer_view(zk: ZkFacts, live: LiveFacts, kafka: KafkaFacts, daemons: Mapping[int, Daemon],
                   description: DescribedConsumerGroup, sources: tuple[str, ...], tool_node_id: int,
                   zk_root: str) -> GroupView:
    """A KIP-848 consumer group's view (:mod:`zkcoord.inspect.consumer`)."""
    storage = str((zk.record or {}).get("os", "zookeeper"))
    coordinator = coordinator_of(zk.owner_node_id, daemons)
    notes = _owner_notes(coordinator, live, daemons, tool_node_id, api="ConsumerGroupDescribe")
    if live.description is None and zk.record is not None:
        unnamed = consumer.unnamed_topic_ids(zk.record, {**zk.topic_ids, **kafka.topic_ids})
        if unnamed:
            where = "ZooKeeper's /brokers/topics nor Kafka" if kafka.asked else \
                "ZooKeeper's /brokers/topics (pass --bootstrap-servers to ask Kafka)"
            notes.append(f"topic id(s) {', '.join(unnamed)} in its stored assignments are named by neither "
                         f"{where}: their partitions are left out (deleted topics?)")
    notes += consumer.notes(description)
    members = members_of(description)
    rows, notes = _offsets_and_notes(zk, kafka, storage, members, notes, zk_root)
    migration = _migration(zk, notes)
    return GroupView(
        zk.group, sources, description.state, "daemon" if live.description is not None else "zookeeper", storage,
        protocol_type=CONSUMER, assignment_strategy=description.assignor_name or None, coordinator=coordinator,
        migration=migration, kafka_group=kafka.group, members=members, offsets=rows, notes=tuple(notes),
        group_type=CONSUMER_TYPE, group_epoch=description.group_epoch,
        assignment_epoch=description.assignment_epoch)


def kafka_side_warning(group: KafkaGroupInfo) -> str:
    """The note of a dual/kafka group with members in Kafka's own coordinator, naming them."""
    named = "; ".join(f"{m} (client {c or '-'}, host {h or '-'})" for m, c, h in group.member_list[:20])
    more = f"; and {len(group.member_list) - 20} more" if len(group.member_list) > 20 else ""
    return (f"warning: Kafka's own coordinator reports {group.members} member(s) in this group ({group.state})"
            + (f": {named}{more}" if named else "") + ". Consumers outside zkcoord use the same group id: both "
            "coordinators assign the partitions, and Kafka refuses the commits zkcoord forwards while they stay")


def _legacy_view(zk: ZkFacts, kafka: KafkaFacts, sources: tuple[str, ...], zk_root: str) -> GroupView:
    members = _legacy_members(zk)
    rows, notes = offset_rows(zk.group, "zookeeper", (), zk, kafka, zk_root)
    notes.insert(0, f"legacy group: no zkcoord state; {len(members)} old ZooKeeper consumer(s) registered")
    if not members:
        notes.append(NO_MEMBERS.format(group=zk.group))
    migration = _migration(zk, notes)
    return GroupView(zk.group, sources, "Stable" if members else "Empty", "zookeeper", "zookeeper",
                     members=members, offsets=rows, notes=tuple(notes), migration=migration,
                     kafka_group=kafka.group)


def _kafka_view(zk: ZkFacts, kafka: KafkaFacts, sources: tuple[str, ...]) -> GroupView:
    group = kafka.group or KafkaGroupInfo("Empty", 0)
    rows, notes = offset_rows(zk.group, "kafka", (), zk, kafka)
    notes.insert(0, "Kafka's own coordinator manages this group; zkcoord shows its offsets and state only "
                    f"({group.members} member(s): kafka-consumer-groups --members lists them)")
    return GroupView(zk.group, sources, group.state, "kafka", "kafka", offsets=rows, notes=tuple(notes),
                     kafka_group=group)


# ------------------------------------------------------------ groups listing
def summarize(zk: ZkFacts, kafka_group: KafkaGroupInfo | None, known_to_kafka: bool,
              daemons: Mapping[int, Daemon]) -> GroupSummary:
    """One line of ``zkcoord groups``, from the record (as stored), legacy ids or Kafka."""
    summary = _summary(zk, kafka_group, known_to_kafka, daemons)
    members = summary.members if zk.record is not None and summary.error is None else 0
    return dataclasses.replace(summary, legacy_consumers=legacy_rebalance.legacy_count(zk.legacy_ids),
                               handover=legacy_rebalance.handover(zk.legacy_ids, members or 0))


def _summary(zk: ZkFacts, kafka_group: KafkaGroupInfo | None, known_to_kafka: bool,
             daemons: Mapping[int, Daemon]) -> GroupSummary:
    found_in = sources(zk, known_to_kafka, kafka_group)
    record = zk.record
    if zk.record_error is not None:  # its state znode is corrupt: listed as such, with what is wrong
        return GroupSummary(zk.group, CORRUPT, found_in, owner=coordinator_of(zk.owner_node_id, daemons),
                            error=zk.record_error)
    if zk.is_consumer_group:
        try:
            stored = consumer.stored_description(zk.group, record, {})
        except StateError as exc:
            return GroupSummary(zk.group, CORRUPT, found_in, owner=coordinator_of(zk.owner_node_id, daemons),
                                error=str(exc))
        return GroupSummary(zk.group, stored.state, found_in, str(record.get("os", "zookeeper")),
                            len(stored.members), None, coordinator_of(zk.owner_node_id, daemons),
                            group_type=CONSUMER_TYPE, group_epoch=stored.group_epoch,
                            assignment_epoch=stored.assignment_epoch)
    if record is not None:
        return GroupSummary(zk.group, str(record.get("s", "-")), found_in, str(record.get("os", "zookeeper")),
                            len(record.get("m") or ()), record.get("g"), coordinator_of(zk.owner_node_id, daemons),
                            group_type=CLASSIC_TYPE)
    if zk.legacy:
        return GroupSummary(zk.group, "Stable" if zk.legacy_ids else "Empty", found_in, "zookeeper",
                            len(zk.legacy_ids))
    group = kafka_group or KafkaGroupInfo("Dead", 0)
    return GroupSummary(zk.group, group.state, found_in, "kafka", group.members)
