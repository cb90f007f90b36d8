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
    /coordinators/<group>/state-parts/<token>-<i>
                                               a packed record's body, in pieces
                                               (zkcoord.core.packed_record)
    <consumers>/<group>/offsets/<topic>/<p>    legacy offset: "42"
    <consumers>/<group>/offsets-metadata/<topic>/<p>
                                               commit metadata {"o":42,"m":"..."}
    <consumers>/<group>/ids/<consumer id>      ephemeral: a legacy consumer's registration,
                                               or a zkcoord member's during a handover
    <consumers>/<group>/owners/<topic>/<p>     ephemeral: the thread id consuming the partition
    /brokers/topics/<topic>                    Kafka's topic registration (JSON)

``<consumers>`` is ``/consumers`` unless configured (``/kafka/consumers``).
Commit metadata lives beside ``offsets`` rather than under it because legacy
tools list the children of ``offsets/<topic>`` and expect only partitions.
The contender names follow kazoo's ``Lock`` recipe, so
``client.Lock(owner_dir(group)).contenders()`` lists node ids, owner first.

Rules: every variable component goes through :func:`component`, which refuses
what cannot be one znode name (empty, ``.``/``..``, ``/``, characters
ZooKeeper's ``PathUtils`` rejects, characters above U+FFFF, which Java sees as
UTF-16 surrogates) with a :class:`~zkcoord.errors.UsageError`.
Nothing here does I/O.

Group ids are the exception: Kafka accepts any string as a group id (the
empty one too, for OffsetCommit / OffsetFetch / DescribeGroups /
DeleteGroups), so a group's znode name is :func:`group_name` of its id, and
every listing of ``/coordinators``, ``<consumers>`` or
``/zkcoord/migrations`` turns names back into ids with :func:`group_ids`:

* An id that is a valid znode name and does not start with
  :data:`ENCODED_MARKER` (``%%``) is its own name: every group a legacy
  consumer or an earlier zkcoord stored keeps its znodes.
* Any other id is named ``%%`` followed by the id with each character that
  cannot be in a znode name (those above, ``/``) and ``%`` itself written
  as ``%XX`` per UTF-8 byte: ``"🙂"`` is ``%%%F0%9F%99%82``, ``"a/b"`` is
  ``%%a%2Fb``, ``""`` is ``%%``, ``".."`` is ``%%..``, ``"%%x"`` is
  ``%%%25%25x``.

Names that start with ``%%`` are only ever encoded ones, and the escaped
part decodes one way, so two ids never share a name; a name that is not
exactly what :func:`group_name` makes of its decoding (``%%%41``, say) is
nobody's and listings skip it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from zkcoord.errors import ConfigError, UsageError

__all__ = [
    "ROOT", "NODES", "NODE_SESSIONS", "NODE_ID_SEQUENCE", "LAYOUT", "COORDINATORS", "BROKER_TOPICS",
    "DEFAULT_CONSUMERS_ROOT", "CONTENDER_MARKER", "component", "node", "coordinator",
    "owner_dir", "contender", "contender_sequence", "state", "state_parts_dir", "state_part", "broker_topic",
    "node_session", "check_absolute", "partition_name", "OffsetPaths", "ENCODED_MARKER", "group_name", "group_id_of",
    "group_ids",
]

ROOT = "/zkcoord"
NODES = f"{ROOT}/nodes"
NODE_SESSIONS = f"{ROOT}/node-sessions"  # each live daemon's session id and password (zkcoord.zk.nodes)
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
IDS = "ids"
OWNERS = "owners"


# The code points ZooKeeper's PathUtils.validatePath rejects in a znode name (above U+FFFF Java
# holds a surrogate pair, which it rejects too), as a regular expression's character class.
_FORBIDDEN_CHARS = "\\x00-\\x1f\\x7f-\\x9f\\ud800-\\uf8ff\\ufff0-\\U0010ffff"
_FORBIDDEN = re.compile(f"[{_FORBIDDEN_CHARS}]")


def component(value: object, what: str) -> str:
    """``value`` if it can be one znode name, else UsageError naming ``what``."""
    if not isinstance(value, str):
        raise UsageError(f"{what} must be a string, got {value!r}")
    if value in ("", ".", ".."):
        raise UsageError(f"{what} {value!r} cannot name a znode: it must not be empty, '.' or '..'")
    if "/" in value:
        raise UsageError(f"{what} {value!r} cannot name a znode: it must not contain '/'")
    bad = _FORBIDDEN.search(value)
    if bad is not None:
        raise UsageError(f"{what} {value!r} cannot name a znode: character U+{ord(bad.group()):04X} is not allowed")
    return value


ENCODED_MARKER = "%%"
_UNNAMEABLE = re.compile(f"[{_FORBIDDEN_CHARS}/]")  # and '/'
_ESCAPED = re.compile(f"[{_FORBIDDEN_CHARS}/%]")  # and '%' once encoded


def _escape(match: re.Match) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group().encode("utf-8", "surrogatepass"))


