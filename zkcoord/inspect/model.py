"""What ``zkcoord groups`` and ``zkcoord describe`` report, and its JSON form.

This module owns the report values (frozen dataclasses, no I/O) and their
JSON schema. The schema is a contract with scripts and monitoring: fields
are only ever *added* within a schema version; renaming or removing one, or
changing its meaning, bumps the version in ``schema``.

``zkcoord describe --output json`` (one document; with ``--watch`` one per
line and refresh)::

    {"schema": "zkcoord/describe/v1",
     "zookeeper": "zk-1:2181/kafka", "zk_root": "/consumers",
     "bootstrap_servers": "k1:9092" | null,
     "daemons": [{"node_id": 1, "host": "coord-1", "port": 9300, "version": "0.1.0"}],
     "notes": ["..."],
     "groups": [{
        "group": "billing",
        "sources": ["zkcoord", "legacy", "kafka"],   # who uses the group (zkcoord.inspect.views)
        "state": "Stable",               # Empty PreparingRebalance CompletingRebalance Stable Dead
        "read_from": "daemon",           # daemon (live) | zookeeper (stored) | kafka
        "generation": 7 | null,
        "protocol_type": "consumer" | null,
        "assignment_strategy": "range" | null,
        "storage": "zookeeper" | "dual" | "kafka",
        "coordinator": {"node_id": 1, "host": "coord-1", "port": 9300, "live": true} | null,
        "migration": {"phase": "dual", "since_ms": 1795315596682} | null,
        "kafka_group": {"state": "Empty", "members": 0, "member_list": [{"member_id", "client_id", "host"}]} | null,
                                         # null: Kafka not asked, or its coordinator does not have the group
        "members": [{"member_id": "...", "group_instance_id": null, "client_id": "...",
                     "host": "/10.0.0.5", "partitions": 2 | null,
                     "assignment": {"orders": [0, 2]} | null}],
        "offsets": [{"topic": "orders", "partition": 0,
                     "current_offset": 42 | null, "zookeeper_offset": 42 | null,
                     "kafka_offset": 40 | null, "log_end_offset": 50 | null, "lag": 8 | null,
                     "member_id": "..." | null, "host": "..." | null, "client_id": "..." | null}],
        "notes": ["..."]}],
     "errors": [{"group": "nope", "error": "not-found" | "corrupt", "message": "..."}]}

With ``--watch`` each line also has ``"at"`` (local time of the refresh);
a refresh that failed is ``{"error": "...", "at": "..."}``.

``zkcoord groups --output json``::

    {"schema": "zkcoord/groups/v1", "zookeeper": ..., "zk_root": ..., "bootstrap_servers": ...,
     "daemons": [...], "notes": [...],
     "groups": [{"group": "billing", "state": "Stable", "generation": 7 | null,
                 "owner": {"node_id": 1, "host": ..., "port": ..., "live": true} | null,
                 "members": 2 | null, "storage": "dual" | null, "sources": ["zkcoord", "legacy"],
                 "error": null | "state znode /coordinators/g/state of group 'g' is ..."}]}

A group whose state znode is not a valid record is listed with state
``"Corrupt"`` and ``error`` saying what is wrong (``describe`` reports it
in ``errors`` with ``"error": "corrupt"``); the other groups are unaffected.

Meanings: ``current_offset`` is where the group resumes: the ZooKeeper
offset in ``zookeeper`` storage, Kafka's in ``kafka``, the larger of the two
in ``dual`` (the dual-commit rule); ``null`` when nothing is committed (or
the store was not read: see ``notes``). ``lag`` is ``log_end_offset -
current_offset``. ``partitions`` / ``assignment`` are null when the
assignment cannot be decoded (not the consumer protocol, or not Stable).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "DESCRIBE_SCHEMA", "GROUPS_SCHEMA", "SOURCES", "Daemon", "Coordinator", "Migration", "KafkaGroupInfo",
    "MemberView", "OffsetRow", "GroupView", "GroupError", "DescribeReport", "GroupSummary", "GroupsReport",
]

DESCRIBE_SCHEMA = "zkcoord/describe/v1"
GROUPS_SCHEMA = "zkcoord/groups/v1"
SOURCES = ("zkcoord", "legacy", "kafka")  # who uses a group: zkcoord.inspect.views says when each applies


@dataclass(frozen=True)
class Daemon:
    """A registered zkcoord daemon (``/zkcoord/nodes/<id>``)."""

    node_id: int
    host: str
    port: int
    version: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "host": self.host, "port": self.port, "version": self.version}


@dataclass(frozen=True)
class Coordinator:
    """The daemon that owns a group; ``live``: it is registered (reachable)."""

    node_id: int
    host: str | None
    port: int | None
    live: bool

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}" if self.host is not None else "-"

    def label(self) -> str:
        """``host:port (id)`` as kafka-consumer-groups prints a coordinator."""
        if self.host is None:
            return f"node {self.node_id} (not registered)"
        return f"{self.address} ({self.node_id})"

    def as_dict(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "host": self.host, "port": self.port, "live": self.live}


@dataclass(frozen=True)
class Migration:
    phase: str
    since_ms: int | None

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "since_ms": self.since_ms}


@dataclass(frozen=True)
class KafkaGroupInfo:
    """The group as Kafka's own coordinator sees it."""

    state: str
    members: int
    # (member id, client id, host) of each member, when Kafka named them
    member_list: tuple[tuple[str, str, str], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "members": self.members,
                "member_list": [{"member_id": m, "client_id": c, "host": h} for m, c, h in self.member_list]}


