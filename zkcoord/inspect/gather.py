"""Gathering one ``describe`` or ``groups`` report from ZooKeeper, the daemons and Kafka.

This module owns the order of the questions and what happens when a
service does not answer; the answers become a report through the pure
rules of :mod:`zkcoord.inspect.views`.

1. ZooKeeper first, always (:mod:`zkcoord.zk.group_reads`): the registered
   daemons, then every group at once. ZooKeeper not answering is a
   :class:`~zkcoord.errors.ServiceUnavailableError` (it names the address
   and the time-out): without it there is nothing to show.
2. Each owner daemon once, for all the groups it owns
   (:mod:`zkcoord.inspect.live`): DescribeGroups for its classic groups,
   ConsumerGroupDescribe for its consumer groups, on one connection. A
   daemon that does not answer costs at most ``live_timeout_s``; its groups
   are shown as stored, with a note. With every daemon down, the report is
   ZooKeeper's alone and says so.
3. Kafka last, only with bootstrap servers, batched for all groups: Kafka's
   view of each group, committed offsets (groups in ``dual`` or ``kafka``
   storage, and groups zkcoord does not manage), the ids of the topics of
   consumer groups shown as stored whose ids ZooKeeper did not name,
   partition counts, then the log ends. Kafka not answering is a note, not
   an error: what ZooKeeper holds is still shown. Kafka calls block, so
   they run in a worker thread.
4. Daemons and brokers are logged in to with the same Kafka client settings
   (``security``: in a secured deployment they share the users). A refused
   login, by a daemon or by Kafka, is raised
   (:class:`~zkcoord.errors.AuthenticationError`): the settings are wrong,
   and a report quietly missing what they should have read would hide it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence

from zkcoord.core.group import GroupDescription
from zkcoord.errors import AuthenticationError, StateError, ZkcoordError
from zkcoord.inspect import consumer, views
from zkcoord.inspect.live import Described, describe_live
from zkcoord.inspect.model import (
    Daemon, DescribeReport, GroupError, GroupsReport, GroupSummary, GroupView, KafkaGroupInfo,
)
from zkcoord.inspect.views import Description, KafkaFacts, LiveFacts, TopicPartition
from zkcoord.kafka.offsets import KafkaOffsets
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.group_reads import (
    ZkFacts, consumer_topic_names, list_legacy_groups, list_zkcoord_groups, read_daemons, read_group,
)
from zkcoord.zk.modes import TOOL_NODE_ID
from zkcoord.zk.paths import OffsetPaths

__all__ = ["Inspector", "select", "NO_KAFKA", "NO_DAEMONS"]

NO_KAFKA = "LOG-END-OFFSET and LAG need Kafka: pass --bootstrap-servers (or set ZKCOORD_BOOTSTRAP_SERVERS)"
NO_DAEMONS = ("no zkcoord daemon is registered under /zkcoord/nodes (all down?): read from ZooKeeper directly; "
              "states and members are as last stored")


def select(summaries: Iterable[GroupSummary], states: Sequence[str] = (), modes: Sequence[str] = (),
           types: Sequence[str] = ()) -> tuple[GroupSummary, ...]:
    """The summaries whose state (case-insensitive), storage mode and group type are among those asked for."""
    wanted_states = {s.lower() for s in states}
    return tuple(s for s in summaries
                 if (not wanted_states or s.state.lower() in wanted_states) and (not modes or s.storage in modes)
                 and (not types or s.group_type in types))


class Inspector:
    """Reads reports through a started ZooKeeper connection and, optionally,
    a (not yet started) :class:`KafkaOffsets`; no I/O in the constructor.
    ``security``: the daemons' login (a KafkaClientSecurity; None: PLAINTEXT)."""

    def __init__(self, conn: ZkConnection, *, zk_root: str, kafka: KafkaOffsets | None = None,
                 live_timeout_s: float = 3.0, security=None) -> None:
        self._conn = conn
        self.paths = OffsetPaths(zk_root)
        self._kafka = kafka
        self.live_timeout_s = live_timeout_s
        self.security = security

    @property
    def bootstrap_servers(self) -> str | None:
        return None if self._kafka is None else self._kafka.bootstrap_servers

    # ------------------------------------------------------------ describe
    async def describe(self, groups: Sequence[str]) -> DescribeReport:
        names = list(dict.fromkeys(groups))
        for name in names:
            self.paths.group(name)  # UsageError for a name that cannot be a group, before any I/O
        daemons = _daemons(await read_daemons(self._conn))
        facts = list(await asyncio.gather(*(read_group(self._conn, self.paths, g) for g in names)))
        lives = await self._ask_owners(facts, daemons)
        notes: list[str] = []
        kafka: dict[str, KafkaFacts] = {}
        if self._kafka is None:
            notes.append(NO_KAFKA)
        else:
            kafka, kafka_notes = await asyncio.to_thread(self._kafka_for_describe, facts, lives)
            notes += kafka_notes
        shown: list[GroupView] = []
        errors: list[GroupError] = []
        for zk in facts:
            built = views.build_view(zk, lives.get(zk.group, LiveFacts()), kafka.get(zk.group, KafkaFacts()),
                                     daemons, zk_root=self.paths.root, bootstrap_servers=self.bootstrap_servers,
                                     tool_node_id=TOOL_NODE_ID)
            (errors if isinstance(built, GroupError) else shown).append(built)
        if not daemons and any("zkcoord" in v.sources for v in shown):
            notes.insert(0, NO_DAEMONS)
        return DescribeReport(self._conn.hosts, self.paths.root, self.bootstrap_servers,
                              tuple(daemons.values()), tuple(shown), tuple(errors), tuple(notes))

    async def _ask_owners(self, facts: Sequence[ZkFacts], daemons: Mapping[int, Daemon]) -> dict[str, LiveFacts]:
        by_owner: dict[int, tuple[list[str], list[str]]] = {}  # node -> (classic groups, consumer groups)
        for zk in facts:
            if zk.record is not None and zk.owner_node_id in daemons:
                asked = by_owner.setdefault(zk.owner_node_id, ([], []))
                asked[1 if zk.is_consumer_group else 0].append(zk.group)
        answers = await asyncio.gather(*(
            describe_live(daemons[node].host, daemons[node].port, classic, self.live_timeout_s, self.security,
                          consumer_groups=consumers)
            for node, (classic, consumers) in by_owner.items()))
        lives: dict[str, LiveFacts] = {}
        for answer in answers:
            for group, outcome in answer.items():
                lives[group] = _live_facts(outcome)
        return lives

    def _kafka_for_describe(self, facts: Sequence[ZkFacts],
                            lives: Mapping[str, LiveFacts]) -> tuple[dict[str, KafkaFacts], list[str]]:
        """Kafka's answers per group (in a worker thread), and notes on what failed."""
        names = [zk.group for zk in facts]
        found: dict[str, dict] = {g: {"asked": True} for g in names}
        try:
            self._kafka.start()
            for group, state in self._kafka.groups(names).items():
                found[group]["group"] = KafkaGroupInfo(state.state, state.members, state.member_ids)
            wanted = [zk.group for zk in facts if zk.record is None or zk.record.get("os", "zookeeper") != "zookeeper"]
            for group, committed in self._kafka.committed_offsets(wanted).items():
                found[group]["committed"] = committed
            for group, topic_ids in self._topic_ids_for_stored(facts, lives).items():
                found[group]["topic_ids"] = topic_ids
            partitions: dict[str, set[TopicPartition]] = {}
            for zk in facts:
                partitions[zk.group] = views.wanted_partitions(zk, _description(zk, lives, found[zk.group]),
                                                               found[zk.group].get("committed"))
            log_ends, missing = self._log_ends(set().union(*partitions.values()))
            for group, tps in partitions.items():
                found[group]["log_ends"] = {tp: log_ends[tp] for tp in tps if tp in log_ends}
                found[group]["missing_topics"] = missing
        except AuthenticationError:
            raise
        except ZkcoordError as exc:
            return {g: KafkaFacts(**f) for g, f in found.items()}, [f"Kafka: {exc}"]
        return {g: KafkaFacts(**f) for g, f in found.items()}, []

    def _topic_ids_for_stored(self, facts: Sequence[ZkFacts],
                              lives: Mapping[str, LiveFacts]) -> dict[str, dict[str, str]]:
        """Kafka's names of the topic ids of consumer groups shown as stored that ZooKeeper did not name."""
        wanted: dict[str, list[str]] = {}
        for zk in facts:
            if zk.is_consumer_group and lives.get(zk.group, LiveFacts()).description is None \
                    and consumer.unnamed_topic_ids(zk.record, zk.topic_ids):
                wanted[zk.group] = [n for n in consumer_topic_names(zk.record) if n not in zk.topic_ids]
        if not wanted:
            return {}
        ids = self._kafka.topic_ids(set().union(*wanted.values()))
        return {group: {n: ids[n] for n in names if ids.get(n)} for group, names in wanted.items()}

    def _log_ends(self, partitions: set[TopicPartition]) -> tuple[dict[TopicPartition, int], frozenset[str]]:
        counts = self._kafka.partition_counts({t for t, _ in partitions})
        existing = {(t, p) for t, p in partitions if counts.get(t) is not None and p < counts[t]}
        ranges = self._kafka.log_ranges(existing)
        return {tp: r.end for tp, r in ranges.items()}, frozenset(t for t, n in counts.items() if n is None)

    # -------------------------------------------------------------- groups
    async def groups(self) -> GroupsReport:
        """Every group zkcoord, the legacy layout and (with bootstrap servers) Kafka know."""
        daemons = _daemons(await read_daemons(self._conn))
        zkcoord, legacy = await asyncio.gather(list_zkcoord_groups(self._conn),
                                               list_legacy_groups(self._conn, self.paths))
        names = sorted(set(zkcoord) | set(legacy))
        facts = await asyncio.gather(*(read_group(self._conn, self.paths, g, with_offsets=False) for g in names))
        notes: list[str] = []
        in_kafka: set[str] = set()
        kafka_groups: dict[str, KafkaGroupInfo] = {}
        if self._kafka is None:
            notes.append("groups only Kafka knows are not listed: pass --bootstrap-servers (or set "
                         "ZKCOORD_BOOTSTRAP_SERVERS)")
        else:
            kafka_written = {zk.group for zk in facts if zk.record and zk.record.get("os", "zookeeper") != "zookeeper"}
            in_kafka, kafka_groups, kafka_notes = await asyncio.to_thread(self._kafka_for_groups, set(names),
                                                                          kafka_written)
            notes += kafka_notes
        summaries = [views.summarize(zk, kafka_groups.get(zk.group), zk.group in in_kafka, daemons) for zk in facts]
        summaries += [views.summarize(ZkFacts(g), kafka_groups.get(g), True, daemons)
                      for g in sorted(in_kafka - set(names))]
        if not daemons and zkcoord:
            notes.insert(0, NO_DAEMONS)
        return GroupsReport(self._conn.hosts, self.paths.root, self.bootstrap_servers, tuple(daemons.values()),
                            tuple(sorted(summaries, key=lambda s: s.group)), tuple(notes))

    def _kafka_for_groups(self, known: set[str],
                          kafka_written: set[str]) -> tuple[set[str], dict[str, KafkaGroupInfo], list[str]]:
        """Kafka's groups, and its view of those zkcoord does not manage or whose offsets zkcoord writes to
        Kafka (``kafka_written``: whether Kafka's coordinator has members of its own in them)."""
        try:
            self._kafka.start()
            listed = set(self._kafka.list_groups())
            described = self._kafka.groups((listed - known) | (listed & kafka_written))
        except AuthenticationError:
            raise
        except ZkcoordError as exc:
            return set(), {}, [f"Kafka: {exc}; groups only Kafka knows are not listed"]
        return listed, {g: KafkaGroupInfo(s.state, s.members) for g, s in described.items()}, []


def _live_facts(outcome: Described | str) -> LiveFacts:
    if isinstance(outcome, str):
        return LiveFacts(error=outcome)
    if isinstance(outcome, GroupDescription) and outcome.state == "Dead":  # not loaded yet (it just won the election)
        return LiveFacts(error="the owner has not loaded the group yet")
    return LiveFacts(description=outcome)


def _description(zk: ZkFacts, lives: Mapping[str, LiveFacts], found: Mapping) -> Description | None:
    try:
        return views.description_of(zk, lives.get(zk.group, LiveFacts()), found.get("topic_ids"))
    except StateError:
        return None


def _daemons(registered) -> dict[int, Daemon]:
    """The registrations (:class:`~zkcoord.zk.nodes.NodeInfo`) as inspection shows daemons."""
    return {node_id: Daemon(node_id, info.host, info.port, info.version) for node_id, info in registered.items()}

