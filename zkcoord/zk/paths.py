"""Every znode path zkcoord reads or writes, in one place.

Layout (all paths relative to the connection string's chroot)::

    /zkcoord                                   our root
    /zkcoord/nodes/<node-id>                   ephemeral, one per live daemon (JSON)
    /zkcoord/node-id-seq                       its version allocates node ids
    /zkcoord/layout                            layout version (migrations)
    /coordinators/<group>/owner/<uuid>__lock__<seq>
                                               ephemeral sequential contenders,
                                               data = node id; lowest seq owns
    /coordinators/<group>/state                the group's versioned JSON record
    <consumers>/<group>/offsets/<topic>/<p>    legacy offset: "42"
    <consumers>/<group>/offsets-metadata/<topic>/<p>
                                               commit metadata {"o":42,"m":"..."}
    /brokers/topics/<topic>                    Kafka's topic registration (JSON)

``<consumers>`` is ``/consumers`` unless configured (``/kafka/consumers``).
Commit metadata lives beside ``offsets`` rather than under it because legacy
tools list the children of ``offsets/<topic>`` and expect only partitions.
The contender names follow kazoo's ``Lock`` recipe, so
``client.Lock(owner_dir(group)).contenders()`` lists node ids, owner first.

Rules: every variable component goes through :func:`component`, which refuses
what cannot be one znode name (empty, ``.``/``..``, ``/``, characters
ZooKeeper's ``PathUtils`` rejects) with a :class:`~zkcoord.errors.UsageError`.
Nothing here does I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zkcoord.errors import ConfigError, UsageError

__all__ = [
    "ROOT", "NODES", "NODE_ID_SEQUENCE", "LAYOUT", "COORDINATORS", "BROKER_TOPICS",
    "DEFAULT_CONSUMERS_ROOT", "CONTENDER_MARKER", "component", "node", "coordinator",
    "owner_dir", "contender", "contender_sequence", "state", "broker_topic",
    "check_absolute", "partition_name", "OffsetPaths",
]

ROOT = "/zkcoord"
NODES = f"{ROOT}/nodes"
NODE_ID_SEQUENCE = f"{ROOT}/node-id-seq"
LAYOUT = f"{ROOT}/layout"
COORDINATORS = "/coordinators"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
DEFAULT_CONSUMERS_ROOT = "/consumers"

# kazoo's Lock recipe names contenders "<uuid hex>__lock__<10-digit seq>".
CONTENDER_MARKER = "__lock__"
_CONTENDER_RE = re.compile(re.escape(CONTENDER_MARKER) + r"(-?\d{10})$")

OFFSETS = "offsets"
OFFSETS_METADATA = "offsets-metadata"


def _forbidden(ch: str) -> bool:
    code = ord(ch)  # the code points ZooKeeper's PathUtils.validatePath rejects
    return code < 0x20 or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xF8FF or 0xFFF0 <= code <= 0xFFFF


def component(value: object, what: str) -> str:
    """``value`` if it can be one znode name, else UsageError naming ``what``."""
    if not isinstance(value, str):
        raise UsageError(f"{what} must be a string, got {value!r}")
    if value in ("", ".", ".."):
        raise UsageError(f"{what} {value!r} cannot name a znode: it must not be empty, '.' or '..'")
    if "/" in value:
        raise UsageError(f"{what} {value!r} cannot name a znode: it must not contain '/'")
    bad = next((ch for ch in value if _forbidden(ch)), None)
    if bad is not None:
        raise UsageError(f"{what} {value!r} cannot name a znode: character U+{ord(bad):04X} is not allowed")
    return value


def partition_name(value: object) -> str:
    """The znode name of a partition number (``"7"``), else UsageError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"partition must be a whole number >= 0, got {value!r}")
    return str(value)