def group_name(group: object) -> str:
    """The znode name of a group id (module docstring); UsageError if it is not a string.

    >>> group_name("payments"), group_name("a/b"), group_name(""), group_name("\U0001F642")
    ('payments', '%%a%2Fb', '%%', '%%%F0%9F%99%82')
    """
    if not isinstance(group, str):
        raise UsageError(f"group id must be a string, got {group!r}")
    if group not in ("", ".", "..") and not group.startswith(ENCODED_MARKER) and _UNNAMEABLE.search(group) is None:
        return group  # '%' alone is allowed here: only names starting with '%%' are encoded
    return ENCODED_MARKER + _ESCAPED.sub(_escape, group)


def group_id_of(name: str) -> str | None:
    """The group id whose znode name is ``name``; None if no id has that name.

    >>> group_id_of("payments"), group_id_of("%%a%2Fb"), group_id_of("%%%41")
    ('payments', 'a/b', None)
    """
    if not name.startswith(ENCODED_MARKER):
        group = name
    else:
        try:
            group = unquote(name[len(ENCODED_MARKER):], encoding="utf-8", errors="surrogatepass")
        except UnicodeDecodeError:
            return None
    try:
        return group if group_name(group) == name else None
    except UsageError:
        return None


def group_ids(names: Iterable[str]) -> list[str]:
    """The group ids of the znode names of a listing, sorted; names that are no
    group's (module docstring) are left out."""
    return sorted(g for g in map(group_id_of, names) if g is not None)


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


def node_session(node_id: int) -> str:
    """``/zkcoord/node-sessions/<node-id>``: the session a live daemon registered with."""
    return f"{NODE_SESSIONS}/{node(node_id).rsplit('/', 1)[1]}"


def coordinator(group: str) -> str:
    return f"{COORDINATORS}/{group_name(group)}"


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


def state_parts_dir(group: str) -> str:
    """The parts of a packed state (:mod:`zkcoord.core.packed_record`)."""
    return f"{coordinator(group)}/state-parts"


def state_part(group: str, name: str) -> str:
    return f"{state_parts_dir(group)}/{component(name, 'state part name')}"


def members_dir(group: str) -> str:
    """A consumer group's member records (KIP-848: one znode per member)."""
    return f"{coordinator(group)}/members"


def target(group: str) -> str:
    """A consumer group's target assignment record (:mod:`zkcoord.core.consumer.record`)."""
    return f"{coordinator(group)}/target"


def member(group: str, member_id: str) -> str:
    """One member's record; the member id named as a group id is (any string)."""
    return f"{members_dir(group)}/{group_name(member_id)}"


def member_ids(names) -> list[str]:
    """The member ids of a members directory's znode names (as :func:`group_ids` decodes)."""
    return group_ids(names)


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
        return f"{self.root}/{group_name(group)}"

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

    # The legacy consumers' rebalance (Kafka's ZKGroupDirs / ZKGroupTopicDirs): registrations and
    # partition owners, ephemeral, written by legacy consumers and, during a handover, by zkcoord.
    def ids_dir(self, group: str) -> str:
        return f"{self.group(group)}/{IDS}"

    def registration(self, group: str, consumer_id: str) -> str:
        return f"{self.ids_dir(group)}/{component(consumer_id, 'consumer id')}"

    def owners_dir(self, group: str) -> str:
        return f"{self.group(group)}/{OWNERS}"

    def owners_topic_dir(self, group: str, topic: str) -> str:
        return f"{self.owners_dir(group)}/{component(topic, 'topic')}"

    def owner(self, group: str, topic: str, partition: int) -> str:
        return f"{self.owners_topic_dir(group, topic)}/{partition_name(partition)}"


# -- the migration toolkit ----------------------------------------------------
# /zkcoord/migrations/<group>                 the group's migration record (JSON)
# /zkcoord/migrations/<group>/backup          offsets before `migrate apply` (JSON)
# /zkcoord/migrations/<group>/archive         legacy offsets at `migrate finalize` (JSON)
# /zkcoord/migrations/<group>/mode-request    the offset-storage mode a migrate
#                                             command asks the group's owner for
MIGRATIONS = f"{ROOT}/migrations"

__all__ += ["MIGRATIONS", "migration", "migration_backup", "migration_archive", "mode_request"]


def migration(group: str) -> str:
    return f"{MIGRATIONS}/{group_name(group)}"


def migration_backup(group: str) -> str:
    return f"{migration(group)}/backup"


def migration_archive(group: str) -> str:
    return f"{migration(group)}/archive"


def mode_request(group: str) -> str:
    return f"{migration(group)}/mode-request"


# -- live handovers ---------------------------------------------------------------
# /zkcoord/handovers/<group>      persistent marker: the group is in a handover and its
#                                 owner holds persistent znodes under /consumers/<group>
#                                 for its members; a group without an owner is adopted by
#                                 a live daemon (zkcoord.server.handover.Handovers)
HANDOVERS = f"{ROOT}/handovers"

__all__ += ["HANDOVERS", "handover_marker"]


def handover_marker(group: str) -> str:
    return f"{HANDOVERS}/{group_name(group)}"
