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
        "type": "classic" | "consumer" | null,       # Kafka's group type; null: legacy or Kafka-only
        "state": "Stable",               # classic: Empty PreparingRebalance CompletingRebalance Stable Dead
                                         # consumer: Empty Assigning Reconciling Stable Dead
        "read_from": "daemon",           # daemon (live) | zookeeper (stored) | kafka
        "generation": 7 | null,          # classic groups; null for a consumer group
        "group_epoch": 7 | null,         # consumer groups; null for a classic group
        "assignment_epoch": 7 | null,    # consumer groups: the target assignment's epoch
        "protocol_type": "consumer" | null,
        "assignment_strategy": "range" | null,   # a consumer group's server-side assignor
        "storage": "zookeeper" | "dual" | "kafka",
        "coordinator": {"node_id": 1, "host": "coord-1", "port": 9300, "live": true} | null,
        "migration": {"phase": "dual", "since_ms": 1795315596682} | null,
        "kafka_group": {"state": "Empty", "members": 0, "member_list": [{"member_id", "client_id", "host"}]} | null,
                                         # null: Kafka not asked, or its coordinator does not have the group
        "members": [{"member_id": "...", "group_instance_id": null, "client_id": "...",
                     "host": "/10.0.0.5", "partitions": 2 | null,
                     "assignment": {"orders": [0, 2]} | null,
                     "member_type": "classic" | "consumer" | null,   # the protocol the member speaks
                     "member_epoch": 7 | null, "target_assignment": {"orders": [0, 2]} | null,
                     "rack_id": null, "subscribed_topic_names": ["orders"] | null,
                     "subscribed_topic_regex": null}],  # the last five: consumer groups only
        "offsets": [{"topic": "orders", "partition": 0,
                     "current_offset": 42 | null, "zookeeper_offset": 42 | null,
                     "kafka_offset": 40 | null, "log_end_offset": 50 | null, "lag": 8 | null,
                     "member_id": "..." | null, "host": "..." | null, "client_id": "..." | null}],
        "legacy_rebalance": null | {     # registrations under <zk_root>/<group>/ids (issue 26's handover)
            "ids_dir": "/consumers/billing/ids",
            "handover": "mixed" | null,  # mixed: legacy consumers beside zkcoord's members (as in ``groups``)
            "consumers": [{"consumer_id": "billing_web-1-1700000000000-abcd1234",
                           "kind": "legacy" | "zkcoord",   # zkcoord: the form zkcoord gives its members' ids
                           "pattern": "static" | "white_list" | "black_list" | null,   # null: unreadable
                           "subscription": {"orders": 2} | null,   # topic (or regex) -> streams, as registered
                           "owned": {"orders": [0, 1]},            # owner znodes naming its threads
                           "problem": null | "... cannot be read as a legacy consumer registration ...",
                           "member": null | "console-consumer-..."}],   # zkcoord: the member it stands for
            "unowned": {"orders": [3]},  # partitions of subscribed topics no owner znode holds
            "other_owners": [{"thread_id": "x-0", "owned": {"orders": [4]}}]},  # threads of no registration
        "notes": ["..."]}],
     "errors": [{"group": "nope", "error": "not-found" | "corrupt", "message": "..."}]}

With ``--watch`` each line also has ``"at"`` (local time of the refresh);
a refresh that failed is ``{"schema": "...", "error": "...", "at": "..."}``.

``zkcoord groups --output json``::

    {"schema": "zkcoord/groups/v1", "zookeeper": ..., "zk_root": ..., "bootstrap_servers": ...,
     "daemons": [...], "notes": [...],
     "groups": [{"group": "billing", "state": "Stable", "generation": 7 | null,
                 "owner": {"node_id": 1, "host": ..., "port": ..., "live": true} | null,
                 "members": 2 | null, "storage": "dual" | null, "sources": ["zkcoord", "legacy"],
                 "error": null | "state znode /coordinators/g/state of group 'g' is ...",
                 "type": "classic" | "consumer" | null, "group_epoch": 7 | null,
                 "assignment_epoch": 7 | null,
                 "legacy_consumers": 1,   # registrations under <zk_root>/<group>/ids not in zkcoord's form
                 "handover": "mixed" | null}]}   # mixed: legacy consumers and zkcoord's members in one group

A group whose state znode is not a valid record is listed with state
``"Corrupt"`` and ``error`` saying what is wrong (``describe`` reports it
in ``errors`` with ``"error": "corrupt"``); the other groups are unaffected.

Meanings: ``current_offset`` is where the group resumes: the ZooKeeper
offset in ``zookeeper`` storage, Kafka's in ``kafka``, the larger of the two
in ``dual`` (the dual-commit rule); ``null`` when nothing is committed (or
the store was not read: see ``notes``). ``lag`` is ``log_end_offset -
current_offset``. ``partitions`` / ``assignment`` are null when the
assignment cannot be decoded (not the consumer protocol, or not Stable).

Consumer groups (KIP-848, ``"type": "consumer"``): ``generation`` is null
and ``group_epoch`` / ``assignment_epoch`` are set; each member's
``assignment`` is its current assignment (partitions it owns, those it
still has to revoke included), ``target_assignment`` what the coordinator
wants it to own at ``assignment_epoch``, ``member_type`` ``consumer`` or
``classic`` (a classic-protocol member in a consumer group: an online
upgrade in progress). Members of a classic group have ``member_type``
``classic`` and null epochs and target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "DESCRIBE_SCHEMA", "GROUPS_SCHEMA", "SOURCES", "Daemon", "Coordinator", "Migration", "KafkaGroupInfo",
    "MemberView", "OffsetRow", "LegacyConsumer", "LegacyRebalance", "GroupView", "GroupError", "DescribeReport", "GroupSummary", "GroupsReport",
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