def check_absolute(path: str, what: str) -> str:
    """An absolute path like ``/kafka/consumers``, else ConfigError."""
    if not isinstance(path, str) or not path.startswith("/") or (path != "/" and path.endswith("/")):
        raise ConfigError(f"{what} {path!r} must start with '/' and not end with one")
    if path != "/":
        for part in path[1:].split("/"):
            try:
                component(part, f"{what} component")
            except UsageError as exc:
                raise ConfigError(f"{what} {path!r} is not a valid znode path: {exc}") from None
    return path


def node(node_id: int) -> str:
    """``/zkcoord/nodes/<node-id>``; node ids are Kafka node ids (int32 >= 0)."""
    if isinstance(node_id, bool) or not isinstance(node_id, int) or not 0 <= node_id <= 2**31 - 1:
        raise UsageError(f"node id must be a whole number from 0 to {2**31 - 1}, got {node_id!r}")
    return f"{NODES}/{node_id}"


def coordinator(group: str) -> str:
    return f"{COORDINATORS}/{component(group, 'group id')}"


def owner_dir(group: str) -> str:
    return f"{coordinator(group)}/owner"


def contender(group: str, name: str) -> str:
    return f"{owner_dir(group)}/{component(name, 'contender name')}"


def contender_sequence(name: str) -> str | None:
    """The 10-digit sequence of a contender name, or None if it is not one."""
    match = _CONTENDER_RE.search(name)
    return match.group(1) if match else None


def state(group: str) -> str:
    return f"{coordinator(group)}/state"


def broker_registration(broker_id: int) -> str:
    """Kafka's (ZooKeeper mode) ephemeral registration of a live broker."""
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or broker_id < 0:
        raise UsageError(f"broker id {broker_id!r} is not a whole number >= 0")
    return f"{BROKER_IDS}/{broker_id}"


def broker_topic(topic: str) -> str:
    return f"{BROKER_TOPICS}/{component(topic, 'topic')}"


@dataclass(frozen=True)
class OffsetPaths:
    """The legacy offset layout under a configurable consumers root."""

    root: str = DEFAULT_CONSUMERS_ROOT

    def __post_init__(self) -> None:
        check_absolute(self.root, "offsets root")
        if self.root == "/":
            raise ConfigError("offsets root must not be '/'; the legacy default is /consumers")

    def group(self, group: str) -> str:
        return f"{self.root}/{component(group, 'group id')}"

    def offsets_dir(self, group: str) -> str:
        return f"{self.group(group)}/{OFFSETS}"

    def topic_dir(self, group: str, topic: str) -> str:
        return f"{self.offsets_dir(group)}/{component(topic, 'topic')}"

    def partition(self, group: str, topic: str, partition: int) -> str:
        return f"{self.topic_dir(group, topic)}/{partition_name(partition)}"

    def metadata_dir(self, group: str) -> str:
        return f"{self.group(group)}/{OFFSETS_METADATA}"

    def metadata_topic_dir(self, group: str, topic: str) -> str:
        return f"{self.metadata_dir(group)}/{component(topic, 'topic')}"

    def metadata(self, group: str, topic: str, partition: int) -> str:
        return f"{self.metadata_topic_dir(group, topic)}/{partition_name(partition)}"


# -- the migration toolkit ----------------------------------------------------
# /zkcoord/migrations/<group>                 the group's migration record (JSON)
# /zkcoord/migrations/<group>/backup          offsets before `migrate apply` (JSON)
# /zkcoord/migrations/<group>/archive         legacy offsets at `migrate finalize` (JSON)
# /zkcoord/migrations/<group>/mode-request    the offset-storage mode a migrate
#                                             command asks the group's owner for
MIGRATIONS = f"{ROOT}/migrations"

__all__ += ["MIGRATIONS", "migration", "migration_backup", "migration_archive", "mode_request"]


def migration(group: str) -> str:
    return f"{MIGRATIONS}/{component(group, 'group id')}"


def migration_backup(group: str) -> str:
    return f"{migration(group)}/backup"


def migration_archive(group: str) -> str:
    return f"{migration(group)}/archive"


def mode_request(group: str) -> str:
    return f"{migration(group)}/mode-request"