Assignment = tuple[tuple[str, tuple[int, ...]], ...]  # ((topic, (partition, ...)), ...) sorted


@dataclass(frozen=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: Assignment | None  # None: not known (not decodable, not Stable)

    @property
    def partitions(self) -> int | None:
        return None if self.assignment is None else sum(len(ps) for _, ps in self.assignment)

    def as_dict(self) -> dict[str, Any]:
        return {"member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "client_id": self.client_id, "host": self.host, "partitions": self.partitions,
                "assignment": None if self.assignment is None else {t: list(ps) for t, ps in self.assignment}}


@dataclass(frozen=True)
class OffsetRow:
    topic: str
    partition: int
    current_offset: int | None
    zookeeper_offset: int | None
    kafka_offset: int | None
    log_end_offset: int | None
    member_id: str | None = None
    host: str | None = None
    client_id: str | None = None

    @property
    def lag(self) -> int | None:
        if self.current_offset is None or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.current_offset

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "current_offset": self.current_offset,
                "zookeeper_offset": self.zookeeper_offset, "kafka_offset": self.kafka_offset,
                "log_end_offset": self.log_end_offset, "lag": self.lag, "member_id": self.member_id,
                "host": self.host, "client_id": self.client_id}


@dataclass(frozen=True)
class GroupView:
    """Everything ``describe`` shows of one group (all three views)."""

    group: str
    sources: tuple[str, ...]
    state: str
    read_from: str
    storage: str
    generation: int | None = None
    protocol_type: str | None = None
    assignment_strategy: str | None = None
    coordinator: Coordinator | None = None
    migration: Migration | None = None
    kafka_group: KafkaGroupInfo | None = None
    members: tuple[MemberView, ...] = ()
    offsets: tuple[OffsetRow, ...] = ()
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        def opt(value: Any) -> Any:
            return None if value is None else value.as_dict()
        return {"group": self.group, "sources": list(self.sources), "state": self.state,
                "read_from": self.read_from, "generation": self.generation, "protocol_type": self.protocol_type,
                "assignment_strategy": self.assignment_strategy, "storage": self.storage,
                "coordinator": opt(self.coordinator), "migration": opt(self.migration),
                "kafka_group": opt(self.kafka_group), "members": [m.as_dict() for m in self.members],
                "offsets": [o.as_dict() for o in self.offsets], "notes": list(self.notes)}


@dataclass(frozen=True)
class GroupError:
    """A group that could not be described: ``error`` is ``not-found`` or ``corrupt``."""

    group: str
    error: str
    message: str
    exit_code: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "error": self.error, "message": self.message}


@dataclass(frozen=True)
class DescribeReport:
    zookeeper: str
    zk_root: str
    bootstrap_servers: str | None
    daemons: tuple[Daemon, ...]
    groups: tuple[GroupView, ...]
    errors: tuple[GroupError, ...] = ()
    notes: tuple[str, ...] = ()
    listed: bool = False  # the groups were listed (--all-groups), not named

    @property
    def exit_code(self) -> int:
        """1 for a named group that does not exist; a corrupt group is 1 only
        when it is all that was asked for (every named group corrupt), never
        with --all-groups: the other groups were described."""
        missing = [e for e in self.errors if e.error != "corrupt"]
        if missing:
            return max(e.exit_code for e in missing)
        if self.errors and not self.groups and not self.listed:
            return max(e.exit_code for e in self.errors)
        return 0

    def as_dict(self) -> dict[str, Any]:
        return {"schema": DESCRIBE_SCHEMA, "zookeeper": self.zookeeper, "zk_root": self.zk_root,
                "bootstrap_servers": self.bootstrap_servers, "daemons": [d.as_dict() for d in self.daemons],
                "notes": list(self.notes), "groups": [g.as_dict() for g in self.groups],
                "errors": [e.as_dict() for e in self.errors]}


@dataclass(frozen=True)
class GroupSummary:
    """One line of ``zkcoord groups``."""

    group: str
    state: str
    sources: tuple[str, ...]
    storage: str | None = None
    members: int | None = None
    generation: int | None = None
    owner: Coordinator | None = None
    error: str | None = None  # state "Corrupt": what is wrong with its state znode

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "state": self.state, "generation": self.generation,
                "owner": None if self.owner is None else self.owner.as_dict(), "members": self.members,
                "storage": self.storage, "sources": list(self.sources), "error": self.error}


@dataclass(frozen=True)
class GroupsReport:
    zookeeper: str
    zk_root: str
    bootstrap_servers: str | None
    daemons: tuple[Daemon, ...]
    groups: tuple[GroupSummary, ...]
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"schema": GROUPS_SCHEMA, "zookeeper": self.zookeeper, "zk_root": self.zk_root,
                "bootstrap_servers": self.bootstrap_servers, "daemons": [d.as_dict() for d in self.daemons],
                "notes": list(self.notes), "groups": [g.as_dict() for g in self.groups]}