def _assignment_dict(assignment: Assignment | None) -> dict[str, list[int]] | None:
    return None if assignment is None else {t: list(ps) for t, ps in assignment}


@dataclass(frozen=True)
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: Assignment | None  # None: not known (not decodable, not Stable)
    member_type: str | None = None  # "classic" or "consumer": the protocol it speaks; None: a legacy consumer
    # consumer groups only (None otherwise):
    member_epoch: int | None = None
    target_assignment: Assignment | None = None
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None

    @property
    def partitions(self) -> int | None:
        return None if self.assignment is None else sum(len(ps) for _, ps in self.assignment)

    @property
    def target_partitions(self) -> int | None:
        return None if self.target_assignment is None else sum(len(ps) for _, ps in self.target_assignment)

    def as_dict(self) -> dict[str, Any]:
        names = self.subscribed_topic_names
        return {"member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "client_id": self.client_id, "host": self.host, "partitions": self.partitions,
                "assignment": _assignment_dict(self.assignment), "member_type": self.member_type,
                "member_epoch": self.member_epoch, "target_assignment": _assignment_dict(self.target_assignment),
                "rack_id": self.rack_id, "subscribed_topic_names": None if names is None else list(names),
                "subscribed_topic_regex": self.subscribed_topic_regex}


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
class LegacyConsumer:
    """One registration under ``<root>/<group>/ids``: a legacy consumer or a zkcoord member
    (``kind``); ``pattern`` and ``subscription`` None when it cannot be read (``problem`` says why)."""

    consumer_id: str
    kind: str  # "legacy" or "zkcoord"
    pattern: str | None
    subscription: tuple[tuple[str, int], ...] | None  # (topic or regex, streams), as registered
    owned: Assignment = ()
    problem: str | None = None
    member: str | None = None  # a zkcoord registration: the member it stands for (the group record's "ho")

    def subscription_label(self) -> str:
        """``orders:2,payments:1`` (topic or regex : streams); ``-`` when unreadable."""
        if self.subscription is None:
            return "-"
        return ",".join(f"{name}:{streams}" for name, streams in self.subscription) or "(none)"

    def as_dict(self) -> dict[str, Any]:
        return {"consumer_id": self.consumer_id, "kind": self.kind, "pattern": self.pattern,
                "subscription": None if self.subscription is None else dict(self.subscription),
                "owned": _assignment_dict(self.owned), "problem": self.problem, "member": self.member}


@dataclass(frozen=True)
class LegacyRebalance:
    """The legacy rebalance of a group with registrations (``describe``'s section)."""

    ids_dir: str
    consumers: tuple[LegacyConsumer, ...]
    handover: str | None = None  # "mixed": legacy consumers beside zkcoord's members
    unowned: Assignment = ()
    other_owners: tuple[tuple[str, Assignment], ...] = ()  # (thread id, what it owns): no registration's thread

    def summary(self) -> str:
        """``2 legacy consumer(s) and 1 zkcoord member(s) registered (mixed)``."""
        kinds = [c.kind for c in self.consumers]
        return (f"{kinds.count('legacy')} legacy consumer(s) and {kinds.count('zkcoord')} zkcoord member(s) "
                f"registered" + (f" ({self.handover})" if self.handover else ""))

    def as_dict(self) -> dict[str, Any]:
        return {"ids_dir": self.ids_dir, "handover": self.handover, "consumers": [c.as_dict() for c in self.consumers],
                "unowned": _assignment_dict(self.unowned),
                "other_owners": [{"thread_id": t, "owned": _assignment_dict(a)} for t, a in self.other_owners]}


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
    group_type: str | None = None  # "classic", "consumer"; None: legacy or Kafka-only
    group_epoch: int | None = None  # consumer groups
    assignment_epoch: int | None = None  # consumer groups: the target assignment's epoch
    legacy_rebalance: LegacyRebalance | None = None  # registrations under <root>/<group>/ids

    @property
    def mixed(self) -> bool:
        """A consumer group with classic-protocol members beside consumer ones (an online upgrade;
        Kafka 4.x's tool shows its UPGRADED column then)."""
        types = {m.member_type for m in self.members}
        return self.group_type == "consumer" and {"classic", "consumer"} <= types

    def as_dict(self) -> dict[str, Any]:
        def opt(value: Any) -> Any:
            return None if value is None else value.as_dict()
        return {"group": self.group, "sources": list(self.sources), "type": self.group_type, "state": self.state,
                "read_from": self.read_from, "generation": self.generation, "group_epoch": self.group_epoch,
                "assignment_epoch": self.assignment_epoch, "protocol_type": self.protocol_type,
                "assignment_strategy": self.assignment_strategy, "storage": self.storage,
                "coordinator": opt(self.coordinator), "migration": opt(self.migration),
                "kafka_group": opt(self.kafka_group), "members": [m.as_dict() for m in self.members],
                "offsets": [o.as_dict() for o in self.offsets], "legacy_rebalance": opt(self.legacy_rebalance),
                "notes": list(self.notes)}


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
    group_type: str | None = None  # "classic", "consumer"; None: legacy or Kafka-only (or corrupt)
    group_epoch: int | None = None  # consumer groups
    assignment_epoch: int | None = None
    legacy_consumers: int = 0  # registrations under <root>/<group>/ids that are not zkcoord members'
    handover: str | None = None  # "mixed": legacy consumers beside zkcoord's members (inspect.legacy_rebalance)

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "state": self.state, "generation": self.generation,
                "owner": None if self.owner is None else self.owner.as_dict(), "members": self.members,
                "storage": self.storage, "sources": list(self.sources), "error": self.error,
                "type": self.group_type, "group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
                "legacy_consumers": self.legacy_consumers, "handover": self.handover}


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
